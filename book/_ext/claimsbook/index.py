"""The claims index (every claim with its verdict and a column per trained model) and the short
headline table of the landing page."""

from __future__ import annotations

from .markup import _badge, _container, _doc, _placed, _ref, _role_text, _table, escape, inline, plain_title
from .scan import PENDING, Book, VerdictOutput, registry

def _check_text(check: dict) -> str:
    """One check in a sentence: *name* — measured M (held to H)."""
    name = inline(check.get("name", ""))
    if check.get("bears_on") == registry.COUNTEREXAMPLE:
        name = f"counterexample: {name}"
    elif check.get("bears_on") == registry.CONDITION:
        name = f"if {inline(check.get('condition') or '')}: {name}"
    return f"{name} — {inline(check.get('measured', ''))} (held to {inline(check.get('held_to', ''))})"


def _why(v: VerdictOutput, deciding: int = 1) -> str:
    """The reason of a verdict and the check(s) that decided it, for a table cell."""
    text = inline(v.reason)
    decided = v.deciding[:deciding]
    if decided:
        text += " <br> *Deciding:* " + "; ".join(_check_text(c) for c in decided)
    passed = sum(bool(c.get("passed")) for c in v.checks)
    text += f" *({passed} of {len(v.checks)} checks passed.)*"
    return text


def _counts(book: Book, ids) -> str:
    """``"7 claims: 5 hold, 1 holds under conditions, 1 does not hold."`` (zero counts left out)."""
    verdicts = [book.records(cid)[0].verdict if len(book.records(cid)) == 1 else None for cid in ids]
    plural = {registry.HOLDS: "hold", registry.CONDITIONS: "hold under conditions", registry.FAILS: "do not hold",
              registry.NOT_ESTABLISHED: "not established"}
    parts = []
    for name in (*registry.ALL_VERDICTS, None):
        count = sum(v == name for v in verdicts)
        if count:
            parts.append(f"{count} {PENDING if name is None else (plural.get(name, name) if count > 1 else name)}")
    return f"{len(verdicts)} claim{'s' if len(verdicts) != 1 else ''}: " + ", ".join(parts) + "."


def _model_cell(book: Book, cid: str, model: str) -> str:
    found = book.rechecks(cid, model)
    if len(found) != 1:
        return ""
    v = found[0]
    badge = _badge(v.verdict)
    return f"{badge} {_ref('why', v.target)}" if _placed(book, v) else badge


def _claim_link(book: Book, cid: str):
    """A claim's one recorded verdict (None if it has none or several) and the link of its ID: to
    its verdict's section when placed, else to its chapter once written, else the bare ID."""
    records = book.records(cid)
    record = records[0] if len(records) == 1 else None
    if record is not None and _placed(book, record):
        return record, _ref(cid, record.target)
    page = registry.CLAIMS[cid].page
    if book.scan_of(page) is not None:
        return record, _doc(cid, page)
    return record, cid


def _claim_row(book: Book, cid: str, models: list[str]) -> list[str]:
    claim = registry.CLAIMS[cid]
    record, link = _claim_link(book, cid)
    statement = inline(claim.statement)          # MyST inline: the statement's $…$ maths typeset
    if record is None:
        return [link, statement, _badge(None), "", *("" for _ in models)]
    verdict = _badge(record.verdict)
    if record.conditions:
        verdict += " — *" + "; ".join(inline(c) for c in record.conditions) + "*"
    return [link, statement, verdict, _why(record), *(_model_cell(book, cid, m) for m in models)]


def _cell_lines(text: str, indent: str = "    ") -> list[str]:
    """A list-table cell's block content, indented under its ``  - `` item."""
    return [indent + line if line else "" for line in text.splitlines()]


def _short(reasons: dict | None, key: str, verdict: str) -> str | None:
    """The short reason written in answers.yml for ``key`` if it was written for ``verdict``."""
    entry = (reasons or {}).get(key)
    if isinstance(entry, dict) and entry.get("verdict") == verdict and entry.get("reason"):
        return inline(entry["reason"])
    return None


def _fold(book: Book, cid: str, record: VerdictOutput, models: list[str], reasons: dict | None = None) -> list[str]:
    """The deciding detail of one claim, folded: the short reason, the recorded reason, the
    conditions, the deciding check, and the reason of each recheck on a trained model."""
    short = _short(reasons, cid, record.verdict)
    lines = ([f"**{short}**", ""] if short else []) + [inline(record.reason)]
    if record.conditions:
        lines += ["", "*Conditions:* " + "; ".join(inline(c) for c in record.conditions) + "."]
    decided = record.deciding[:1]
    passed = sum(bool(c.get("passed")) for c in record.checks)
    detail = f"*Deciding:* {_check_text(decided[0])}. " if decided else ""
    lines += ["", detail + f"*({passed} of {len(record.checks)} checks passed.)*"]
    for model in book.models():          # every model's reason, a column of its own or not
        found = book.rechecks(cid, model)
        if len(found) == 1:
            lines += ["", f"*On {escape(registry.MODELS[model].short)}:* {inline(found[0].reason)}"]
    return ["::::{dropdown} Why", ":class-container: claim-fold", "", *lines, "::::"]


def _compact_row(book: Book, cid: str, models: list[str], reasons: dict | None = None) -> list[list[str]]:
    """One claim as list-table cells (each a list of lines): ID, claim (and its folded detail),
    verdict, one column per trained model."""
    claim = registry.CLAIMS[cid]
    record, link = _claim_link(book, cid)
    statement = [inline(claim.statement)]        # MyST inline: maths typeset
    if record is not None:
        statement += ["", *_fold(book, cid, record, models, reasons)]
    cells = [[link], statement, [_badge(record.verdict if record else None)]]
    for model in models:
        found = book.rechecks(cid, model)
        if len(found) == 1:
            v = found[0]
            badge = _badge(v.verdict)
            text = f"{badge} {_ref('why', v.target)}" if _placed(book, v) else badge
            cells.append([f"{{phone-label}}`{_role_text(registry.MODELS[model].short)}:` {text}"])
        else:
            cells.append([""])
    return cells


def render_index(book: Book, reasons: dict | None = None) -> str:
    """The claims index: every registry ID in one compact table, chapter by chapter — ID, claim,
    verdict, one column per trained model — with the reason and the deciding check folded
    (``reasons``: answers.yml's short reasons, shown first in the fold while still current)."""
    models = [m for m in book.models() if registry.MODELS[m].column]
    lines = [
        escape(_counts(book, registry.CLAIMS)) + " Each row: the claim as people make it, its verdict, "
        "and its recheck on each trained model; "
        # the folds are not printed: the printed index sends the reader to the claim's section
        "{screen-only}`open Why for the reason and the deciding check, follow the ID to the claim's section "
        "and all its evidence.`{print-only}`each claim's section (its ID) gives the reason, the deciding "
        "check and all its evidence.`",
        "",
    ]
    notes = [
        "Nothing here is typed by hand: the table is generated at build time from the claims registry "
        "(`attnref.book.claims`) and the evidence the executed notebooks recorded. A verdict follows "
        "from the recorded checks by one rule: every check of the claim as stated passes — *holds*; a "
        "counterexample holds and every check under the named conditions passes — *holds under "
        "conditions*; a counterexample holds and no condition rescues the claim — *does not hold*; "
        "anything else — *not established*.",
        "",
    ]
    if models:
        notes += ["The model columns recheck the claim on the weights and activations of a trained model ("
                  + "; ".join(f"{escape(registry.MODELS[m].short)}: {escape(registry.MODELS[m].description)}"
                              for m in models) + "); *premise fails here* means the claim's assumption is "
                  "measured not to hold in that model, so the claim is not tested there.", ""]
    header = ["ID", "Claim", "Verdict", *(registry.MODELS[m].short for m in models)]
    rows: list[list[list[str]]] = [[[h] for h in header]]
    for number, chapter in registry.CHAPTERS.items():
        ids = [cid for cid, c in registry.CLAIMS.items() if c.chapter == number]
        if not ids:
            continue
        written = book.scan_of(chapter.notebook) is not None
        title = _doc(f"{number} · {plain_title(chapter.title)}", chapter.notebook) if written \
            else f"{number} · {escape(plain_title(chapter.title))} (not written yet)"
        rows.append([[f"{{phone-label}}`Chapter`"], [f"**{title}** — {escape(_counts(book, ids))}"],
                     [""], *([""] for _ in models)])
        rows += [_compact_row(book, cid, models, reasons) for cid in ids]
    lines += ["``````{list-table}", ":header-rows: 1", ":class: claims-compact", ""]
    for row in rows:
        for i, cell in enumerate(row):
            first, *rest = cell or [""]
            lines.append(("* - " if i == 0 else "  - ") + first)
            lines += _cell_lines("\n".join(rest))
    lines += ["``````", "", *notes]
    return "\n".join(lines)


#: The chapter whose notebooks recheck other chapters' claims on trained models (besides its own claims).
RECHECK_CHAPTER = 6


def render_rechecks(book: Book, heading: bool = True) -> list[str]:
    """The section of the index on the trained models: every recheck, with its reason (under the
    chapter's heading, or under its own claims' table)."""
    chapter = registry.CHAPTERS[RECHECK_CHAPTER]
    lines = [f"## {chapter.number} · {chapter.title}", ""] if heading else ["Rechecks of other chapters' claims:", ""]
    real = [v for v in book.verdicts if v.real_model and v.id in registry.CLAIMS and v.model in registry.MODELS]
    if not real:
        return lines + [f"Chapter: {_doc(chapter.title, chapter.notebook)}. No claim has been rechecked on a "
                        "trained model yet.", ""]
    lines += [f"Chapter: {_doc(plain_title(chapter.title), chapter.notebook)}. The claims rechecked on "
              "the weights and activations of trained models, with the verdict of their own chapter beside it.", ""]
    rows = []
    for v in real:
        records = book.records(v.id)
        own = _badge(records[0].verdict) if len(records) == 1 else _badge(None)
        link = _ref(v.id, v.target) if _placed(book, v) else v.id
        rows.append([link, escape(registry.MODELS[v.model].short), own, _badge(v.verdict), _why(v)])
    lines += _container(_table(["ID", "Model", "Own chapter", "On the model", "Why"], rows,
                               ["l", "l", "l", "l", "l"]), "claims-table") + [""]
    return lines


def render_headline(book: Book, ids: list[str], reasons: dict | None = None) -> str:
    """A short verdict table for a few claims (the landing page's headline claims). ``reasons``:
    the short reasons of ``book/_data/answers.yml`` (by ID, each with the verdict it was written
    for); one is used only if the recorded verdict is still that one, else the recorded reason."""
    unknown = [cid for cid in ids if cid not in registry.CLAIMS]
    if unknown:
        raise ValueError(f"claims-table: unknown claim IDs {unknown}")
    rows = []
    for cid in ids:
        row = _claim_row(book, cid, [])
        records = book.records(cid)
        why = inline(records[0].reason) if len(records) == 1 else ""
        short = (reasons or {}).get(cid)
        if len(records) == 1 and isinstance(short, dict) and short.get("verdict") == records[0].verdict \
                and short.get("reason"):
            why = inline(short["reason"])
        rows.append([row[0], row[1], row[2], why])
    return "\n".join(_container(_table(["Claim", "What people say", "Verdict", "Why"], rows,
                                       ["l", "l", "l", "l"]), "claims-table"))


