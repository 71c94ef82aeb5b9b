"""Scanning the executed notebooks: every verdict output, section target and proposition label.

The claims registry is ``attnref/book/claims.py`` (its data in ``registry.py``), loaded by path.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[3]


def _load_registry():
    """``attnref/book/claims.py`` by its path: importing it as ``attnref.book.claims`` would run the package's
    ``__init__``, which imports torch (about 2 s per build) for a module that needs only the
    standard library. An ``attnref.book.claims`` already imported (the tests) is used as it is."""
    if "attnref.book.claims" in sys.modules:
        return sys.modules["attnref.book.claims"]
    path = ROOT / "attnref" / "book" / "claims.py"
    spec = importlib.util.spec_from_file_location("attnref_claims_registry", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


registry = _load_registry()

#: A MyST target line, ``(claim-q1)=``.
TARGET = re.compile(r"^\((?P<name>[A-Za-z0-9_.:-]+)\)=[ \t]*$", re.MULTILINE)
#: The option block of a ``prf:proposition`` directive (backtick or colon fence).
PROPOSITION = re.compile(
    r"^[ \t]*(?:`{3,}|:{3,})\{prf:proposition\}[^\n]*\n(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)",
    re.MULTILINE,
)
LABEL_OPTION = re.compile(r"^[ \t]*:label:[ \t]*(?P<label>\S+)", re.MULTILINE)
#: A target line and the heading under it: ``(claim-q1)=`` / ``## Q1 · The scores are a quadratic form``.
HEADING_AFTER_TARGET = re.compile(r"^\((?P<name>[A-Za-z0-9_.:-]+)\)=[ \t]*\n+#+ (?P<heading>[^\n]+)$", re.MULTILINE)
#: The label of a numbered equation: ``:label: eq-q1-hessian`` in a math block, or ``$$ … $$ (eq-…)``.
MATH_LABEL = re.compile(r"(?:^[ \t]*:label:[ \t]*|\$\$[ \t]*\()(?P<label>eq-[A-Za-z0-9_-]+)", re.MULTILINE)
#: The opening line of a ``prf:proof`` directive.
PROOF = re.compile(r"^[ \t]*(?:`{3,}|:{3,})\{prf:proof\}", re.MULTILINE)

PENDING = "not yet verified"

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
    headings: dict[str, str] = field(default_factory=dict)     # target → the heading right under it
    math_labels: list[str] = field(default_factory=list)       # labels of numbered equations


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
            for m in HEADING_AFTER_TARGET.finditer(cell.source):
                scan.headings[m["name"]] = m["heading"].strip()
            scan.math_labels += [m["label"] for m in MATH_LABEL.finditer(cell.source)]
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
                if v.chapter != chapter.number or v.notebook != claim.page:
                    out.append(f"{v.where}: {v.id} is recorded with chapter {v.chapter}, "
                               f"the registry puts it in {claim.page}.ipynb (chapter {chapter.number})")
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


_BOOKS: dict[tuple, Book] = {}


def cached_scan_book(root: Path) -> Book:
    """``scan_book(root)``, read once per state of the notebooks (the build needs it for every
    chapter page, generated page and verdict box; each scan reads every notebook). Do not modify
    the result."""
    key = (str(root), *((str(p), p.stat().st_mtime_ns) for p in notebook_paths(root)))
    if key not in _BOOKS:
        _BOOKS.clear()
        _BOOKS[key] = scan_book(root)
    return _BOOKS[key]
