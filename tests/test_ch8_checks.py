"""Chapter 8's checks can fail: for every claim E1–E5, one plausible bug injected into the
notebook's own analysis code moves the claim's verdict away from the expected one, and the check
that catches it is named.

Each test runs the set-up cells and the code cells of one claim section of
``notebooks/08-training.ipynb`` in this process, on the stored data of ``make experiments``
(plotting cells and the verdict cell are skipped; ``glue`` and ``display`` are no-ops), with one
mutation — a replacement of an exact piece of source text (the test fails, naming the text, if
the notebook was reworded) — and decides the verdict from the recorded evidence with
``claims.decide``.
"""

from __future__ import annotations

import pytest

from attnref.book import claims

import notebook_sections                     # tests/notebook_sections.py

NOTEBOOK = "08-training.ipynb"


def sections() -> tuple[str, dict[str, list[str]]]:
    return notebook_sections.sections(NOTEBOOK, [f"E{i}" for i in range(1, 6)], every_setup_cell=True)


def run_section(claim_id: str, replace: tuple[str, str] | None = None):
    setup, found = sections()
    setup = setup.replace("from myst_nb import glue", "glue = lambda *a, **k: None")
    setup = setup.replace("from IPython.display import Markdown, display",
                          "Markdown = display = lambda *a, **k: None")
    source = "\n\n".join(found[claim_id])
    if replace is not None:                       # one mutation, in the set-up or in the section
        original, mutant = replace
        hits = setup.count(original) + source.count(original)
        assert hits == 1, f"{claim_id}: the text to mutate is in the notebook {hits} times, not once: {original!r}"
        setup, source = setup.replace(original, mutant), source.replace(original, mutant)
    ns: dict = {}
    exec(compile(setup, "<setup>", "exec"), ns)
    exec(compile(source, f"<{claim_id}>", "exec"), ns)
    evidence = ns[claim_id.lower()]
    return claims.decide(evidence.checks), evidence.checks


@pytest.mark.parametrize("claim_id", [f"E{i}" for i in range(1, 6)])
def test_the_notebook_gives_the_expected_verdict(claim_id):
    verdict, _ = run_section(claim_id)
    assert verdict == claims.expected_verdict(claim_id)


MUTATIONS = {
    # E1: the counterexample's threshold with the wrong sign (no gain read as "worse by δ")
    "E1": (('"high", "<", DELTA,\n       again=max(e1_again', '"high", "<", -DELTA,\n       again=max(e1_again'),
           "largest gain of σ ∈ {ReLU, GELU} over identity: 95 % t upper end"),
    # E2: the variant names mixed up: pre-LN compared with post-LN in place of the ReLU variant
    "E2": (('compare("E2", "post_relu", "post"', 'compare("E2", "pre", "post"'),
           "largest gain of a ReLU after Add & Norm over post-LN, depths 2 and 4: 95 % t upper end"),
    # E3: chance computed from the number of keys instead of the number of values
    "E3": (('chance = 1 / data["E3"]["task"]["values"]', 'chance = 1 / data["E3"]["task"]["keys"]'),
           "per-token MLP accuracy − chance (1/16), n = 8: 95 % t upper end"),
    # E4: the learned-temperature comparison reads the fixed-scale runs (a variant-name slip)
    "E4": (('e4_qk = {n: compare("E4", "cosine_learned", "dot"', 'e4_qk = {n: compare("E4", "cosine", "dot"'),
           "smallest cosine (learned β) − dot over n ∈ {4, 16, 32}: 95 % t lower end"),
    # E5: the smallest difference that counts in the wrong unit (0.3 points instead of 3)
    "E5": (("DELTA, LEVEL = 0.03, 0.95", "DELTA, LEVEL = 0.003, 0.95"),
           "fused W − factored W_Q W_Kᵀ, n = 8: 95 % t upper end"),
}


@pytest.mark.parametrize("claim_id", sorted(MUTATIONS))
def test_a_plausible_bug_moves_the_verdict_and_a_named_check_catches_it(claim_id):
    replace, catching = MUTATIONS[claim_id]
    verdict, checks = run_section(claim_id, replace)
    assert verdict != claims.expected_verdict(claim_id), f"{claim_id}: the mutant kept the verdict {verdict}"
    changed = {c.name: c.passed for c in checks}
    _, original = run_section(claim_id)
    flipped = [c.name for c in original if changed.get(c.name) is not None and changed[c.name] != c.passed]
    assert catching in flipped, f"{claim_id}: checks that changed: {flipped}"


def test_a_verdict_that_the_cpu_kernels_would_change_is_not_established():
    # the recheck on torch's portable kernels coming out 5 points apart (a kernel-dependent result):
    # the supporting check of the same decision fails, and the verdict is not established
    replace = ('e5_again = compare("E5", "fused", "dot", source=portable)',
               'e5_again = results.paired_t([x + 0.05 for x in differences("E5", "fused", "dot", '
               'source=portable)], LEVEL)')
    verdict, checks = run_section("E5", replace)
    assert verdict == claims.NOT_ESTABLISHED
    failing = [c.name for c in checks if not c.passed and c.bears_on == claims.SUPPORTING]
    assert "fused W − factored W_Q W_Kᵀ, n = 8 (upper end): the same decision on torch's portable CPU kernels" \
        in failing, failing
    assert all(name.endswith("the same decision on torch's portable CPU kernels") for name in failing)


@pytest.mark.parametrize("claim_id", [f"E{i}" for i in range(1, 6)])
def test_a_nan_accuracy_cannot_pass(claim_id):
    # one stored accuracy read as NaN (a diverged or corrupted run): the verdict moves
    loading = 'data = {e: results.load(e) for e in ("E1", "E2", "E3", "E4", "E5")}'
    replace = (loading, "_accuracies = results.accuracies\n"
               "results.accuracies = lambda *a, **k: [float('nan')] + _accuracies(*a, **k)[1:]\n" + loading)
    from attnref.training import results as _results
    original = _results.accuracies
    try:
        verdict, checks = run_section(claim_id, replace)
    finally:
        _results.accuracies = original
    assert verdict != claims.expected_verdict(claim_id), f"{claim_id}: a NaN accuracy kept the verdict {verdict}"


def test_every_check_says_what_it_rules_out():
    for claim_id in [f"E{i}" for i in range(1, 6)]:
        _, checks = run_section(claim_id)
        assert all(c.fails_if for c in checks), [c.name for c in checks if not c.fails_if]
