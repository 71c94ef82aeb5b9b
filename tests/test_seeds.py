"""The seed sweep (``--attnref-seeds``, tools/testenv/nbplugin.py) can fail, and skips what it should.

``make test`` re-runs every notebook's code cells for one more seed (``make seeds``: five) in
the kernel nbval used, and fails if an assertion breaks or a recorded verdict changes. Here
the sweep runs on four small notebooks (each costs a kernel start, and one imports attnref):
one whose assertion holds only for some seeds (it reads the seed through ``attnref.book.seeding``,
as the chapters do, without naming ``ATTNREF_SEED``), one whose verdict depends on the seed
(read from the environment), one that never reads it (its sweep is skipped: nothing in it can
depend on the seed), and a robust one with a skipped cell and a cell expected to raise. A
placeholder without code cells must not start a kernel nor produce an item.
"""

from __future__ import annotations

import json

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

SEED = "import os\nseed = int(os.environ.get('ATTNREF_SEED', '0'))"


def verdict_cell(verdict_expression: str, stored: str):
    """A cell that displays a verdict the way claims.record does (metadata attnref_verdict)."""
    source = ("from IPython.display import display\n"
              f"verdict = {verdict_expression}\n"
              "display({'text/plain': 'Q1: ' + verdict}, raw=True,\n"
              "        metadata={'attnref_verdict': {'id': 'Q1', 'verdict': verdict}})")
    cell = new_code_cell(source, execution_count=None)
    cell.outputs = [new_output("display_data", data={"text/plain": f"Q1: {stored}"},
                               metadata={"attnref_verdict": {"id": "Q1", "verdict": stored}})]
    return cell


def write(directory, name, cells):
    code = [cell for cell in cells if cell.cell_type == "code"]
    for count, cell in enumerate(code, start=1):
        cell.execution_count = count
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python",
                                                            "display_name": "Python 3 (ipykernel)"}})
    nbformat.write(nb, directory / f"{name}.ipynb")


def test_the_sweep_fails_on_seed_dependent_notebooks_and_passes_robust_ones(pytester):
    notebooks = pytester.path / "notebooks"
    notebooks.mkdir()
    write(notebooks, "fragile_assert", [new_code_cell("from attnref.book import seeding\nseed = seeding.seed()"),
                                        new_code_cell("assert seed != 2, 'only fails for seed 2'")])
    write(notebooks, "fragile_verdict", [new_code_cell(SEED),
                                         verdict_cell("'holds' if seed == 0 else 'does not hold'", "holds")])
    write(notebooks, "robust", [
        new_code_cell(SEED),
        new_code_cell("# NBVAL_SKIP\nraise RuntimeError('a skipped cell never runs')"),
        new_code_cell("# NBVAL_RAISES_EXCEPTION\nraise ValueError('expected')"),
        new_code_cell("assert abs(sum([0.1] * 10) - 1) < 1e-12"),
        verdict_cell("'holds'", "holds"),
    ])
    write(notebooks, "unseeded", [new_code_cell("x = sum(range(4))"), new_code_cell("assert x == 6")])
    write(notebooks, "placeholder", [new_markdown_cell("# Placeholder")])

    result = pytester.runpytest_inprocess("-p", "nbplugin", "-p", "no:xdist", "--nbval-lax",
                                          "--nbval-current-env", "--attnref-seeds=1,2", "-rA", "notebooks")
    output = result.stdout.str()
    collected = [line for line in output.splitlines() if line.startswith(("PASSED", "FAILED"))]
    assert not any("placeholder" in line for line in collected), collected
    assert "PASSED notebooks/robust.ipynb::seeds[1,2]" in collected, output
    assert any(line.startswith("FAILED notebooks/fragile_assert.ipynb::seeds[1,2]") for line in collected), output
    assert any(line.startswith("FAILED notebooks/fragile_verdict.ipynb::seeds[1,2]") for line in collected), output
    assert "seed 2, Cell 1: AssertionError: only fails for seed 2" in output
    assert "seed 1: a verdict depends on the seed: Q1: stored 'holds', computed 'does not hold'" in output
    assert "unseeded.ipynb: never read ATTNREF_SEED" in output, output
    # The default-seed cells themselves pass: only the sweep sees the other seeds.
    assert result.parseoutcomes() == {"passed": 13, "failed": 2, "skipped": 2}, output   # 2 verdict items


def test_without_the_option_there_is_no_sweep(pytester):
    notebooks = pytester.path / "notebooks"
    notebooks.mkdir()
    write(notebooks, "one", [new_code_cell("x = 1")])
    result = pytester.runpytest_inprocess("-p", "nbplugin", "-p", "no:xdist", "--nbval-lax", "--co", "-q", "notebooks")
    assert "seeds[" not in result.stdout.str()
    assert json.loads(json.dumps(result.parseoutcomes())) in ({"test": 1}, {"tests": 1}), result.stdout.str()
