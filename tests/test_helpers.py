"""attnref.analysis.symbolic, attnref.analysis.stats, attnref.book.seeding and the claims registry."""

from __future__ import annotations

import pytest
import sympy as sp
import torch

from attnref.book import claims, seeding
from attnref.analysis import stats
from attnref.analysis import symbolic as sym


def test_homogeneity_degrees():
    x = sym.matrix("x", 2, 2)
    variables = list(x)
    assert sym.homogeneity_degree(x * x.T, variables) == 2
    assert sym.homogeneity_degree(x * x.T * x, variables) == 3
    assert sym.homogeneity_degree(x + sp.ones(2, 2), variables) is None       # affine: not homogeneous
    a, b = sp.symbols("a b", positive=True)
    assert sym.homogeneity_degree(a / sp.sqrt(a**2 + b**2), [a, b]) == 0     # a normalised quantity


def test_is_zero_decides_polynomial_identities():
    x = sym.matrix("x", 2, 2)
    assert sym.is_zero((x + x) - 2 * x)
    assert not sym.is_zero(x * x - x)


def test_expectation_uses_only_independence_and_moments():
    q = sp.symbols("q1:4", real=True)
    k = sp.symbols("k1:4", real=True)
    dot = sum(qi * ki for qi, ki in zip(q, k))
    assert sym.expectation(dot, q + k) == 0
    assert sym.variance(dot, q + k) == 3
    # correlated case q = k: E[q·q] = d
    assert sym.expectation(sum(qi * qi for qi in q), q) == 3


def test_mean_estimate_covers_the_true_mean():
    samples = torch.randn(10_000, generator=seeding.generator("mean-estimate"), dtype=torch.float64) + 3
    estimate = stats.mean_estimate(samples)
    assert estimate.contains(3.0)
    assert estimate.half_width == pytest.approx(5 / 100, rel=0.1)   # z·σ/√N with σ = 1


def test_variance_estimate_covers_the_true_variance():
    samples = torch.randn(10_000, generator=seeding.generator("variance-estimate"), dtype=torch.float64) * 2
    assert stats.variance_estimate(samples).contains(4.0)


def test_loglog_slope_of_a_power_law():
    x = torch.logspace(-2, 2, 9, dtype=torch.float64)
    assert stats.loglog_slope(x, 3 * x**2.5) == pytest.approx(2.5, abs=1e-12)


def test_relative_error_is_max_deviation_over_max_reference():
    reference = torch.tensor([[2.0, -4.0], [1.0, 0.0]])
    value = reference + torch.tensor([[0.0, 0.0], [-1.0, 0.5]])
    assert stats.relative_error(value, reference) == 0.25        # max |v − r| / max |r| = 1/4
    assert stats.relative_error(reference, reference) == 0.0
    assert stats.relative_error(-reference, reference) == 2.0


def test_seed_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ATTNREF_SEED", "5")
    first = torch.randn(3, generator=seeding.generator("s"))
    monkeypatch.setenv("ATTNREF_SEED", "6")
    assert not torch.equal(first, torch.randn(3, generator=seeding.generator("s")))
    monkeypatch.setenv("ATTNREF_SEED", "5")
    assert torch.equal(first, torch.randn(3, generator=seeding.generator("s")))
    monkeypatch.setenv("ATTNREF_SEED", "five")
    with pytest.raises(ValueError, match="ATTNREF_SEED must be an integer, got 'five'"):
        seeding.seed()


def test_evidence_decides_the_verdict_by_the_rule():
    """The verdict follows from the recorded checks (the registry against the catalogue's IDs is
    tested in tests/test_claims_index.py, from the in-repository copy tests/data/catalogue.json)."""
    def evidence(stated=None, counter=None, condition=None):
        e = claims.Evidence("Q1")
        if stated is not None:
            e.true("stated", stated, kind=claims.NUMERICAL)
        if counter is not None:
            e.counterexample.true("counterexample", counter, kind=claims.NUMERICAL)
        if condition is not None:
            e.under("a condition").true("conditioned", condition, kind=claims.NUMERICAL)
        return claims.decide(e.checks)

    assert evidence(stated=True) == claims.HOLDS
    assert evidence(stated=False) == claims.NOT_ESTABLISHED
    assert evidence(counter=True) == claims.FAILS
    assert evidence(counter=True, condition=True) == claims.CONDITIONS
    assert evidence(counter=True, condition=False) == claims.NOT_ESTABLISHED


def test_evidence_rejects_an_unknown_claim_and_an_uncomputed_outcome():
    with pytest.raises(ValueError, match="unknown claim ID 'Z9'"):
        claims.Evidence("Z9")
    with pytest.raises(ValueError, match="passed must be a computed boolean, got str"):
        claims.Evidence("Q1").true("x", "yes", kind=claims.NUMERICAL)


def test_symbolic_softmax_rows_and_mask():
    s = sym.matrix("s", 2, 3)
    weights = sym.softmax_rows(s, keep=[True, False, True])
    assert weights[0, 1] == 0 and sp.simplify(sum(weights.row(1)) - 1) == 0
    with pytest.raises(ValueError, match="keep has 2 entries, expected one per column"):
        sym.softmax_rows(s, keep=[True, False])


def test_symbolic_layer_norm_matches_attnref():
    x = sym.row_vector("x", 3)
    parts = sym.layer_norm(x, eps=sp.Rational(1, 10))
    values = {v: val for v, val in zip(x, (1.0, 2.5, -0.5))}
    numeric = torch.tensor([[1.0, 2.5, -0.5]], dtype=torch.float64)
    from attnref import LayerNormParams, layer_norm
    expected = layer_norm(numeric, LayerNormParams(eps=0.1))
    got = torch.tensor([[float(e.subs(values)) for e in parts.output]], dtype=torch.float64)
    assert (got - expected).abs().max() < 1e-12
    assert sym.is_zero(sym.layer_norm_rows(sp.Matrix.vstack(x, x))[1, :] - sym.layer_norm(x).output)
    with pytest.raises(ValueError, match="x must be a row or column vector"):
        sym.layer_norm(sym.matrix("m", 2, 2))
