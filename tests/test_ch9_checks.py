"""Chapter 9's checks can fail: plausible bugs injected into ``attnref.blockwise`` (the code claim
F1 is about) or into the notebook's derivation move F1's verdict away from *holds*, and the check
that catches each is named.

Each test runs the set-up cell and the code cells of the F1 section of
``notebooks/09-online-softmax.ipynb`` in this process (the plotting cell and the verdict cell are
skipped; ``glue`` is a no-op) with one mutation, and decides the verdict from the recorded
evidence with ``claims.decide``. A blockwise mutant is a copy of ``attnref/blockwise.py`` with one
piece of source text replaced (``tests/test_blockwise.py``'s ``mutant``); the notebook calls
``blockwise.blockwise_attention``, which the test replaces by the mutant's.
"""

from __future__ import annotations

import pytest

from attnref import blockwise

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught, with_nan
from test_blockwise import mutant

NOTEBOOK = "09-online-softmax.ipynb"
CLAIM_IDS = ["F1"]


def run_section(replace: tuple[str, str] | None = None):
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, "F1", replace)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    yield


def test_the_unmutated_section_holds():
    verdict, checks = run_section()
    assert verdict == notebook_sections.claims.CLAIMS["F1"].expected, [c.name for c in checks if not c.passed]


#: bug -> (text in attnref/blockwise.py, its replacement, the check that must fail)
BLOCKWISE_BUGS = {
    "accumulator not rescaled": ("rows.mul_(rescale)                                                # α_i a_i",
                                 "rows.mul_(1.0)", "blockwise error / bound"),
    "running sum not rescaled": ("row_sum[:, r0:r1].mul_(rescale)", "row_sum[:, r0:r1].mul_(1.0)",
                                 "blockwise error / bound"),
    "running maximum starts at 0": ('row_max = q.new_full((B, n, 1), float("-inf"))', "row_max = q.new_zeros(B, n, 1)",
                                    "scores near −400"),
    "divided by ℓ before the last block": ("rows.baddbmm_(probabilities, v[:, k0:k1])  ",
                                           "rows.baddbmm_(probabilities, v[:, k0:k1]).div_(row_sum[:, r0:r1])  ",
                                           "blockwise error / bound"),
    "diagonal block: last masked row off by one": ("diagonal_end = min(r1, max(r0, k1 - 1))",
                                                   "diagonal_end = min(r1, max(r0, k1 - 2))", "causal, float64"),
    "causal: nothing skipped": ("return min(k0, n), n", "return 0, n", "score products computed / all"),
    "causal: first row of a key block skipped": ("return min(k0, n), n", "return min(k0 + 1, n), n",
                                                 "score products computed / all"),
    "the whole score matrix allocated": ("largest = max(((r1 - r0) * (k1 - k0) for k0, k1, r0, r1 in steps), default=0)\n"
                                         "    buffer = q.new_empty(B * largest)                      # one tile",
                                         "largest = n * m\n"
                                         "    buffer = q.new_empty(B * largest)                      # one tile",
                                         "blockwise peak"),
}


@pytest.mark.parametrize("bug", list(BLOCKWISE_BUGS))
def test_a_bug_in_the_blockwise_code_moves_the_verdict(bug, monkeypatch):
    original, replacement, caught_by = BLOCKWISE_BUGS[bug]
    monkeypatch.setattr(blockwise, "blockwise_attention", mutant(original, replacement).blockwise_attention)
    verdict, checks = run_section()
    assert_caught("F1", verdict, checks, caught_by)


def test_a_nan_in_the_blockwise_output_moves_the_verdict(monkeypatch):
    monkeypatch.setattr(blockwise, "blockwise_attention", with_nan(blockwise.blockwise_attention))
    verdict, checks = run_section()
    assert_caught("F1", verdict, checks, "blockwise error / bound")


def test_the_derivation_without_the_rescale_is_caught():
    verdict, checks = run_section(("rescale = old_max / new_max", "rescale = 1"))
    assert_caught("F1", verdict, checks, "two blocks of two")


def test_a_gradient_without_the_d_term_is_caught():
    verdict, checks = run_section(("w_j * (g * v_j - g * y))", "w_j * g * v_j)"))
    assert_caught("F1", verdict, checks, "gradient")
