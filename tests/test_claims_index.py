"""Every claim is verified exactly once, in its own section, and the claims index says so.

The claims index of the book is generated at build time (``book/_ext/claims_index.py``) from
the registry (``attnref.book.claims``) and the ``attnref_verdict`` metadata of the outputs of the
committed, executed notebooks. These tests hold the notebooks to what the index needs:

* every ID of the registry and of the catalogue (``../shared/CLAIMS.md``) has a verdict output
  in exactly one notebook — its chapter's;
* no notebook records a verdict for an ID the registry does not know;
* no ID is verified twice (a real-model recheck in chapter 6 is separate, and allowed once);
* each verdict sits in its own section: below the target ``(claim-<id>)=`` (``(real-<id>)=``
  for a recheck), after the ``prf:proposition`` labelled ``<id>`` and its ``prf:proof``, with
  no other claim's target in between.

The second half tests the generator itself on small synthetic notebooks.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

from attnref.book import claims

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT.parent / "shared" / "CLAIMS.md"


def _load_generator():
    spec = importlib.util.spec_from_file_location("claims_index", ROOT / "book" / "_ext" / "claims_index.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


index = _load_generator()
BOOK = index.scan_book(ROOT)   # the committed notebooks, read once at collection


def catalogue_ids() -> dict[str, str]:
    """``{ID: slug}`` of the catalogue's claims (``- **Q1 quadratic-scores** — …`` lines)."""
    text = CATALOGUE.read_text(encoding="utf-8")
    return dict(re.findall(r"^- \*\*([A-Z]\d+) ([a-z0-9-]+)\*\*", text, flags=re.MULTILINE))


def catalogue_rechecks() -> list[str]:
    """The IDs the catalogue's trained-model chapter asks to recheck."""
    text = CATALOGUE.read_text(encoding="utf-8")
    section = re.search(r"^## 6 ·.*?(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    return list(dict.fromkeys(re.findall(r"\b([QLMCH]\d)\b", section.group(0)))) if section else []


needs_catalogue = pytest.mark.skipif(not CATALOGUE.exists(), reason=f"catalogue not found at {CATALOGUE}")
ALL_IDS = list(dict.fromkeys([*claims.CLAIMS, *(catalogue_ids() if CATALOGUE.exists() else {})]))


# ------------------------------------------------------------------------------------------
# The committed notebooks
# ------------------------------------------------------------------------------------------

@needs_catalogue
def test_registry_matches_the_catalogue() -> None:
    registry = {cid: c.slug for cid, c in claims.CLAIMS.items()}
    assert registry == catalogue_ids()


@pytest.mark.parametrize("claim_id", ALL_IDS)
def test_claim_is_verified_once(claim_id: str) -> None:
    records = BOOK.records(claim_id)
    assert records, f"{claim_id}: no notebook records a verdict (claims.record) for it"
    assert len(records) == 1, f"{claim_id} is verified {len(records)} times: " + "; ".join(v.where for v in records)


def test_no_verdict_for_an_unknown_id() -> None:
    unknown = [f"{v.id} ({v.where})" for v in BOOK.verdicts if v.id not in claims.CLAIMS]
    assert not unknown, f"verdicts for IDs not in the registry: {unknown}"


def test_real_model_rechecks_are_once_each() -> None:
    twice = {cid: [v.where for v in BOOK.rechecks(cid)] for cid in claims.CLAIMS if len(BOOK.rechecks(cid)) > 1}
    assert not twice, f"rechecked more than once: {twice}"


@needs_catalogue
@pytest.mark.parametrize("claim_id", catalogue_rechecks() if CATALOGUE.exists() else [])
def test_catalogue_recheck_is_done(claim_id: str) -> None:
    assert len(BOOK.rechecks(claim_id)) == 1, f"{claim_id}: chapter 6 has no claims.recheck for it"


@pytest.mark.parametrize("verdict", BOOK.verdicts, ids=lambda v: f"{'real-' if v.real_model else ''}{v.id}")
def test_verdict_is_in_its_section(verdict) -> None:
    scan = BOOK.scan_of(verdict.notebook)
    assert verdict.target in scan.targets, f"{verdict.where}: no target ({verdict.target})= in the notebook's markdown"
    assert verdict.section == verdict.target, (
        f"{verdict.where}: the nearest section target above the verdict is {verdict.section!r}, "
        f"not {verdict.target!r}")
    if not verdict.real_model:
        label = verdict.id.lower()
        assert label in scan.labels, f"{verdict.where}: no prf:proposition with :label: {label}"
        assert label in verdict.labels, (
            f"{verdict.where}: the prf:proposition labelled {label} is not in the section ({verdict.target})=")
        assert verdict.proofs, f"{verdict.where}: the section ({verdict.target})= has no prf:proof"


def test_every_verdict_can_be_placed_in_the_index() -> None:
    """The same checks the build runs (a problem is a build warning, an error under -W)."""
    assert not BOOK.problems(), "\n".join(BOOK.problems())


# ------------------------------------------------------------------------------------------
# The generator, on synthetic notebooks
# ------------------------------------------------------------------------------------------

def _section(claim_id: str, verdict: str | None = None, *, real: bool = False, label: bool = True,
             target: str | None = None, conditions: str | None = None, proof: bool = True) -> list:
    lower = claim_id.lower()
    target = target or f"{'real' if real else 'claim'}-{lower}"
    text = f"({target})=\n## {claim_id} · a title\n"
    if label:
        text += f"\n```{{prf:proposition}} A title\n:label: {lower}\n\nThe statement.\n```\n"
    if proof:
        text += "\n```{prf:proof}\nThe argument.\n```\n"
    cells = [nbformat.v4.new_markdown_cell(text)]
    if verdict is not None:
        chapter = 6 if real else claims.CLAIMS[claim_id].chapter if claim_id in claims.CLAIMS else 1
        meta = {"id": claim_id, "verdict": verdict, "evidence": ["real model"] if real else ["symbolic", "numerical"],
                "conditions": conditions, "chapter": chapter, "real_model": real}
        output = nbformat.v4.new_output("execute_result", execution_count=1, data={"text/plain": claim_id},
                                        metadata={claims.METADATA_KEY: meta})
        cells.append(nbformat.v4.new_code_cell("claims.record(...)", outputs=[output], execution_count=1))
    return cells


def _book(tmp_path: Path, notebooks: dict[int, list]) -> object:
    (tmp_path / "notebooks").mkdir()
    for number, cells in notebooks.items():
        path = tmp_path / f"{claims.CHAPTERS[number].notebook}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"), *cells]), path)
    return index.scan_book(tmp_path)


def test_generator_accepts_a_record_and_one_recheck(tmp_path: Path) -> None:
    book = _book(tmp_path, {1: _section("Q1", claims.HOLDS) + _section("Q2", claims.HOLDS),
                            6: _section("Q1", claims.FAILS, real=True)})
    assert not book.problems()
    assert [v.id for v in book.records("Q1")] == ["Q1"] and len(book.rechecks("Q1")) == 1
    assert "Q1" not in book.missing() and "Q3" in book.missing()


@pytest.mark.parametrize("case, cells, message", [
    ("unknown id", {1: _section("Z9", claims.HOLDS)}, "not in the claims registry"),
    ("verified twice", {1: _section("Q1", claims.HOLDS) + _section("Q1", claims.HOLDS)}, "verified 2 times"),
    ("rechecked twice", {6: _section("H2", claims.HOLDS, real=True) + _section("H2", claims.HOLDS, real=True)},
     "rechecked on the real model 2 times"),
    ("wrong chapter", {2: _section("Q1", claims.HOLDS)}, "the registry puts it in"),
    ("no target", {1: _section("Q1", claims.HOLDS, target="claim-q2")}, "not under its section target"),
    ("no label", {1: _section("Q1", claims.HOLDS, label=False)}, "no prf:proposition with :label: q1"),
    ("label in another section", {1: _section("Q1", label=True)[:1] + _section("Q2", claims.HOLDS, label=False)
                                  + _section("Q1", claims.HOLDS, label=False)[1:]}, "not under its section target"),
    ("no proof", {1: _section("Q1", claims.HOLDS, proof=False)}, "has no prf:proof"),
    ("unknown verdict", {1: _section("Q1", "maybe")}, "not one of"),
])
def test_generator_reports_a_misplaced_verdict(tmp_path: Path, case: str, cells: dict, message: str) -> None:
    problems = _book(tmp_path, cells).problems()
    assert any(message in p for p in problems), f"{case}: {problems}"


def test_index_lists_every_claim_with_its_computed_verdict(tmp_path: Path) -> None:
    book = _book(tmp_path, {1: _section("Q1", claims.HOLDS),
                            3: _section("M5", claims.CONDITIONS, conditions="an orthonormal basis"),
                            6: _section("Q1", claims.FAILS, real=True)})
    text = index.render_index(book)
    assert f"{len(claims.CLAIMS)} claims: 1 holds, 1 holds under conditions, {len(claims.CLAIMS) - 2} not yet verified." in text
    assert index._counts(book, ["Q1", "Q1", "M5"]) == "3 claims: 2 hold, 1 holds under conditions."
    for cid in claims.CLAIMS:
        rows = [line for line in text.splitlines() if line.startswith(f"| {{ref}}`{cid} <claim-") or
                line.startswith(f"| {{doc}}`{cid} <")]
        assert len(rows) == 1, f"{cid} appears {len(rows)} times in the index"
    row = next(line for line in text.splitlines() if line.startswith("| {ref}`Q1 <claim-q1>`"))
    assert "{bdg-success}`holds`" in row and "{prf:ref}`q1`" in row
    assert "{ref}`✓ does not hold <real-q1>`" in row          # the recheck, linked to its section
    row = next(line for line in text.splitlines() if line.startswith("| {ref}`M5 <claim-m5>`"))
    assert "{bdg-warning}`holds under conditions` — *an orthonormal basis*" in row
    row = next(line for line in text.splitlines() if line.startswith("| {doc}`Q2 </notebooks/01-nonlinearity>`"))
    assert f"`{index.PENDING}`" in row and "{prf:ref}" not in row   # nothing to link to yet
    # Every table row has as many unescaped cell separators as its header (statements hold |, $, _).
    for line in text.splitlines():
        if line.startswith("| "):
            assert len(re.findall(r"(?<!\\)\|", line)) in (9, 5), line


def test_headline_table(tmp_path: Path) -> None:
    book = _book(tmp_path, {4: _section("C3", claims.CONDITIONS, conditions="independent components"),
                            6: _section("C3", claims.HOLDS, real=True)})
    text = index.render_headline(book, ["Q1", "C3"])
    assert "{bdg-warning}`holds under conditions`" in text
    assert "symbolic, numerical, {ref}`real model <real-c3>`" in text
    with pytest.raises(ValueError, match="X1"):
        index.render_headline(book, ["Q1", "X1"])


def test_execution_report(tmp_path: Path) -> None:
    data, why = index.load_report(tmp_path)
    assert data is None and why == "absent"
    assert "No execution report" in index.render_report(tmp_path, data, why)
    path = tmp_path / index.REPORT_PATH
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"notebooks": [{"name": "01-nonlinearity", "seconds": 4.25, "status": "ok"},
                                              {"name": "02-linear-layers", "seconds": 1.0, "status": "failed"}],
                                "test_seconds": 60.0, "build_seconds": 12.0, "floor_seconds": 2.5,
                                "generated": "2026-01-01"}))
    data, why = index.load_report(tmp_path)
    text = index.render_report(tmp_path, data, why)
    assert "| 4.2 |" in text or "| 4.3 |" in text
    assert "{bdg-danger}`failed`" in text and "60.0 s" in text and "2026-01-01" in text
    # The fields tools/bench.py adds are shown too.
    path.write_text(json.dumps({"notebooks": [{"name": "01-nonlinearity", "seconds": 4.0, "status": "ok"}],
                                "test_seconds": None, "build_seconds": 20.0, "floor_seconds": 9.0,
                                "generated": "2026-01-02", "startup_seconds": 2.5, "kernel_start_seconds": 1.0,
                                "import_seconds": 1.5, "cores": 2, "load_average": [3.2, 1.0, 0.5],
                                "build_status": "ok", "targets": {"build <= 15 s": False, "make test <= 2 x floor": None}}))
    text = index.render_report(tmp_path, *index.load_report(tmp_path))
    assert "`make test`: not measured" in text and "9.0 s" in text and "2.5 s is start-up" in text
    assert r"build \<= 15 s: **missed**" in text and "load average 3.2" in text
    assert "Worker time" not in text and "Strict nbval executes" not in text    # not measured: not shown
    # Repeated runs: the median and the range of the runs.
    path.write_text(json.dumps({"notebooks": [{"name": "01-nonlinearity", "seconds": 7.1, "status": "ok",
                                               "runs": [7.4, 7.1, 6.9]}]}))
    text = index.render_report(tmp_path, *index.load_report(tmp_path))
    assert "Run time (s): median of 3 (range)" in text and "| 7.1 (6.9–7.4) |" in text, text
    # The breakdown of the test time and the bound the notebooks alone set.
    path.write_text(json.dumps({"notebooks": [{"name": "01-nonlinearity", "seconds": 8.0, "status": "ok"}],
                                "floor_seconds": 2.0, "notebook_bound_seconds": 4.0, "startup_seconds": 4.0,
                                "cores": 2, "test_breakdown": {"notebooks, stored seed (strict nbval)": 30.0,
                                                               "other tests": 10.0}}))
    text = index.render_report(tmp_path, *index.load_report(tmp_path))
    assert "| notebooks, stored seed (strict nbval) | 30.0 | 75 % |" in text, text
    assert "| other tests | 10.0 | 25 % |" in text
    assert "2.0 × the start-up floor on its own" in text and "4.0 s" in text
    path.write_text(json.dumps({"notebooks": [{"name": "01-nonlinearity"}]}))
    assert index.load_report(tmp_path)[1].startswith("malformed")


def test_committed_report_is_well_formed() -> None:
    data, why = index.load_report(ROOT)
    if why == "absent":
        pytest.skip(f"{index.REPORT_PATH} is absent (make bench writes it)")
    assert why is None, why
    names = {row["name"] for row in data["notebooks"]}
    assert names == {p.stem for p in index.notebook_paths(ROOT)}, "the report does not cover every notebook"


def test_the_build_extension_does_not_import_torch():
    # The registry is plain Python; importing torch would add ~2 s to every book build.
    import subprocess
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('claims_index', {str(ROOT / 'book' / '_ext' / 'claims_index.py')!r})\n"
            "module = importlib.util.module_from_spec(spec); sys.modules[spec.name] = module\n"
            "spec.loader.exec_module(module)\n"
            "assert module.registry.CLAIMS, 'empty registry'\n"
            "print(sorted(m for m in ('torch', 'attnref', 'sympy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
