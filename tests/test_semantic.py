"""A3's measurement (attnref.analysis.semantic) against independent computations, and its verdict
rule: the baseline removes the mean and the top principal directions (compared with an SVD of the
centred vectors), the pair cosines and gaps equal loops over the tokens, and the rule gives each
verdict for the interval layouts its docstring names."""

from __future__ import annotations

import math

import pytest
import torch

from attnref.analysis import semantic, stats
from attnref.book import claims


def test_common_directions_are_the_mean_and_the_top_principal_axes(gen):
    x = torch.randn(500, 12, generator=gen, dtype=torch.float64) * torch.linspace(3, 0.2, 12) + 4.0
    mean, directions = semantic.common_directions(x.sum(0), x.T @ x, x.shape[0], 3)
    assert torch.allclose(mean, x.mean(0), atol=1e-12)
    _, _, vh = torch.linalg.svd(x - x.mean(0), full_matrices=False)
    # the same subspace (signs and order within ties may differ): projectors agree
    assert torch.allclose(directions.T @ directions, vh[:3].T @ vh[:3], atol=1e-9)
    cleaned = semantic.remove_common(x, mean, directions)
    assert cleaned.mean(0).abs().max() < 1e-12                     # the mean is gone
    assert (cleaned @ directions.T).abs().max() < 1e-10            # and the top directions
    assert semantic.directions_count(384) == 4 and semantic.directions_count(576) == 6
    with pytest.raises(ValueError, match="components"):
        semantic.common_directions(x.sum(0), x.T @ x, 500, 13)


def test_pair_cosines_and_gaps_equal_loops(gen):
    first = [torch.randn(n, 5, generator=gen, dtype=torch.float64) for n in (3, 4, 2)]
    second = [torch.randn(n, 5, generator=gen, dtype=torch.float64) for n in (2, 3, 4)]
    first_ids = [torch.tensor(ids) for ids in ([1, 2, 3], [4, 5, 1, 7], [8, 9])]
    second_ids = [torch.tensor(ids) for ids in ([1, 6], [2, 2, 5], [8, 10, 11, 12])]
    S = semantic.pair_cosines(first, first_ids, second, second_ids)
    for k in range(3):
        for j in range(3):
            values = [float(a @ b / (a.norm() * b.norm())) for a, i in zip(first[k], first_ids[k].tolist())
                      for b, m in zip(second[j], second_ids[j].tolist()) if i != m]
            assert S[k, j].item() == pytest.approx(sum(values) / len(values), abs=1e-12)
    gaps = semantic.semantic_gaps(S)
    for k in range(3):
        others = [S[k, j].item() for j in range(3) if j != k]
        assert gaps[k].item() == pytest.approx(S[k, k].item() - sum(others) / 2, abs=1e-12)
    # stages along a trailing axis give the same per stage
    stacked = semantic.semantic_gaps(torch.stack([S, 2 * S], -1))
    assert torch.allclose(stacked[:, 1], 2 * gaps)
    with pytest.raises(ValueError, match="token ids"):
        semantic.pair_cosines(first, first_ids[:2], second, second_ids)


def _interval(low, high):
    return stats.Interval((low + high) / 2, low, high, "bootstrap (asymptotic)", 1e-6, 1000, (high - low) / 10)


@pytest.mark.parametrize("raw, removed, verdict", [
    ((0.05, 0.15), (0.1, 0.2), claims.HOLDS),
    ((-0.02, 0.1), (0.1, 0.2), claims.NOT_ESTABLISHED),        # an interval holding 0 decides nothing
    ((-0.2, -0.1), (0.1, 0.2), claims.CONDITIONS),             # raw refuted, the corrected gap holds
    ((-0.2, -0.1), (-0.3, -0.1), claims.FAILS),                # both refuted
    ((-0.2, -0.1), (-0.1, 0.1), claims.NOT_ESTABLISHED),       # refuted raw, undecided corrected
])
def test_the_rule_fixed_before_the_measurement(raw, removed, verdict):
    e = claims.Evidence("A3")
    semantic.record(e, {"raw": _interval(*raw), "removed": _interval(*removed)}, "layers 1–6")
    assert claims.decide(e.checks) == verdict
    if verdict == claims.CONDITIONS:
        assert claims.conditions_of(e.checks) == [semantic.REMOVED]
    assert all(c.excludes and c.false_failure is not None for c in e.checks)
