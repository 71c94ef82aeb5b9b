"""Pages generated at build time: the claims index, the headline verdicts, the execution report.

Nothing on these pages is typed by hand. At every build the extension reads

* the claims registry (:data:`attnref.book.claims.CLAIMS`, :data:`attnref.book.claims.CHAPTERS`),
* the committed, executed notebooks: every output whose metadata carries
  ``attnref_verdict`` (written by ``claims.record`` and, in chapter 6, ``claims.recheck``),
  and the section targets ``(claim-<id>)=`` / ``(real-<id>)=`` and ``:label: <id>`` of the
  ``prf:proposition`` blocks in their markdown,
* ``book/_data/report.json`` (written by ``make bench``) for the execution report,

and replaces a placeholder block in a page's source with the generated MyST markdown
(on ``source-read``, so the text is parsed like any other page):

````markdown
```{claims-index}
```

```{claims-table} Q1 C3 H2 C2 L2
```

```{execution-report}
```
````

The pages that hold a placeholder are re-read on every build (``env-get-outdated``), so an
incremental build never shows a stale verdict. A claim without a verdict yet is listed as
*not yet verified* (``tests/test_claims_index.py`` fails on it); a verdict that cannot be
placed (unknown ID, a second verdict for one ID, a verdict without its section target or
proposition label) is a build warning, hence an error under ``-W``.

The scanning functions are plain Python (no Sphinx needed) and are what the tests use.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat


def _load_registry():
    """``attnref/book/claims.py`` by its path: importing it as ``attnref.book.claims`` would run the package's
    ``__init__``, which imports torch (about 2 s per build) for a module that needs only the
    standard library. An ``attnref.book.claims`` already imported (the tests) is used as it is."""
    if "attnref.book.claims" in sys.modules:
        return sys.modules["attnref.book.claims"]
    path = Path(__file__).resolve().parents[2] / "attnref" / "book" / "claims.py"
    spec = importlib.util.spec_from_file_location("attnref_claims_registry", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


registry = _load_registry()

#: Where the generated markdown goes: a fenced placeholder block with an optional argument.
PLACEHOLDER = re.compile(
    r"^(?P<fence>`{3,})\{(?P<name>claims-index|claims-table|execution-report)\}[ \t]*(?P<arg>[^\n]*)\n"
    r"(?P=fence)[ \t]*$",
    re.MULTILINE,
)
#: A MyST target line, ``(claim-q1)=``.
TARGET = re.compile(r"^\((?P<name>[A-Za-z0-9_.:-]+)\)=[ \t]*$", re.MULTILINE)
#: The option block of a ``prf:proposition`` directive (backtick or colon fence).
PROPOSITION = re.compile(
    r"^[ \t]*(?:`{3,}|:{3,})\{prf:proposition\}[^\n]*\n(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)",
    re.MULTILINE,
)
LABEL_OPTION = re.compile(r"^[ \t]*:label:[ \t]*(?P<label>\S+)", re.MULTILINE)
#: The opening line of a ``prf:proof`` directive.
PROOF = re.compile(r"^[ \t]*(?:`{3,}|:{3,})\{prf:proof\}", re.MULTILINE)

REPORT_PATH = Path("book") / "_data" / "report.json"

PENDING = "not yet verified"


# ---------------------------------------------------------------------------------------------
# Scanning the notebooks
# ---------------------------------------------------------------------------------------------

SLUGS = {m.slug: m for m in registry.MODELS.values()}


@dataclass(frozen=True)
class VerdictOutput:
    """One ``attnref_verdict`` output of an executed notebook, and where it sits."""

    id: str
    verdict: str
    expected: str | None
    reason: str
    conditions: tuple[str, ...]
    kinds: tuple[str, ...]
    checks: tuple[dict, ...]
    chapter: int | None
    model: str | None             # None: the claim's own verdict; else the trained model it is rechecked on
    notebook: str                 # path relative to the repository root, without suffix
    cell: int                     # index of the code cell that displays it
    section: str | None           # the last target of the verdict's kind above the cell
    labels: tuple[str, ...]       # prf:proposition labels between that target and the cell
    proofs: int = 0               # prf:proof blocks between that target and the cell

    @property
    def real_model(self) -> bool:
        return self.model is not None

    @property
    def prefix(self) -> str:
        if self.model is None:
            return "claim"
        model = registry.MODELS.get(self.model)
        return model.slug if model else "real"

    @property
    def target(self) -> str:
        """The section target this verdict belongs under: ``claim-<id>`` or ``<model slug>-<id>``."""
        return f"{self.prefix}-{self.id.lower()}"

    @property
    def where(self) -> str:
        return f"{self.notebook}.ipynb, cell {self.cell}"

    @property
    def deciding(self) -> list[dict]:
        """The checks that moved the verdict (see ``claims.deciding``)."""
        checks = [registry.Check(**{k: c.get(k) for k in registry.Check.__dataclass_fields__}) for c in self.checks]
        return [c.as_dict() for c in registry.deciding(checks, self.verdict)]


@dataclass
class NotebookScan:
    path: str                                                   # relative, without suffix
    targets: list[str] = field(default_factory=list)           # in order of appearance
    labels: list[str] = field(default_factory=list)            # prf:proposition labels
    verdicts: list[VerdictOutput] = field(default_factory=list)


def _verdict_metadata(cell) -> list[dict]:
    found = []
    for output in cell.get("outputs", []):
        meta = output.get("metadata", {}).get(registry.METADATA_KEY)
        if meta is not None:
            found.append(meta)
    return found


def _verdict_output(meta: dict, **where) -> VerdictOutput:
    return VerdictOutput(
        id=str(meta.get("id")), verdict=str(meta.get("verdict")), expected=meta.get("expected"),
        reason=str(meta.get("reason") or ""), conditions=tuple(meta.get("conditions") or ()),
        kinds=tuple(meta.get("kinds") or ()), checks=tuple(meta.get("checks") or ()),
        chapter=meta.get("chapter"), model=meta.get("model"), **where)


def scan_notebook(path: Path, root: Path) -> NotebookScan:
    """Targets, proposition labels and verdict outputs of one notebook, in reading order."""
    nb = nbformat.read(path, as_version=4)
    scan = NotebookScan(path.relative_to(root).with_suffix("").as_posix())
    prefixes = ["claim", "real", *SLUGS]
    section = dict.fromkeys(prefixes)
    labels_since = {p: [] for p in prefixes}
    proofs_since = dict.fromkeys(prefixes, 0)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            # Targets and labels in order of position within the cell.
            events = [(m.start(), "target", m["name"]) for m in TARGET.finditer(cell.source)]
            for m in PROPOSITION.finditer(cell.source):
                events += [(m.start(), "label", lab["label"]) for lab in LABEL_OPTION.finditer(m["options"])]
            events += [(m.start(), "proof", "") for m in PROOF.finditer(cell.source)]
            for _, kind, name in sorted(events):
                if kind == "target":
                    scan.targets.append(name)
                    prefix = name.split("-", 1)[0]
                    if prefix in section:
                        section[prefix] = name
                        labels_since[prefix] = []
                        proofs_since[prefix] = 0
                elif kind == "proof":
                    for prefix in proofs_since:
                        proofs_since[prefix] += 1
                else:
                    scan.labels.append(name)
                    for prefix in labels_since:
                        labels_since[prefix].append(name)
        elif cell.cell_type == "code":
            for meta in _verdict_metadata(cell):
                model = meta.get("model")
                prefix = "claim" if model is None else (registry.MODELS[model].slug if model in registry.MODELS else "real")
                scan.verdicts.append(_verdict_output(
                    meta, notebook=scan.path, cell=index, section=section[prefix],
                    labels=tuple(labels_since[prefix]), proofs=proofs_since[prefix]))
    return scan


def notebook_paths(root: Path) -> list[Path]:
    """Every notebook of the book: ``notebooks/*.ipynb``, sorted (checkpoints excluded)."""
    return sorted(p for p in (root / "notebooks").glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


@dataclass
class Book:
    """What the executed notebooks say about every claim of the registry."""

    scans: list[NotebookScan]

    @property
    def verdicts(self) -> list[VerdictOutput]:
        return [v for s in self.scans for v in s.verdicts]

    def records(self, claim_id: str) -> list[VerdictOutput]:
        return [v for v in self.verdicts if v.id == claim_id and not v.real_model]

    def rechecks(self, claim_id: str, model: str | None = None) -> list[VerdictOutput]:
        return [v for v in self.verdicts if v.id == claim_id and v.real_model and (model is None or v.model == model)]

    def scan_of(self, notebook: str) -> NotebookScan | None:
        return next((s for s in self.scans if s.path == notebook), None)

    def models(self) -> list[str]:
        """The trained models some notebook rechecks a claim on, in the registry's order."""
        found = {v.model for v in self.verdicts if v.real_model}
        return [m for m in registry.MODELS if m in found]

    def missing(self) -> list[str]:
        """Registry IDs that no notebook verifies yet."""
        return [cid for cid in registry.CLAIMS if not self.records(cid)]

    def problems(self) -> list[str]:
        """Every verdict output that the index cannot place, as one message each.

        Unknown IDs or models, an ID verified twice (a recheck on each trained model is separate
        and allowed once), a verdict outside the registry's vocabulary, a chapter that does not
        match the registry, a verdict that is not in its own section (``claim-<id>`` or
        ``<model slug>-<id>``), a claim section without the ``prf:proposition`` labelled with the
        ID or without a ``prf:proof``, a verdict without a reason or without checks.
        """
        out = []
        for v in self.verdicts:
            if v.id not in registry.CLAIMS:
                out.append(f"{v.where}: verdict for {v.id!r}, which is not in the claims registry")
                continue
            if v.model is not None and v.model not in registry.MODELS:
                out.append(f"{v.where}: {v.id} is rechecked on {v.model!r}, which is not in the registry's MODELS")
                continue
            claim = registry.CLAIMS[v.id]
            if v.verdict not in registry.ALL_VERDICTS:
                out.append(f"{v.where}: {v.id} has verdict {v.verdict!r}, not one of {registry.ALL_VERDICTS}")
            if not v.checks or not v.reason:
                out.append(f"{v.where}: {v.id} has no recorded checks or no reason")
            if not v.real_model:
                chapter = registry.CHAPTERS[claim.chapter]
                if v.chapter != chapter.number or v.notebook != chapter.notebook:
                    out.append(f"{v.where}: {v.id} is recorded with chapter {v.chapter}, "
                               f"the registry puts it in {chapter.notebook}.ipynb (chapter {chapter.number})")
            if v.section != v.target:
                out.append(f"{v.where}: {v.id}'s verdict is not under its section target "
                           f"({v.target})= (the nearest target above it is {v.section!r})")
            elif not v.real_model and v.id.lower() not in v.labels:
                out.append(f"{v.where}: section ({v.target})= has no prf:proposition with :label: {v.id.lower()}")
            elif not v.real_model and not v.proofs:
                out.append(f"{v.where}: section ({v.target})= has no prf:proof")
        for cid in dict.fromkeys(v.id for v in self.verdicts):
            found = self.records(cid)
            if len(found) > 1:
                out.append(f"{cid} is verified {len(found)} times: " + "; ".join(v.where for v in found))
            for model in registry.MODELS:
                found = self.rechecks(cid, model)
                if len(found) > 1:
                    out.append(f"{cid} is rechecked on {model} {len(found)} times: " + "; ".join(v.where for v in found))
        return out

    def unexpected(self) -> list[str]:
        """Every stored verdict that is not the one the registry expects (or is not established),
        with the checks that moved it: ``make test`` fails on each."""
        out = []
        for v in self.verdicts:
            if v.id not in registry.CLAIMS:
                continue
            try:
                expected = registry.expected_verdict(v.id, v.model)
            except ValueError as error:
                out.append(f"{v.where}: {error}")
                continue
            if v.verdict != expected:
                where = f" on {v.model}" if v.model else ""
                failing = [c for c in v.checks if not c.get("passed")]
                detail = "; ".join(f"{c.get('name')!r} measured {c.get('measured')}, held to {c.get('held_to')}"
                                   for c in failing) or "no check failed: the evidence fits another verdict"
                out.append(f"{v.id}{where}: computed {v.verdict!r}, expected {expected!r} ({v.where}); "
                           f"failing checks: {detail}")
        return out


def scan_book(root: Path) -> Book:
    return Book([scan_notebook(p, root) for p in notebook_paths(root)])


# ---------------------------------------------------------------------------------------------
# Rendering (MyST markdown)
# ---------------------------------------------------------------------------------------------

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]{}<>|$#~!])")


def escape(text: str) -> str:
    """Plain text → MyST inline text (every markdown-active ASCII character escaped)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def inline(text: str) -> str:
    """MyST inline markdown (math allowed) made safe for one table cell: no newlines, ``|`` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def plain_title(title: str) -> str:
    """A MyST title with inline math as plain text for a link's title (roles take no math):
    ``$\\sqrt{d_k}$`` → ``√dₖ``."""
    text = title.replace("\\sqrt{d_k}", "√dₖ").replace("d_k", "dₖ")
    return re.sub(r"[$]", "", text)


def _role_text(text: str) -> str:
    """The title of a cross-reference role is plain text: no backticks or angle brackets."""
    return re.sub(r"[`<>]", "", " ".join(str(text).split()))


def _ref(text: str, target: str) -> str:
    return f"{{ref}}`{_role_text(text)} <{target}>`"


def _doc(text: str, notebook: str) -> str:
    return f"{{doc}}`{_role_text(text)} </{notebook}>`"


BADGE = {registry.HOLDS: "bdg-success", registry.CONDITIONS: "bdg-warning", registry.FAILS: "bdg-danger",
         registry.PREMISE_FAILS: "bdg-secondary", registry.NOT_ESTABLISHED: "bdg-dark"}


def _badge(verdict: str | None) -> str:
    if verdict is None:
        return f"{{bdg-muted-line}}`{PENDING}`"
    return f"{{{BADGE.get(verdict, 'bdg-muted-line')}}}`{verdict}`"


def _placed(book: Book, v: VerdictOutput) -> bool:
    """True if ``v``'s section target exists, so it can be linked without a broken reference."""
    scan = book.scan_of(v.notebook)
    return scan is not None and v.target in scan.targets


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


def _table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    rule = {"l": ":---", "c": ":---:", "r": "---:"}
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule[a] for a in align) + " |"]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return lines


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


def _container(lines: list[str], css_class: str) -> list[str]:
    """Wrap generated markdown in a ``{container}`` so the book's CSS can style it."""
    return ["````{container} " + css_class, *lines, "````"]


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


def render_verdict_box(v: VerdictOutput) -> str:
    """The verdict box under a claim's proposition: badge, reason, conditions, evidence table
    (with a "fails if" column when the checks name what they rule out), statistical levels."""
    where = f" on {registry.MODELS[v.model].short}" if v.model in registry.MODELS else ""
    # the popular claim the badge judges (under a true proposition the badge may read "does not hold")
    claim = f"*The claim:* {inline(registry.CLAIMS[v.id].statement)}" if v.id in registry.CLAIMS else ""
    head = f"{_badge(v.verdict)} **{v.id}{where}.** {' '.join(v.reason.split())}"
    if v.conditions:
        head += " *Conditions:* " + "; ".join(" ".join(c.split()) for c in v.conditions) + "."
    if claim:
        head = claim + "\n\n" + head
    with_fails_if = any(c.get("fails_if") for c in v.checks)
    rows = []
    for c in v.checks:
        row = [inline(registry.check_label(c)), inline(registry.kind_label(c)), inline(c.get("measured", "")),
               inline(c.get("held_to", "")), "✓" if c.get("passed") else "✗ **failed**"]
        rows.append(row + ([inline(c.get("fails_if") or "—")] if with_fails_if else []))
    header = ["Check", "Kind", "Measured", "Held to", "Passed"] + (["Fails if"] if with_fails_if else [])
    table = _table(header, rows, ["l", "l", "r", "l", "c"] + (["l"] if with_fails_if else []))
    sentence = registry.levels_sentence(v.checks)
    return "\n".join([head, "", *_container(table, "evidence-table")] + (["", inline(sentence)] if sentence else []))


def load_report(root: Path) -> tuple[dict | None, str | None]:
    """The execution report ``book/_data/report.json``: (data, None) or (None, why not)."""
    path = root / REPORT_PATH
    if not path.exists():
        return None, "absent"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        notebooks = data["notebooks"]
        for row in notebooks:
            float(row["seconds"]), str(row["name"]), str(row["status"])
    except (ValueError, KeyError, TypeError) as error:
        return None, f"malformed ({type(error).__name__}: {error})"
    return data, None


def _seconds(value) -> str:
    return "not measured" if value is None else f"{float(value):.1f} s"


def _status_badge(status) -> str:
    status = _role_text(status)
    kind = {"ok": "bdg-success", "no code cells": "bdg-muted-line"}.get(status, "bdg-danger")
    return f"{{{kind}}}`{status}`"


def _notebook_title(root: Path, name: str) -> str:
    """``6 · The claims on a trained decoder`` for ``06b-trained-decoder``: the chapter number from
    the name's leading digits, the title from the notebook's first heading (a chapter may have
    several notebooks); the bare name when the notebook is missing or has no heading."""
    path = root / "notebooks" / f"{name}.ipynb"
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return name
    headings = [line[2:].strip() for c in cells if c.get("cell_type") == "markdown"
                for line in "".join(c.get("source", "")).splitlines() if line.startswith("# ")]
    if not headings:
        return name
    digits = re.match(r"\d+", name)
    number = int(digits.group()) if digits else None
    prefix = f"{number} · " if number in registry.CHAPTERS else ""
    return prefix + plain_title(headings[0])


def render_report(root: Path, data: dict | None, why: str | None) -> str:
    """The execution report: a row per notebook, then the totals ``make bench`` measured.

    Required fields: ``notebooks`` (name, seconds, status); the others (``test_seconds``,
    ``build_seconds``, ``generated``, and what ``tools/bench.py`` adds: start-up times, cores,
    load average, statuses) are shown when present. The developers' targets (the start-up floor,
    the worker time by kind) are in ``docs/DEVELOPING.md``, not on the reader's page.
    """
    if data is None:
        return "\n".join([
            "```{warning}",
            f"No execution report: `{REPORT_PATH.as_posix()}` is {why}. "
            "`make bench` times every notebook, the tests and the build, and writes it.",
            "```"])
    rows = []
    for row in data["notebooks"]:
        name = str(row["name"])
        notebook = f"notebooks/{name}"
        title = _notebook_title(root, name)
        link = _doc(title, notebook) if (root / f"{notebook}.ipynb").exists() else escape(title)
        runs = [float(r) for r in row.get("runs") or []]
        spread = f" ({min(runs):.1f}–{max(runs):.1f})" if len(runs) > 1 else ""
        rows.append([link, f"{float(row['seconds']):.1f}{spread}", _status_badge(row["status"])])
    total = sum(float(row["seconds"]) for row in data["notebooks"])
    repeats = max((len(row.get("runs") or []) for row in data["notebooks"]), default=0)
    header = f"Run time (s): median of {repeats} (range)" if repeats > 1 else "Run time (s)"
    lines = _table(["Notebook", header, "Status"], rows, ["l", "r", "l"])
    lines += ["", f"All notebooks: {total:.1f} s of execution, each in a fresh kernel with one thread."]
    if data.get("startup_seconds") is not None:
        lines[-1] += (f" Of each notebook's time, {_seconds(data['startup_seconds'])} is start-up "
                      f"(kernel {_seconds(data.get('kernel_start_seconds'))}, imports "
                      f"{_seconds(data.get('import_seconds'))}).")
    test = f"`make test`: {_seconds(data.get('test_seconds'))}"
    if data.get("test_status") not in (None, "ok"):
        test += f" ({escape(data['test_status'])})"
    build = f"`make book`: {_seconds(data.get('build_seconds'))}"
    if data.get("build_status") not in (None, "ok"):
        build += f" ({escape(data['build_status'])})"
    lines += ["", f"{test}. {build}."]
    if data.get("cpu_kernel_paths"):
        lines += ["", "CPU kernel paths the notebooks were compared under: "
                  + "; ".join(escape(str(p)) for p in data["cpu_kernel_paths"]) + "."]
    where = f"Measured on {escape(data.get('generated', 'an unknown date'))}"
    if data.get("cores"):
        where += f" on {int(data['cores'])} cores"
    if data.get("load_average"):
        where += f", load average {float(data['load_average'][0]):.1f} at the start (other processes slow every number)"
    lines += ["", where + f", by `make bench`, which writes `{REPORT_PATH.as_posix()}`."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Sphinx
# ---------------------------------------------------------------------------------------------

def _root(app) -> Path:
    return Path(app.srcdir)


def source_read(app, docname: str, source: list[str]) -> None:
    text = source[0]
    if "{claims-" not in text and "{execution-report}" not in text:
        return
    from sphinx.util import logging
    logger = logging.getLogger(__name__)
    root = _root(app)
    book = scan_book(root)
    for path in notebook_paths(root):
        app.env.note_dependency(str(path))

    def replace(match: re.Match) -> str:
        name, arg = match["name"], match["arg"].split()
        if name == "claims-index":
            return render_index(book)
        if name == "claims-table":
            try:
                return render_headline(book, arg)
            except ValueError as error:
                logger.warning(str(error), location=docname)
                return ""
        data, why = load_report(root)
        if why not in (None, "absent"):
            logger.warning(f"execution report {REPORT_PATH.as_posix()} is {why}", location=docname)
        return render_report(root, data, why)

    source[0] = PLACEHOLDER.sub(replace, text)


def check_verdicts(app) -> None:
    """Warn (an error under -W) about every verdict output the index cannot place."""
    from sphinx.util import logging
    logger = logging.getLogger(__name__)
    for problem in scan_book(_root(app)).problems():
        logger.warning(f"claims index: {problem}")


def always_reread(app, env, added, changed, removed) -> list[str]:
    """Pages with generated content are re-read on every build (verdicts live in notebooks)."""
    generated = []
    for docname in env.found_docs:
        path = Path(env.doc2path(docname))
        if path.suffix == ".md" and path.exists():
            text = path.read_text(encoding="utf-8")
            if PLACEHOLDER.search(text):
                generated.append(docname)
    return generated


THEBE_MARKERS = ("thebe",)


def drop_thebe(app, pagename, templatename, context, doctree) -> None:
    """Remove the thebe assets from every page.

    Jupyter Book always loads ``sphinx_thebe``; the book does not offer live code (the launch
    buttons open Binder or Colab instead), and its inline configuration script is added twice
    (a ``SyntaxError`` in the console) and names a CDN. Without it nothing on a page refers to
    another host.
    """
    def keep(asset) -> bool:
        filename = str(getattr(asset, "filename", "") or "")
        body = str(getattr(asset, "attributes", {}).get("body", "") or "")
        return not any(m in filename.lower() or m.upper() in body for m in THEBE_MARKERS)

    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [asset for asset in context[key] if keep(asset)]


def drop_thebe_config(app, doctree, docname) -> None:
    """Remove the ``text/x-thebe-config`` block sphinx-thebe appends to every page."""
    from docutils import nodes
    for node in list(doctree.findall(nodes.raw)):
        if "x-thebe-config" in node.astext() or "kernelName =" in node.astext():
            node.parent.remove(node)


def _verdicts_of_document(path: Path) -> dict[tuple[str, str | None], VerdictOutput]:
    """The verdict outputs stored in the notebook ``path`` (read at parse time), by (ID, model)."""
    root = path.parent
    while root != root.parent and not (root / "_toc.yml").exists():
        root = root.parent
    scan = scan_notebook(path, root)
    return {(v.id, v.model): v for v in scan.verdicts}


def _verdict_directive():
    """The ``{verdict}`` directive: ``ID [model]`` → the verdict box, from the stored outputs of
    the notebook being read (the recording cell itself is removed from the page)."""
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util import logging
    from sphinx.util.docutils import SphinxDirective

    logger = logging.getLogger(__name__)

    class VerdictDirective(SphinxDirective):
        required_arguments = 1
        optional_arguments = 1
        has_content = False

        def run(self):
            claim_id = self.arguments[0]
            model = self.arguments[1] if len(self.arguments) > 1 else None
            path = Path(self.env.doc2path(self.env.docname))
            found = _verdicts_of_document(path) if path.suffix == ".ipynb" else {}
            v = found.get((claim_id, model))
            if v is None:
                where = f" on {model}" if model else ""
                logger.warning(f"verdict: no stored verdict for {claim_id}{where} in {path.name} "
                               "(run the notebook: make execute)", location=self.get_location())
                return []
            css = {registry.HOLDS: "holds", registry.CONDITIONS: "conditions", registry.FAILS: "fails",
                   registry.PREMISE_FAILS: "premise"}
            box = nodes.container(classes=["verdict-box", f"verdict-{css.get(v.verdict, 'open')}"])
            lines = render_verdict_box(v).splitlines()
            self.state.nested_parse(StringList(lines, source=str(path)), self.content_offset, box)
            return [box]

    return VerdictDirective


STATIC = Path(__file__).resolve().parent / "static"


def add_static_path(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def setup(app) -> dict:
    app.connect("config-inited", add_static_path)
    app.add_css_file("claims.css")
    app.add_css_file("verdict.css")
    app.add_directive("verdict", _verdict_directive())
    app.connect("source-read", source_read)
    app.connect("builder-inited", check_verdicts)
    app.connect("env-get-outdated", always_reread)
    app.connect("html-page-context", drop_thebe)
    app.connect("doctree-resolved", drop_thebe_config, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
