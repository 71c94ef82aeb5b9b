"""Run one claim section of a chapter notebook in this process, with one bug injected.

The chapter tests (``tests/test_ch<N>_checks.py``) show that every claim's checks can fail: they
run the set-up cell and the code cells of one claim section — a section starts at a markdown
anchor ``(claim-<id>)=`` — with a mutation applied, and decide the verdict from the recorded
evidence with ``claims.decide``. Plotting cells (``plotting.show``) and ``remove-cell`` cells (the
verdict sentence) are skipped, and ``glue`` is a no-op.

A mutation replaces an exact piece of source text; the test fails, naming the text, when the
notebook no longer contains it exactly once (the notebook was reworded: update the test).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from attnref.book import claims

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def sections(notebook: str, claim_ids: list[str],
             every_setup_cell: bool = False) -> tuple[str, dict[str, list[str]]]:
    """The notebook's set-up — its first code cell, or with ``every_setup_cell`` all code cells
    before the first claim, joined — and, per claim ID, the sources of the section's code cells
    that are neither plotting nor removed from the page."""
    cells = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))["cells"]
    setup, current, found = [], None, {}
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for line in source.splitlines():
                if line.startswith("(claim-") and line.endswith(")="):
                    current = line[len("(claim-"):-2].upper()
                    found[current] = []
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        if current is None:
            setup.append(source)
        elif "plotting.show" not in source and "remove-cell" not in tags:
            found[current].append(source)
    assert setup and sorted(found) == sorted(claim_ids), sorted(found)
    return "\n\n".join(setup if every_setup_cell else setup[:1]), found


def run_section(notebook: str, claim_ids: list[str], claim_id: str,
                replace: tuple[str, str] | None = None, namespace: dict | None = None):
    """Run the set-up cell, then section ``claim_id`` with ``replace = (original, mutant)``
    applied; ``namespace`` adds names after the set-up. Returns the verdict and the checks."""
    setup, found = sections(notebook, claim_ids)
    sources = found[claim_id]
    if replace is not None:
        original, mutant = replace
        hits = sum(s.count(original) for s in sources)
        assert hits == 1, (f"mutation site {original!r} found {hits} times in section {claim_id} "
                           f"of {notebook}: update the test to the notebook's wording")
        sources = [s.replace(original, mutant) for s in sources]
    ns: dict = {}
    default = torch.get_default_dtype()     # the set-up cell makes float64 the default: restored
    try:
        exec(compile(setup.replace("from myst_nb import glue", "glue = lambda *a, **k: None"),
                     "<setup>", "exec"), ns)
        ns.update(namespace or {})
        for source in sources:
            exec(compile(source, f"<{claim_id}>", "exec"), ns)
    finally:
        torch.set_default_dtype(default)
    evidence = ns[claim_id.lower()]
    assert isinstance(evidence, claims.Evidence)
    return claims.decide(evidence.checks), evidence.checks


def assert_caught(claim_id: str, verdict: str, checks, expected_failure: str, model: str | None = None) -> None:
    """The mutant moved the verdict (of the claim, or of its recheck on ``model``), and a failing
    check's name contains ``expected_failure``."""
    expected = claims.expected_verdict(claim_id, model)
    assert verdict != expected, f"{claim_id}: the mutant kept the verdict {verdict!r}"
    failing = [c.name for c in checks if not c.passed]
    assert any(expected_failure in name for name in failing), (
        f"{claim_id}: expected a failing check containing {expected_failure!r}, failing: {failing}")


def with_nan(function, field: str | None = None, when=lambda *args, **kwargs: True):
    """``function`` whose output gets a NaN in its first entry whenever ``when(*args, **kwargs)``
    holds: the tensor it returns, or the ``field`` of the named tuple it returns (an
    AttentionResult's ``"output"`` or ``"weights"``; the other fields are kept). The chapter
    tests inject it to show that a NaN never passes a check."""
    def mutant(*args, **kwargs):
        out = function(*args, **kwargs)
        if not when(*args, **kwargs):
            return out
        target = (out if field is None else getattr(out, field)).clone()
        target.view(-1)[0] = float("nan")
        return target if field is None else out._replace(**{field: target})
    return mutant
