"""Every claim is verified exactly once, in its own section, with the expected verdict.

The claims index and the verdict boxes of the book are generated at build time
(``book/_ext/claims_index.py``) from the registry (``attnref.book.claims``) and the
``attnref_verdict`` metadata of the outputs of the committed, executed notebooks. These tests hold
the notebooks to what the book needs:

* every ID of the registry and of the catalogue (a copy of its IDs in ``tests/data/catalogue.json``)
  has a verdict output in exactly one notebook — its chapter's;
* every stored verdict is the one the registry expects (``make test`` fails, naming the claim and
  its failing checks, otherwise — also when the notebook is re-executed: ``tools/testenv/nbplugin.py``);
* no notebook records a verdict for an ID the registry does not know, and no ID is verified twice
  (a recheck on each trained model is separate, and allowed once);
* each verdict sits in its own section: below the target ``(claim-<id>)=`` (``(<model slug>-<id>)=``
  for a recheck), after the ``prf:proposition`` labelled ``<id>`` and its ``prf:proof``, and the
  section shows it with the ``{verdict}`` directive.

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
CATALOGUE = json.loads((ROOT / "tests" / "data" / "catalogue.json").read_text(encoding="utf-8"))


def _load_generator():
    spec = importlib.util.spec_from_file_location("claims_index", ROOT / "book" / "_ext" / "claims_index.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


index = _load_generator()
BOOK = index.scan_book(ROOT)   # the committed notebooks, read once at collection
ALL_IDS = list(dict.fromkeys([*claims.CLAIMS, *CATALOGUE["claims"]]))


# ------------------------------------------------------------------------------------------
# The committed notebooks
# ------------------------------------------------------------------------------------------

def test_registry_matches_the_catalogue() -> None:
    registry = {cid: c.slug for cid, c in claims.CLAIMS.items()}
    assert registry == CATALOGUE["claims"]


@pytest.mark.parametrize("claim_id", ALL_IDS)
def test_claim_is_verified_once(claim_id: str) -> None:
    records = BOOK.records(claim_id)
    assert records, f"{claim_id}: no notebook records a verdict (claims.Evidence(...).verdict) for it"
    assert len(records) == 1, f"{claim_id} is verified {len(records)} times: " + "; ".join(v.where for v in records)


def test_every_verdict_is_the_expected_one() -> None:
    """The stored verdicts, decided by the rule from the stored evidence, are the registry's."""
    problems = BOOK.unexpected()
    assert not problems, "\n".join(problems)


def test_stored_verdicts_follow_from_their_stored_evidence() -> None:
    """The verdict in the metadata is what the rule gives for the checks stored beside it."""
    for v in BOOK.verdicts:
        checks = [claims.Check(**{k: c.get(k) for k in claims.Check.__dataclass_fields__}) for c in v.checks]
        assert claims.decide(checks) == v.verdict, f"{v.where}: {v.id} stored {v.verdict!r}, its checks give {claims.decide(checks)!r}"


def test_no_verdict_for_an_unknown_id() -> None:
    unknown = [f"{v.id} ({v.where})" for v in BOOK.verdicts if v.id not in claims.CLAIMS]
    assert not unknown, f"verdicts for IDs not in the registry: {unknown}"


def test_rechecks_are_once_each_per_model() -> None:
    twice = {(cid, m): [v.where for v in BOOK.rechecks(cid, m)] for cid in claims.CLAIMS for m in claims.MODELS
             if len(BOOK.rechecks(cid, m)) > 1}
    assert not twice, f"rechecked more than once: {twice}"


@pytest.mark.parametrize("claim_id", CATALOGUE["rechecks"])
def test_catalogue_recheck_is_done(claim_id: str) -> None:
    assert len(BOOK.rechecks(claim_id, "all-MiniLM-L6-v2")) == 1, f"{claim_id}: chapter 6 does not recheck it on MiniLM"


@pytest.mark.parametrize("verdict", BOOK.verdicts, ids=lambda v: f"{v.prefix}-{v.id}")
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


@pytest.mark.parametrize("verdict", BOOK.verdicts, ids=lambda v: f"{v.prefix}-{v.id}")
def test_verdict_is_shown_once_under_its_statement(verdict) -> None:
    """The section shows the verdict with ``{verdict} ID [model]`` before its first code cell, and
    the cell that computed it is removed from the page (shown once)."""
    nb = nbformat.read(ROOT / f"{verdict.notebook}.ipynb", as_version=4)
    directive = f"{{verdict}} {verdict.id}" + (f" {verdict.model}" if verdict.model else "")
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and f"({verdict.target})=" in c.source)
    first_code = next((i for i in range(start, len(nb.cells)) if nb.cells[i].cell_type == "code"), len(nb.cells))
    shown = [i for i in range(start, first_code) if re.search(rf"^```{re.escape(directive)}[ \t]*$", nb.cells[i].source, re.M)]
    assert shown, f"{verdict.where}: no ```{directive} before the first code cell of section ({verdict.target})="
    tags = nb.cells[verdict.cell].metadata.get("tags", [])
    assert "remove-cell" in tags or "remove-output" in tags, (
        f"{verdict.where}: the verdict cell is shown on the page too (tag it remove-cell)")


def test_every_verdict_can_be_placed_in_the_index() -> None:
    """The same checks the build runs (a problem is a build warning, an error under -W)."""
    assert not BOOK.problems(), "\n".join(BOOK.problems())


# ------------------------------------------------------------------------------------------
# The generator, on synthetic notebooks
# ------------------------------------------------------------------------------------------

def _metadata(claim_id: str, verdict: str, model: str | None = None, condition: str | None = None) -> dict:
    """The metadata claims.Evidence writes, for a claim whose evidence gives ``verdict``."""
    evidence = claims.Evidence(claim_id if claim_id in claims.CLAIMS else "Q1", model=model)
    if verdict == claims.HOLDS:
        evidence.exact("a symbolic check", 2, 2, kind=claims.SYMBOLIC)
    elif verdict in (claims.FAILS, claims.CONDITIONS):
        evidence.counterexample.exact("a counterexample", 1, 1, kind=claims.NUMERICAL)
        if verdict == claims.CONDITIONS:
            evidence.under(condition or "a condition").at_most("an error", 0.0, 1e-12, kind=claims.PARITY)
    else:
        evidence.exact("a failing check", 1, 2, kind=claims.NUMERICAL)
    meta = evidence.verdict("A reason with $d_k$.").metadata
    meta = dict(meta, id=claim_id)
    if verdict not in claims.ALL_VERDICTS:
        meta["verdict"] = verdict
    return meta


def _section(claim_id: str, verdict: str | None = None, *, model: str | None = None, label: bool = True,
             target: str | None = None, condition: str | None = None, proof: bool = True) -> list:
    lower = claim_id.lower()
    prefix = claims.MODELS[model].slug if model else "claim"
    target = target or f"{prefix}-{lower}"
    text = f"({target})=\n## {claim_id} · a title\n"
    if label:
        text += f"\n```{{prf:proposition}} A title\n:label: {lower}\n\nThe statement.\n```\n"
    text += f"\n```{{verdict}} {claim_id}{' ' + model if model else ''}\n```\n"
    if proof:
        text += "\n```{prf:proof}\nThe argument.\n```\n"
    cells = [nbformat.v4.new_markdown_cell(text)]
    if verdict is not None:
        meta = _metadata(claim_id, verdict, model, condition)
        output = nbformat.v4.new_output("display_data", data={"text/plain": claim_id},
                                        metadata={claims.METADATA_KEY: meta})
        cells.append(nbformat.v4.new_code_cell("evidence.verdict(...)", outputs=[output], execution_count=1,
                                               metadata={"tags": ["remove-cell"]}))
    return cells


def _book(tmp_path: Path, notebooks: dict[int, list]) -> object:
    (tmp_path / "notebooks").mkdir()
    for number, cells in notebooks.items():
        path = tmp_path / f"{claims.CHAPTERS[number].notebook}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"), *cells]), path)
    return index.scan_book(tmp_path)


def test_generator_accepts_a_record_and_one_recheck_per_model(tmp_path: Path) -> None:
    book = _book(tmp_path, {1: _section("Q1", claims.HOLDS) + _section("Q2", claims.HOLDS),
                            6: _section("Q1", claims.FAILS, model="all-MiniLM-L6-v2")
                            + _section("Q1", claims.HOLDS, model="SmolLM2-135M-Instruct")})
    assert not book.problems(), book.problems()
    assert [v.id for v in book.records("Q1")] == ["Q1"] and len(book.rechecks("Q1")) == 2
    assert book.models() == ["all-MiniLM-L6-v2", "SmolLM2-135M-Instruct"]
    assert "Q1" not in book.missing() and "Q3" in book.missing()


@pytest.mark.parametrize("case, cells, message", [
    ("unknown id", {1: _section("Z9", claims.HOLDS)}, "not in the claims registry"),
    ("verified twice", {1: _section("Q1", claims.HOLDS) + _section("Q1", claims.HOLDS)}, "verified 2 times"),
    ("rechecked twice", {6: _section("H2", claims.HOLDS, model="all-MiniLM-L6-v2")
                         + _section("H2", claims.HOLDS, model="all-MiniLM-L6-v2")},
     "rechecked on all-MiniLM-L6-v2 2 times"),
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


def test_an_unexpected_verdict_is_reported_with_its_failing_checks(tmp_path: Path) -> None:
    book = _book(tmp_path, {1: _section("Q1", claims.NOT_ESTABLISHED) + _section("Q2", claims.FAILS)})
    problems = book.unexpected()
    assert len(problems) == 2, problems
    assert problems[0].startswith("Q1: computed 'not established', expected 'holds'")
    assert "'a failing check' measured 1, held to = 2" in problems[0]
    assert problems[1].startswith("Q2: computed 'does not hold', expected 'holds'")
    assert "no check failed" in problems[1]


def _index_rows(text: str) -> dict[str, list[str]]:
    """The claims index's list-table, row by row: first cell (ID) → the row's lines."""
    body = text.split("``````{list-table}", 1)[1].split("``````", 1)[0]
    rows: dict[str, list[str]] = {}
    current = None
    for line in body.splitlines():
        if line.startswith("* - "):
            current = line[4:]
            rows[current] = []
        elif current is not None:
            rows[current].append(line)
    return rows


def test_index_gives_every_claim_its_verdict_and_reason(tmp_path: Path) -> None:
    book = _book(tmp_path, {1: _section("Q1", claims.HOLDS),
                            3: _section("M5", claims.CONDITIONS, condition="an orthonormal basis"),
                            6: _section("Q1", claims.FAILS, model="all-MiniLM-L6-v2")})
    text = index.render_index(book)
    assert (f"{len(claims.CLAIMS)} claims: 1 holds, 1 holds under conditions, "
            f"{len(claims.CLAIMS) - 2} not yet verified.") in text
    assert index._counts(book, ["Q1", "Q1", "M5"]) == "3 claims: 2 hold, 1 holds under conditions."
    assert text.count("``````{list-table}") == 1, "one table for every claim"
    rows = _index_rows(text)
    for cid in claims.CLAIMS:
        keys = [k for k in rows if k in (f"{{ref}}`{cid} <claim-{cid.lower()}>`", cid) or
                k.startswith(f"{{doc}}`{cid} <")]
        assert len(keys) == 1, f"{cid} appears {len(keys)} times in the index"
    # a chapter whose notebook does not exist yet is not linked (no broken reference)
    assert "L1" in rows and any("(not written yet)" in " ".join(r) for r in rows.values())
    header = rows[next(iter(rows))]
    assert [h.strip() for h in header] == ["- Claim", "- Verdict", "- MiniLM encoder"]     # one column per model
    q1 = "\n".join(rows["{ref}`Q1 <claim-q1>`"])
    assert "  - {bdg-success}`holds`" in q1 and "A reason with $d_k$." in q1 and "*Deciding:* a symbolic check" in q1
    assert "::::{dropdown} Why" in q1 and ":class-container: claim-fold" in q1        # the detail is folded
    assert "{phone-label}`MiniLM encoder:` {bdg-danger}`does not hold` {ref}`why <minilm-q1>`" in q1
    assert "*On MiniLM encoder:* A reason with $d_k$." in q1
    assert "**" not in q1.split("::::{dropdown} Why")[1]              # no short reason given: none shown
    with_short = _index_rows(index.render_index(book, {"Q1": {"verdict": claims.HOLDS, "reason": "Short."},
                                                       "M5": {"verdict": claims.HOLDS, "reason": "Stale."}}))
    assert "    **Short.**" in with_short["{ref}`Q1 <claim-q1>`"]
    assert "Stale." not in "\n".join(with_short["{ref}`M5 <claim-m5>`"])
    m5 = "\n".join(rows["{ref}`M5 <claim-m5>`"])
    assert "{bdg-warning}`holds under conditions`" in m5 and "*Conditions:* an orthonormal basis." in m5
    assert "counterexample: a counterexample" in m5
    q2 = "\n".join(rows["{doc}`Q2 </notebooks/01-nonlinearity>`"])
    assert f"`{index.PENDING}`" in q2 and "dropdown" not in q2
    # every row has one cell per column: ID + claim + verdict + one per model
    for key, lines in rows.items():
        assert sum(line.startswith("  - ") for line in lines) == 3, (key, lines)


def test_headline_table(tmp_path: Path) -> None:
    book = _book(tmp_path, {4: _section("C3", claims.CONDITIONS, condition="independent components")})
    text = index.render_headline(book, ["Q1", "C3"])
    assert "{bdg-warning}`holds under conditions`" in text and "A reason with $d_k$." in text
    with pytest.raises(ValueError, match="X1"):
        index.render_headline(book, ["Q1", "X1"])
    # a short reason written for the recorded verdict replaces the long one; one written for
    # another verdict does not
    short = {"C3": {"verdict": claims.CONDITIONS, "reason": "Short and human."}}
    assert "Short and human." in index.render_headline(book, ["C3"], short)
    stale = {"C3": {"verdict": claims.HOLDS, "reason": "Short and human."}}
    text = index.render_headline(book, ["C3"], stale)
    assert "Short and human." not in text and "A reason with $d_k$." in text


def test_verdict_box_shows_badge_reason_conditions_and_every_check(tmp_path: Path) -> None:
    book = _book(tmp_path, {3: _section("M5", claims.CONDITIONS, condition="a Parseval frame")})
    box = index.render_verdict_box(book.records("M5")[0])
    claim, blank, head, *rest = box.splitlines()
    assert claim == "*The claim:* " + index.inline(claims.CLAIMS['M5'].statement) and blank == ""
    # the badge links to the label's definition in the glossary (book/glossary.md holds the target)
    assert head == ("{bdg-ref-warning}`holds under conditions <glossary-holds-under-conditions>` **M5.** "
                    "A reason with $d_k$. *Conditions:* a Parseval frame.")
    glossary = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")
    for verdict in claims.ALL_VERDICTS:
        assert f"({index.glossary_target(verdict)})=" in glossary, verdict
    # folded under "n/n checks ✓", the ✓ column first
    assert rest[1:3] == [":::::{dropdown} 2/2 checks ✓", ":class-container: evidence-fold"]
    assert ("| Passed | {ref}`Check <glossary-roles>` | {ref}`Kind <glossary-kinds>` | Measured | Held to |"
            in rest)
    assert "| ✓ | *counterexample:* a counterexample | numerical | 1 | = 1 |" in rest
    assert "| ✓ | *if a Parseval frame:* an error | parity | 0 | ≤ 10⁻¹² |" in rest


def test_evidence_rows_show_equation_numbers_not_labels() -> None:
    """``eq-q1-hessian: …`` in a check's name becomes ``{eq}`eq-q1-hessian```, rendered "(6)"; a
    label that is not a numbered equation of the book, or already in a role, is left alone."""
    labels = {"eq-q1-hessian", "eq-q1-bias"}
    assert index.with_equation_numbers("eq-q1-hessian: blocks W_QK", labels) == "{eq}`eq-q1-hessian`: blocks W_QK"
    assert index.with_equation_numbers("the terms of eq-q1-bias were wrong", labels) == \
        "the terms of {eq}`eq-q1-bias` were wrong"
    assert index.with_equation_numbers("eq-q9-unknown and {eq}`eq-q1-bias`", labels) == "eq-q9-unknown and {eq}`eq-q1-bias`"
    # a label already in parentheses keeps one pair: "(2.2)", not "((2.2))"
    assert index.with_equation_numbers("max |a − b| (eq-q1-bias)", labels) == "max |a − b| {eq}`eq-q1-bias`"
    assert index.with_equation_numbers("(eq-q9-unknown)", labels) == "(eq-q9-unknown)"
    # every label an evidence row names in the committed notebooks is a numbered equation of the book
    book_labels = {label for s in BOOK.scans for label in s.math_labels}
    named = {m for v in BOOK.verdicts for c in v.checks
             for m in re.findall(r"(?<![\w`<-])eq-[a-z0-9]+(?:-[a-z0-9]+)*", " ".join(str(c.get(k) or "") for k in
                                                                                   ("name", "measured", "held_to", "fails_if")))}
    assert named, "no evidence row names an equation (the test would prove nothing)"
    assert named <= book_labels, f"labels in evidence rows that are not numbered equations: {named - book_labels}"
    box = index.render_verdict_box(BOOK.records("Q1")[0], book_labels)
    assert "{eq}`eq-q1-hessian`" in box and not re.search(r"(?<![`<])eq-q1-hessian(?!`)", box)


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
    assert "`make test`: not measured" in text and "2.5 s is start-up" in text and "load average 3.2" in text
    # the developers' targets and the start-up floor are not on the reader's page (docs/DEVELOPING.md)
    assert "Targets" not in text and "floor" not in text and "missed" not in text
    # Repeated runs: the median and the range of the runs.
    path.write_text(json.dumps({"notebooks": [{"name": "01-nonlinearity", "seconds": 7.1, "status": "ok",
                                               "runs": [7.4, 7.1, 6.9]}]}))
    text = index.render_report(tmp_path, *index.load_report(tmp_path))
    assert "Run time (s): median of 3 (range)" in text and "| 7.1 (6.9–7.4) |" in text, text
    # a notebook's row: its chapter's number and its own first heading, math as plain text
    (tmp_path / "notebooks").mkdir(exist_ok=True)
    for name, heading in (("04-cosine-vs-dot", "Cosine versus dot product, and why $\\sqrt{d_k}$"),
                          ("06b-trained-decoder", "The claims on a trained decoder")):
        cells = [{"cell_type": "markdown", "metadata": {}, "source": f"# {heading}\n\nText."}]
        (tmp_path / "notebooks" / f"{name}.ipynb").write_text(json.dumps({"cells": cells}))
    path.write_text(json.dumps({"notebooks": [{"name": "04-cosine-vs-dot", "seconds": 7.0, "status": "ok"},
                                              {"name": "06b-trained-decoder", "seconds": 6.0, "status": "ok"}]}))
    text = index.render_report(tmp_path, *index.load_report(tmp_path))
    assert "{doc}`4 · Cosine versus dot product, and why √dₖ </notebooks/04-cosine-vs-dot>`" in text, text
    assert "{doc}`6 · The claims on a trained decoder </notebooks/06b-trained-decoder>`" in text, text
    path.write_text(json.dumps({"notebooks": [{"name": "01-nonlinearity"}]}))
    assert index.load_report(tmp_path)[1].startswith("malformed")


def test_committed_report_is_well_formed() -> None:
    data, why = index.load_report(ROOT)
    if why == "absent":
        pytest.skip(f"{index.REPORT_PATH} is absent (make bench writes it)")
    assert why is None, why
    names = {row["name"] for row in data["notebooks"]}
    assert names == {p.stem for p in index.notebook_paths(ROOT)}, "the report does not cover every notebook"
    bare = [name for name in names if index._notebook_title(ROOT, name) == name]
    assert not bare, f"report rows without a chapter title: {bare}"


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



def test_the_index_has_a_column_per_trained_model_gemma_included() -> None:
    """The committed notebooks recheck claims on all three trained models and the index gives each
    its column: the header names every model, and every recheck of Gemma 3 in the registry shows its
    own verdict in the row's last cell (Gemma's), linked to its section; a claim Gemma does not
    recheck has an empty last cell."""
    trained = ["all-MiniLM-L6-v2", "SmolLM2-135M-Instruct", "Gemma-3-270M"]       # chapter 6's three
    assert [m for m in BOOK.models() if m in trained] == trained, "a trained model has no recheck in the notebooks"
    text = index.render_index(BOOK)
    body = text.split("``````{list-table}", 1)[1].split("``````", 1)[0]
    header = body.split("\n* - ", 2)[1]                            # the first row: the header
    columns = [line.strip()[2:] for line in header.splitlines()[3:]]
    assert columns == [claims.MODELS[m].short for m in BOOK.models() if claims.MODELS[m].column], columns
    gemma = claims.MODELS["Gemma-3-270M"]
    rows = {}
    for chunk in body.split("\n* - ")[1:]:
        if chunk.startswith("{ref}`"):
            rows[chunk.split("`")[1].split(" ")[0]] = [cell.strip() for cell in chunk.split("\n  -")]
    rechecked = {cid for (cid, model) in claims.RECHECKS if model == gemma.name}
    assert len(rechecked) >= 2
    position = 3 + BOOK.models().index(gemma.name)                   # ID, claim, verdict, then one per model
    for cid, cells in rows.items():
        last = cells[position]
        if cid in rechecked:
            verdict = BOOK.rechecks(cid, gemma.name)[0].verdict
            assert last.startswith(f"{{phone-label}}`{gemma.short}:`") and f"`{verdict}`" in last \
                and f"<{gemma.slug}-{cid.lower()}>" in last, (cid, last)
        else:
            assert gemma.short not in last, (cid, last)
