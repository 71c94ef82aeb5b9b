"""What the build adds to the chapter pages, and the short-answers page.

* Every chapter page opens, right after its title, with a table of the verdicts its notebook
  recorded (ID, claim, badge, a reason of at most 20 words); chapters 1–5 then name the later
  claims (depth, trained models, experiments) that answer the same question.
* The last page of every chapter ends with "The answer to the thread": the short answer of each
  source question the chapter belongs to.
* ``book/answers.md`` holds a ``{short-answers}`` placeholder: one card per source question.

The texts (questions, answers, reasons) are ``book/_data/answers.yml``; every badge is generated
from the recorded verdicts. Each text names the verdict it was written for, and
:func:`problems` reports every text whose claim now has another verdict (a build warning, an
error under ``-W``, and a failure of ``tests/test_answers.py``).

The chapter pages are notebooks, which are never edited for this: the generated markdown is
inserted into the notebook's JSON text as Sphinx reads it (``source-read``), so nothing needs
re-executing and the stored outputs are untouched.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .markup import _badge, _container, _ref, _role_text, _table, escape, inline
from .scan import Book, VerdictOutput, registry

ANSWERS_PATH = Path("book") / "_data" / "answers.yml"
MAX_REASON_WORDS = 20
MAX_ANSWER_SENTENCES = 3
#: ``Q4`` or ``C3 on smollm`` (a recheck on the model with that slug).
KEY = re.compile(r"^(?P<id>[A-Z]\d+)(?: on (?P<slug>[a-z0-9]+))?$")
#: A claim cited in an answer: ``[Q4]``, ``[C3 on smollm]``.
CITATION = re.compile(r"\[(?P<key>[A-Z]\d+(?: on [a-z0-9]+)?)\]")
SLUG_TO_MODEL = {m.slug: name for name, m in registry.MODELS.items()}
#: The chapters whose claims answer a question again, later in the book.
LATER_CHAPTERS = (6, 7, 8)


def load_answers(root: Path) -> dict:
    """``book/_data/answers.yml``: ``{"threads": [...], "chapter_threads": {...}, "reasons": {...}}``."""
    import yaml
    data = yaml.safe_load((root / ANSWERS_PATH).read_text(encoding="utf-8")) or {}
    data.setdefault("threads", [])
    data.setdefault("chapter_threads", {})
    data.setdefault("reasons", {})
    return data


def key_of(v: VerdictOutput) -> str:
    """``"Q4"`` for a claim's own verdict, ``"C3 on smollm"`` for a recheck."""
    if v.model is None:
        return v.id
    model = registry.MODELS.get(v.model)
    return f"{v.id} on {model.slug if model else v.model}"


def lookup(book: Book, key: str) -> VerdictOutput | None:
    """The one recorded verdict a key names (``None`` if there is none, or more than one)."""
    match = KEY.match(str(key))
    if not match:
        return None
    model = SLUG_TO_MODEL.get(match["slug"]) if match["slug"] else None
    if match["slug"] and model is None:
        return None
    found = book.rechecks(match["id"], model) if model else book.records(match["id"])
    return found[0] if len(found) == 1 else None


def _label(v: VerdictOutput, compact: bool = False) -> str:
    """``C3 on SmolLM2 decoder`` (``C3 · SmolLM2`` in a table's narrow ID column)."""
    if v.model not in registry.MODELS:
        return v.id
    short = registry.MODELS[v.model].short
    return f"{v.id} · {short.split()[0]}" if compact else f"{v.id} on {short}"


def _link(book: Book, key: str, text: str | None = None) -> str:
    v = lookup(book, key)
    if v is None:
        return escape(text or key)
    return _ref(text or _label(v), v.target)


def _cited(book: Book, key: str) -> str:
    """A claim cited in an answer: its link and the badge of its recorded verdict."""
    v = lookup(book, key)
    return f"{_link(book, key)} {_badge(v.verdict if v else None)}"


def render_answer_text(book: Book, text: str) -> str:
    """An answer's text (MyST inline markdown) with each ``[Q4]`` made a link and a generated badge."""
    out, last = "", 0
    for match in CITATION.finditer(text):
        segment = text[last:match.start()]
        out += (" " if out and segment[:1].isspace() else "") + inline(segment) + f" ({_cited(book, match['key'])})"
        last = match.end()
    tail = text[last:]
    return out + (" " if out and tail[:1].isspace() else "") + inline(tail)


def sentences(text: str) -> int:
    """How many sentences a text has (citations removed)."""
    plain = CITATION.sub("", " ".join(str(text).split()))
    return len([s for s in re.split(r"(?<=[.!?])\s+", plain.strip()) if s.strip()])


def _thread_claims(book: Book, thread: dict) -> str:
    """Every claim bearing on a thread, linked, with its badge, grouped by chapter."""
    parts = []
    for key in thread.get("bears_on") or []:
        v = lookup(book, key)
        parts.append(f"{_link(book, key)} {_badge(v.verdict if v else None)}")
    return " · ".join(parts)


def judged_claim(key: str) -> str:
    """What the badge of ``key`` judges, in the reader's words: the claim as people make it (the
    registry's statement); for a recheck, the same claim tested on a trained model's weights."""
    match = KEY.match(str(key))
    claim = registry.CLAIMS.get(match["id"]) if match else None
    if claim is None:
        return ""
    text = inline(claim.statement)
    if match["slug"]:
        model = registry.MODELS.get(SLUG_TO_MODEL.get(match["slug"], ""))
        text += f" *(Rechecked on {escape(model.short) if model else match['slug']}'s trained weights.)*"
    return text


#: Where a training experiment's recorded reason names the setting it was measured in ("At depth 2 …",
#: "at depths 2, 4 and 8 …"): the card repeats it, so it follows the recorded verdict.
MEASURED_AT = re.compile(r"\b[Aa]t (depths? \d+(?:(?:, | and )\d+)*)")


def measured_at(v: VerdictOutput | None) -> str:
    """``" *(Measured at depth 2.)*"`` if ``v``'s recorded reason names its depth(s), else ``""``."""
    found = MEASURED_AT.search(v.reason) if v is not None else None
    return f" *(Measured at {found[1]}.)*" if found else ""


def _judged_list(book: Book, thread: dict) -> list[str]:
    """Each badge of the answer beside the claim it judges (a badge under a true sentence may read
    *does not hold*: it judges the popular claim, not the sentence)."""
    lines = ["*What each badge judges* (the claim as people make it; {doc}`verdicts explained </book/glossary>`):", ""]
    for key in thread.get("rests_on") or {}:
        v = lookup(book, key)
        lines.append(f"- {_link(book, key)} {_badge(v.verdict if v else None)} — {judged_claim(key)}{measured_at(v)}")
    return lines + [""]


def _reading(thread: dict) -> list[str]:
    """What the thread itself points to (``reading`` in answers.yml: a references.bib key and what
    it answers), each a citation that links its bibliography entry."""
    items = thread.get("reading") or []
    if not items:
        return []
    cited = "; ".join(f"{{cite:t}}`{r['cite']}` — {inline(r['about'])}" for r in items)
    return [f"*Read further, as the thread points to:* {cited}.", ""]


def render_card(book: Book, thread: dict) -> list[str]:
    """One short answer: the question, the answer with its badges, the claim each badge judges,
    the claims that bear on it."""
    return [f"(answer-{thread['id']})=", "",
            f"::::{{card}} {inline(thread['question'])}", ":class-card: answer-card", "",
            render_answer_text(book, thread["answer"]), "",
            *_judged_list(book, thread),
            *_reading(thread),
            f"*Every claim on this question:* {_thread_claims(book, thread)}", "::::", ""]


def render_answers_page(book: Book, answers: dict) -> str:
    """The short-answers page: one card per source question."""
    lines = ["Five public question-and-answer threads about attention started this book. Here is each "
             "question in one line and its answer in at most three sentences; every badge is the verdict "
             "the executed notebooks computed, and every ID links to the claim's section, where its "
             "evidence is.", ""]
    for thread in answers["threads"]:
        lines += render_card(book, thread)
    return "\n".join(lines)


def short_reason(answers: dict, v: VerdictOutput) -> str:
    """The table's reason for a verdict: the one written for it in answers.yml (for this verdict),
    else the stored reason's first clause (and :func:`problems` reports the missing or stale text)."""
    entry = (answers.get("reasons") or {}).get(key_of(v))
    if isinstance(entry, dict) and entry.get("reason") and entry.get("verdict") == v.verdict:
        return inline(entry["reason"])
    words = re.split(r"[;:]", v.reason, maxsplit=1)[0].split()
    return inline(" ".join(words[:MAX_REASON_WORDS]) + (" …" if len(words) > MAX_REASON_WORDS else ""))


def chapter_number(notebook: str) -> int | None:
    digits = re.match(r"\d+", Path(notebook).name)
    return int(digits.group()) if digits else None


def threads_of_chapter(answers: dict, number: int) -> list[dict]:
    by_id = {t["id"]: t for t in answers["threads"]}
    explicit = (answers.get("chapter_threads") or {}).get(number)
    if explicit:
        return [by_id[i] for i in explicit if i in by_id]
    return [t for t in answers["threads"] if number in (t.get("chapters") or [])]


def render_chapter_top(book: Book, answers: dict, notebook: str) -> str:
    """The verdict table that opens a chapter page (every verdict its notebook recorded: ID, the
    claim as people make it, badge, short reason), and for
    chapters 1–5 the later claims that answer the same question."""
    scan = book.scan_of(notebook)
    if scan is None or not scan.verdicts:
        return ""
    def link(v: VerdictOutput, text: str | None = None) -> str:
        text = text or _label(v, compact=True)
        return _ref(text, v.target) if v.target in scan.targets else escape(text)

    rows = []
    own = {v.id: v for v in scan.verdicts if v.model is None}
    models = list(dict.fromkeys(v.model for v in scan.verdicts if v.model is not None))
    if own and models and all(v.id in own for v in scan.verdicts if v.model is not None):
        # A chapter that decides its claims and decides them again elsewhere (chapter 8: synthetic
        # tasks and real text): one row per claim, the verdicts side by side (a row per verdict had
        # made the table 3.9 phone screens long, the text verdicts after all the synthetic ones).
        again = {(v.id, v.model): v for v in scan.verdicts if v.model is not None}
        for v in own.values():
            statement = inline(registry.CLAIMS[v.id].statement) if v.id in registry.CLAIMS else ""
            names = [f"On {registry.MODELS[m].short}" if m in registry.MODELS else f"On {m}" for m in models]
            # on a phone the table becomes cards: each second verdict says where it was reached
            cells = [f"{{phone-label}}`{_role_text(name)}:` " + (f"{_badge(again[v.id, m].verdict)} {link(again[v.id, m], 'why')}"
                                                     if (v.id, m) in again else "not run")
                     for name, m in zip(names, models)]
            rows.append([link(v), statement, _badge(v.verdict), *cells, short_reason(answers, v)])
        names = [f"On {registry.MODELS[m].short}" if m in registry.MODELS else f"On {m}" for m in models]
        table = _table(["ID", "Claim", "Verdict", *names, "Why"], rows, ["l"] * (4 + len(models)))
    else:
        for v in scan.verdicts:
            statement = inline(registry.CLAIMS[v.id].statement) if v.id in registry.CLAIMS else ""
            rows.append([link(v), statement, _badge(v.verdict), short_reason(answers, v)])
        table = _table(["ID", "Claim", "Verdict", "Why"], rows, ["l", "l", "l", "l"])
    lines = _container(table, "claims-table chapter-verdicts")
    number = chapter_number(notebook)
    later = []
    for thread in threads_of_chapter(answers, number) if number and number < min(LATER_CHAPTERS) else []:
        for key in thread.get("bears_on") or []:
            v = lookup(book, key)
            if v is not None and (v.model is not None or registry.CLAIMS[v.id].chapter in LATER_CHAPTERS):
                later.append(f"{_link(book, key)} {_badge(v.verdict)}")
    if later:
        lines += ["", "*The same question later in the book* (trained models, depth, training experiments): "
                  + " · ".join(dict.fromkeys(later)) + "."]
    return "\n".join(lines)


def render_chapter_end(book: Book, answers: dict, number: int) -> str:
    """"The answer to the thread" for the last page of chapter ``number``."""
    threads = threads_of_chapter(answers, number)
    if not threads:
        return ""
    lines = ["## The answer to the thread", ""]
    for thread in threads:
        lines += [f"**{inline(thread['question'])}**", ""]
        lines += [render_answer_text(book, thread["answer"]), ""]
        lines += _judged_list(book, thread)
        lines += _reading(thread)
        lines += [f"*Every claim on this question:* {_thread_claims(book, thread)}. "
                  f"All five questions: {{doc}}`Short answers </book/answers>`.", ""]
    return "\n".join(lines)


def last_notebooks(root: Path) -> dict[int, str]:
    """The last notebook (docname) of every chapter: the page that ends with the thread's answer."""
    from .scan import notebook_paths
    last: dict[int, str] = {}
    for path in notebook_paths(root):
        number = chapter_number(path.stem)
        if number is not None:
            last[number] = path.relative_to(root).with_suffix("").as_posix()
    return last


def inject_into_notebook(text: str, top: str, end: str) -> str:
    """A notebook's JSON text with ``top`` inserted after its title line (the first ``# `` line of
    the first markdown cell) and ``end`` appended as a last markdown cell."""
    nb = json.loads(text)
    cells = nb.get("cells", [])
    if top:
        for cell in cells:
            if cell.get("cell_type") != "markdown":
                continue
            source = "".join(cell["source"]) if isinstance(cell.get("source"), list) else cell.get("source", "")
            match = re.search(r"^# .*$", source, re.MULTILINE)
            if match:
                cell["source"] = source[:match.end()] + "\n\n" + top + "\n" + source[match.end():]
                break
    if end:
        cells.append({"cell_type": "markdown", "id": "answer-to-the-thread", "metadata": {}, "source": end})
    return json.dumps(nb, ensure_ascii=False)


def problems(book: Book, answers: dict, missing_reasons: bool = True) -> list[str]:
    """Every text of answers.yml that no longer fits the recorded verdicts, or breaks a rule.

    ``missing_reasons=False`` (the build) leaves out verdicts without a short reason yet (a new
    claim): their table row shows the recorded reason's first clause until one is written, and
    ``tests/test_answers.py`` reports them. A text written for another verdict is always reported."""
    out = []
    threads = answers.get("threads") or []
    if not threads:
        out.append(f"{ANSWERS_PATH.as_posix()}: no threads")
    for thread in threads:
        name = f"answer {thread.get('id')!r}"
        for field_name in ("id", "question", "answer", "rests_on", "bears_on"):
            if not thread.get(field_name):
                out.append(f"{name}: no {field_name}")
        if not thread.get("answer"):
            continue
        if sentences(thread["answer"]) > MAX_ANSWER_SENTENCES:
            out.append(f"{name}: {sentences(thread['answer'])} sentences (at most {MAX_ANSWER_SENTENCES})")
        for item in thread.get("reading") or []:
            if not (isinstance(item, dict) and item.get("cite") and item.get("about")):
                out.append(f"{name}: a reading item needs a references.bib key (cite) and what it answers (about)")
        if "\n" in thread.get("question", "") or len(thread.get("question", "")) > 120:
            out.append(f"{name}: the question is not one line")
        rests_on = thread.get("rests_on") or {}
        cited = [m["key"] for m in CITATION.finditer(thread["answer"])]
        for key in cited:
            if key not in rests_on:
                out.append(f"{name}: cites [{key}] without saying which verdict the text was written for (rests_on)")
        for key, verdict in rests_on.items():
            v = lookup(book, key)
            if v is None:
                out.append(f"{name}: rests on {key}, which has no single recorded verdict")
            elif v.verdict != verdict:
                out.append(f"{name}: written for {key} {verdict!r}, but the notebooks now record {v.verdict!r}: "
                           "rewrite the answer")
            if key not in (thread.get("bears_on") or []):
                out.append(f"{name}: rests on {key} but does not list it in bears_on")
        for key in thread.get("bears_on") or []:
            v = lookup(book, key)
            if v is None:
                out.append(f"{name}: bears on {key}, which has no single recorded verdict")
            elif not _placed_target(book, v):
                out.append(f"{name}: {key}'s section target ({v.target})= is missing")
    known = {t.get("id") for t in threads}
    for number, ids in (answers.get("chapter_threads") or {}).items():
        for i in ids:
            if i not in known:
                out.append(f"chapter_threads {number}: unknown thread {i!r}")
    reasons = answers.get("reasons") or {}
    recorded = {key_of(v): v for v in book.verdicts if v.id in registry.CLAIMS}
    for key, v in recorded.items():
        entry = reasons.get(key)
        if not isinstance(entry, dict) or not entry.get("reason"):
            if missing_reasons:
                out.append(f"reasons: no short reason for {key} ({v.where})")
            continue
        if entry.get("verdict") != v.verdict:
            out.append(f"reasons: {key}'s reason was written for {entry.get('verdict')!r}, "
                       f"the notebooks now record {v.verdict!r}: rewrite it")
        words = len(str(entry["reason"]).split())
        if words > MAX_REASON_WORDS:
            out.append(f"reasons: {key}'s reason has {words} words (at most {MAX_REASON_WORDS})")
    for key in reasons:
        if key not in recorded:
            out.append(f"reasons: {key} has no recorded verdict")
    return out


def _placed_target(book: Book, v: VerdictOutput) -> bool:
    scan = book.scan_of(v.notebook)
    return scan is not None and v.target in scan.targets
