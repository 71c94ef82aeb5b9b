"""attnref.analysis.series: truncated power series agree with sympy.series; bad input raises ValueError."""

from __future__ import annotations

import pytest
import sympy as sp

from attnref.analysis import series

eps = sp.Symbol("epsilon", positive=True)
a, b, c = sp.symbols("a b c", real=True)


def reference(expr: sp.Expr, order: int) -> list[sp.Expr]:
    """The coefficients of ε^0 … ε^{order-1} of expr, from sympy's own series."""
    expanded = sp.series(expr, eps, 0, order).removeO()
    return [sp.expand(expanded.coeff(eps, k)) for k in range(order)]


def same(left: list[sp.Expr], right: list[sp.Expr]) -> bool:
    return len(left) == len(right) and all(sp.simplify(x - y) == 0 for x, y in zip(left, right))


def test_coefficients_truncate_a_polynomial():
    assert series.coefficients(1 + a * eps + b * eps**3 + eps**7, eps, 4) == [1, a, 0, b]


def test_multiply_is_the_cauchy_product():
    left = [1, a, b]
    right = [2, c, 0]
    assert same(series.multiply(left, right), reference((1 + a * eps + b * eps**2) * (2 + c * eps), 3))


def test_exponential_matches_sympy_series():
    g = [a, b, c, 1]
    assert same(series.exponential(g), reference(sp.exp(a + b * eps + c * eps**2 + eps**3), 4))


def test_reciprocal_matches_sympy_series():
    s = [2, a, b, 0, 1]
    assert same(series.reciprocal(s), reference(1 / (2 + a * eps + b * eps**2 + eps**4), 5))


def test_softmax_series_matches_sympy_series():
    logits = [a * eps + eps**3, b * eps, c * eps**2]
    expansion = series.softmax_series(logits, eps, 4)
    exps = [sp.exp(logit) for logit in logits]
    for j in range(3):
        assert same(expansion[j], reference(exps[j] / sum(exps), 4))


def test_softmax_series_sums_to_one():
    expansion = series.softmax_series([a * eps, b * eps**2, c * eps - eps**3], eps, 5)
    totals = [sp.simplify(sum(p[k] for p in expansion)) for k in range(5)]
    assert totals == [1, 0, 0, 0, 0]


def test_bad_order():
    with pytest.raises(ValueError, match="order must be a positive int"):
        series.coefficients(a * eps, eps, 0)
    with pytest.raises(ValueError, match="order must be a positive int"):
        series.softmax_series([a * eps], eps, True)


def test_not_a_polynomial_in_eps():
    with pytest.raises(ValueError, match="expr must be a polynomial in epsilon"):
        series.coefficients(sp.exp(eps), eps, 3)


def test_eps_must_be_a_symbol():
    with pytest.raises(ValueError, match="eps must be a sympy Symbol"):
        series.coefficients(a, "epsilon", 3)


def test_mismatched_lengths():
    with pytest.raises(ValueError, match="same number of coefficients, got 2 and 3"):
        series.multiply([1, a], [1, b, c])


def test_empty_series():
    with pytest.raises(ValueError, match="g must be a non-empty list"):
        series.exponential([])
    with pytest.raises(ValueError, match="logits must be a non-empty list"):
        series.softmax_series([], eps, 3)


def test_reciprocal_needs_a_nonzero_constant_term():
    with pytest.raises(ValueError, match="non-zero constant coefficient"):
        series.reciprocal([0, 1, a])
