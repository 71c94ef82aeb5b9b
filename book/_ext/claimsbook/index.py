"""The claims index (every claim with its verdict and a column per trained model) and the short
headline table of the landing page."""

from __future__ import annotations

from .markup import _badge, _container, _doc, _placed, _ref, _table, escape, inline, plain_title
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


def _claim_row(book: Book, cid: str, models: list[str]) -> list[str]:
    claim = registry.CLAIMS[cid]
    chapter = registry.CHAPTERS[claim.chapter]
    records = book.records(cid)
    record = records[0] if len(records) == 1 else None
    if record is not None and _placed(book, record):
        link = _ref(cid, record.target)
    elif book.scan_of(chapter.notebook) is not None:
        link = _doc(cid, chapter.notebook)
    else:
        link = cid
    statement = escape(claim.statement)
    if record is None:
        return [link, statement, _badge(None), "", *("" for _ in models)]
    verdict = _badge(record.verdict)
    if record.conditions:
        verdict += " — *" + "; ".join(inline(c) for c in record.conditions) + "*"
    return [link, statement, verdict, _why(record), *(_model_cell(book, cid, m) for m in models)]


def render_index(book: Book) -> str:
    """The claims index: every registry ID, chapter by chapter, with the reason for its verdict."""
    models = book.models()
    lines = [
        "Every claim of the book, with its verdict, the reason for it, and the check that decided "
        "it. Nothing here is typed by hand: the page is generated at build time from the claims "
        "registry (`attnref.book.claims`) and the evidence the executed notebooks recorded. "
        + escape(_counts(book, registry.CLAIMS)),
        "",
        "A verdict follows from the recorded checks by one rule: every check of the claim as "
        "stated passes — *holds*; a counterexample holds and every check under the named "
        "conditions passes — *holds under conditions*; a counterexample holds and no condition "
        "rescues the claim — *does not hold*; anything else — *not established*. Each claim's "
        "section shows all its checks.",
        "",
    ]
    if models:
        lines += ["The last column" + ("s recheck" if len(models) > 1 else " rechecks") + " the claim on the "
                  "weights and activations of a trained model (" +
                  "; ".join(f"{escape(registry.MODELS[m].short)}: {escape(registry.MODELS[m].description)}"
                            for m in models) + ").", ""]
    header = ["ID", "Claim", "Verdict", "Why", *(registry.MODELS[m].short for m in models)]
    for number, chapter in registry.CHAPTERS.items():
        ids = [cid for cid, c in registry.CLAIMS.items() if c.chapter == number]
        if ids:
            written = book.scan_of(chapter.notebook) is not None
            link = _doc(plain_title(chapter.title), chapter.notebook) if written else "not written yet"
            lines += [f"## {number} · {chapter.title}", "", f"Chapter: {link}. {escape(_counts(book, ids))}", ""]
            rows = [_claim_row(book, cid, models) for cid in ids]
            table = _table(header, rows, ["l", "l", "l", "l", *("l" for _ in models)])
            lines += _container(table, "claims-table claims-index") + [""]
        if number == RECHECK_CHAPTER:            # in its place in the book, not after chapter 8
            lines += render_rechecks(book, heading=not ids)
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


def render_headline(book: Book, ids: list[str]) -> str:
    """A short verdict table for a few claims (the landing page's headline claims)."""
    unknown = [cid for cid in ids if cid not in registry.CLAIMS]
    if unknown:
        raise ValueError(f"claims-table: unknown claim IDs {unknown}")
    rows = []
    for cid in ids:
        row = _claim_row(book, cid, [])
        records = book.records(cid)
        why = inline(records[0].reason) if len(records) == 1 else ""
        rows.append([row[0], row[1], row[2], why])
    return "\n".join(_container(_table(["Claim", "What people say", "Verdict", "Why"], rows,
                                       ["l", "l", "l", "l"]), "claims-table"))


