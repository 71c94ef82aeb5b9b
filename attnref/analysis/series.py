r"""Truncated power series in one small parameter ε, for the Taylor expansions of the book.

A series is the list of its coefficients ``[c_0, c_1, …, c_{K-1}]`` of :math:`ε^0, …, ε^{K-1}`;
everything of order :math:`ε^K` and above is dropped. ``sympy.series`` expands a softmax of
symbolic logits slowly (seconds for three logits); the recursions below expand products,
exponentials and reciprocals coefficient by coefficient instead, one formula per line, and
agree with ``sympy.series`` (``tests/test_series.py``).
"""

from __future__ import annotations

from typing import Sequence

import sympy as sp

Series = list  # list[sp.Expr]: the coefficients of ε^0 … ε^{K-1}


def _check_order(order: int) -> int:
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order must be a positive int (the number of coefficients kept), got {order!r}")
    return order


def _check_series(name: str, series: Sequence[sp.Expr]) -> list[sp.Expr]:
    if isinstance(series, (str, bytes)) or not hasattr(series, "__len__") or len(series) == 0:
        raise ValueError(f"{name} must be a non-empty list of coefficients, got {series!r}")
    return [sp.sympify(c) for c in series]


def coefficients(expr: sp.Expr, eps: sp.Symbol, order: int) -> Series:
    r"""The coefficients of :math:`ε^0, …, ε^{order-1}` of ``expr``, a polynomial in ``eps``.

    Higher powers of ``eps`` are dropped (truncation). ``ValueError`` if ``expr`` is not a
    polynomial in ``eps`` (expand a transcendental function with ``sympy.series`` first).
    """
    _check_order(order)
    if not isinstance(eps, sp.Symbol):
        raise ValueError(f"eps must be a sympy Symbol, got {type(eps).__name__}")
    expanded = sp.expand(sp.sympify(expr))
    if not expanded.is_polynomial(eps):
        raise ValueError(f"expr must be a polynomial in {eps}, got {expr}")
    poly = sp.Poly(expanded, eps)
    return [poly.coeff_monomial(eps**k) for k in range(order)]


def multiply(a: Sequence[sp.Expr], b: Sequence[sp.Expr]) -> Series:
    r"""Cauchy product of two truncated series: :math:`c_k = \sum_{i=0}^{k} a_i\, b_{k-i}`."""
    a = _check_series("a", a)
    b = _check_series("b", b)
    if len(a) != len(b):
        raise ValueError(f"a and b must have the same number of coefficients, got {len(a)} and {len(b)}")
    return [sp.expand(sum(a[i] * b[k - i] for i in range(k + 1))) for k in range(len(a))]


def exponential(g: Sequence[sp.Expr]) -> Series:
    r""":math:`f = e^{g}` as a truncated series.

    From :math:`f' = g' f`: :math:`f_0 = e^{g_0}` and
    :math:`k\, f_k = \sum_{i=1}^{k} i\, g_i\, f_{k-i}` for :math:`k \ge 1`.
    """
    g = _check_series("g", g)
    f = [sp.exp(g[0])]
    for k in range(1, len(g)):
        f.append(sp.expand(sum(i * g[i] * f[k - i] for i in range(1, k + 1)) / k))
    return f


def reciprocal(s: Sequence[sp.Expr]) -> Series:
    r""":math:`r = 1/s` as a truncated series; needs :math:`s_0 \ne 0`.

    From :math:`r s = 1`: :math:`r_0 = 1/s_0` and
    :math:`r_k = -\tfrac{1}{s_0} \sum_{i=1}^{k} s_i\, r_{k-i}` for :math:`k \ge 1`.
    """
    s = _check_series("s", s)
    if s[0] == 0:
        raise ValueError("s must have a non-zero constant coefficient s_0 to have a reciprocal series")
    r = [1 / s[0]]
    for k in range(1, len(s)):
        r.append(sp.expand(-sum(s[i] * r[k - i] for i in range(1, k + 1)) / s[0]))
    return r


def softmax_series(logits: Sequence[sp.Expr], eps: sp.Symbol, order: int) -> list[Series]:
    r"""Softmax :math:`p_j = e^{\ell_j} / \sum_l e^{\ell_l}` of logits polynomial in ``eps``, truncated.

    Returns one series per logit: ``result[j][k]`` is the coefficient of :math:`ε^k` in :math:`p_j`.
    """
    _check_order(order)
    if isinstance(logits, (str, bytes)) or not hasattr(logits, "__len__") or len(logits) == 0:
        raise ValueError(f"logits must be a non-empty list of expressions, got {logits!r}")
    exps = [exponential(coefficients(logit, eps, order)) for logit in logits]   # e^{ℓ_j}
    total = [sp.expand(sum(e[k] for e in exps)) for k in range(order)]          # Σ_l e^{ℓ_l}
    inverse = reciprocal(total)                                                  # 1 / Σ_l e^{ℓ_l}
    return [multiply(e, inverse) for e in exps]                                  # e^{ℓ_j} / Σ_l e^{ℓ_l}
