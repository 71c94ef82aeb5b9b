"""attnref.analysis.lowrank: exact and numerical ranks, ranks modulo row shifts, the one-head fit."""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch

from attnref.book import seeding
from attnref.analysis import lowrank
from attnref.analysis import symbolic as sym
from conftest import randn


def test_exact_rank_generic_and_integer():
    q, k = sym.matrix("q", 3, 2), sym.matrix("k", 3, 2)
    assert lowrank.exact_rank(q * k.T) == 2
    assert lowrank.exact_rank(sp.Matrix([[1, 2], [2, 4]])) == 1
    assert lowrank.exact_rank(sp.Matrix([[sp.Rational(1, 2), 0], [0, 3]])) == 2
    assert lowrank.exact_rank(sp.zeros(2, 3)) == 0


def test_exact_rank_bad_input():
    with pytest.raises(ValueError, match="matrix must be a sympy Matrix, got Tensor"):
        lowrank.exact_rank(torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"matrix must not be empty, got shape \(0, 2\)"):
        lowrank.exact_rank(sp.zeros(0, 2))
    x = sp.Symbol("x")
    with pytest.raises(ValueError, match="entries must be polynomials"):
        lowrank.exact_rank(sp.Matrix([[sp.exp(x), 1], [1, 1]]))


def test_numerical_rank_of_low_rank_products(gen):
    for rank in (1, 3, 7):
        a = randn(gen, 40, rank) @ randn(gen, rank, 30)          # (40, r)(r, 30) -> (40, 30)
        assert lowrank.numerical_rank(a) == rank
    assert lowrank.numerical_rank(torch.zeros(3, 4, dtype=torch.float64)) == 0


def test_rank_tolerance_formula():
    s = torch.tensor([2.0, 1.0, 0.0], dtype=torch.float64)
    assert lowrank.rank_tolerance(s, (5, 3)) == 2.0 * 5 * torch.finfo(torch.float64).eps


def test_numerical_rank_bad_input():
    with pytest.raises(ValueError, match=r"matrix must have 2 dimensions, got shape \(3,\)"):
        lowrank.numerical_rank(torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="matrix must have a floating dtype"):
        lowrank.numerical_rank(torch.ones(3, 3, dtype=torch.long))


def test_centre_rows_and_min_rank_over_row_shifts(gen):
    n, rank = 12, 3
    low = randn(gen, n, rank) @ randn(gen, rank, n)              # rank 3
    shifted = low + randn(gen, n, 1)                             # + c 1ᵀ: rank 4 in general
    assert lowrank.numerical_rank(shifted) == rank + 1
    assert lowrank.min_rank_over_row_shifts(shifted) == rank
    centred = lowrank.centre_rows(shifted)
    assert centred.sum(dim=-1).abs().max() < 1e-12
    # Softmax weights determine the logits up to row shifts only.
    weights = torch.softmax(low, dim=-1)
    assert lowrank.min_rank_over_row_shifts(weights.log()) <= rank


def test_centre_rows_bad_input():
    with pytest.raises(ValueError, match=r"logits must have at least 2 dimensions, got shape \(4,\)"):
        lowrank.centre_rows(torch.ones(4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"logits must have 2 dimensions, got shape \(2, 3, 3\)"):
        lowrank.min_rank_over_row_shifts(torch.ones(2, 3, 3, dtype=torch.float64))


def test_distance_to_rank_modulo_row_shifts(gen):
    n, beta = 6, 2.0
    log_p = torch.log_softmax(beta * torch.eye(n, dtype=torch.float64), dim=-1)
    for rank in range(n + 1):
        expected = beta * math.sqrt(max(n - 1 - rank, 0))
        assert abs(lowrank.distance_to_rank_modulo_row_shifts(log_p, rank) - expected) < 1e-12
    # Attained by the truncated SVD of L J plus the row means.
    logits = randn(gen, 7, 7)
    u, s, vh = torch.linalg.svd(lowrank.centre_rows(logits))
    best = (u[:, :2] * s[:2]) @ vh[:2]                            # (7, 2)(2, 7) -> (7, 7)
    residual = lowrank.centre_rows(logits - best).norm().item()
    assert abs(residual - lowrank.distance_to_rank_modulo_row_shifts(logits, 2)) < 1e-12


def test_distance_bad_rank():
    with pytest.raises(ValueError, match="rank must be a non-negative int, got -1"):
        lowrank.distance_to_rank_modulo_row_shifts(torch.eye(3, dtype=torch.float64), -1)


def test_fit_single_head_reaches_reachable_patterns_only():
    n = 5
    target = torch.softmax(2.0 * torch.eye(n, dtype=torch.float64), dim=-1)
    logits, losses = lowrank.fit_single_head(target, [1, n - 1], steps=300, generator=seeding.generator("fit"))
    assert logits.shape == (2, n, n) and losses.shape == (300, 2)
    assert losses[-1, 1] < 1e-10                      # d_k = n − 1 suffices
    distance = lowrank.centre_rows(logits[0] - target.log()).norm().item()
    assert distance >= lowrank.distance_to_rank_modulo_row_shifts(target.log(), 1) * (1 - 1e-9)
    single_logits, single_losses = lowrank.fit_single_head(target, 2, steps=10, generator=seeding.generator("fit"))
    assert single_logits.shape == (n, n) and single_losses.shape == (10,)


def test_fit_single_head_steps_match_torch_adam():
    # The hand-written Adam takes the same steps as torch.optim.Adam.
    target = torch.softmax(torch.tensor([[1.0, 0.0, -1.0], [0.0, 2.0, 0.5], [0.3, 0.1, 0.2]],
                                        dtype=torch.float64), dim=-1)
    _, losses = lowrank.fit_single_head(target, 2, steps=20, lr=0.05, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    queries = (torch.randn(1, 3, 2, generator=g, dtype=torch.float64) * 0.1)[0].requires_grad_()
    keys = (torch.randn(1, 3, 2, generator=g, dtype=torch.float64) * 0.1)[0].requires_grad_()
    optimiser = torch.optim.Adam([queries, keys], lr=0.05)
    reference = []
    for _ in range(20):
        optimiser.zero_grad()
        log_weights = torch.log_softmax(queries @ keys.T / math.sqrt(2), dim=-1)
        loss = (target * (target.log() - log_weights)).sum(dim=-1).mean()
        loss.backward()
        optimiser.step()
        reference.append(loss.item())
    assert (losses - torch.tensor(reference, dtype=torch.float64)).abs().max() < 1e-12


def test_fit_single_head_bad_input():
    good = torch.full((3, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="positive entries and rows summing to 1"):
        lowrank.fit_single_head(torch.eye(3, dtype=torch.float64), 2)
    with pytest.raises(ValueError, match="d_k must be a positive int, got 0"):
        lowrank.fit_single_head(good, 0)
    with pytest.raises(ValueError, match=r"non-empty sequence of positive ints, got \[\]"):
        lowrank.fit_single_head(good, [])
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        lowrank.fit_single_head(good, 1, steps=0)
    with pytest.raises(ValueError, match=r"target must have 2 dimensions, got shape \(3,\)"):
        lowrank.fit_single_head(torch.full((3,), 1 / 3, dtype=torch.float64), 1)
