"""sympy helpers that the notebooks share: named symbol matrices, homogeneity degrees,
expectations of polynomials in independent random variables, checked identities.
"""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple, Sequence

import sympy as sp


def matrix(name: str, rows: int, cols: int, **assumptions) -> sp.Matrix:
    """A ``rows × cols`` matrix of symbols ``name_{i,j}`` (real by default), 1-based indices."""
    assumptions.setdefault("real", True)
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{name}_{{{i + 1},{j + 1}}}", **assumptions))


def row_vector(name: str, length: int, **assumptions) -> sp.Matrix:
    """A ``1 × length`` row vector of symbols ``name_{j}`` (tokens are rows in this book)."""
    assumptions.setdefault("real", True)
    return sp.Matrix(1, length, lambda _, j: sp.Symbol(f"{name}_{{{j + 1}}}", **assumptions))


def symbols_of(*objects: sp.Basic | sp.MatrixBase) -> list[sp.Symbol]:
    """Every free symbol of the given expressions or matrices, in a stable order."""
    found: set[sp.Symbol] = set()
    for obj in objects:
        found |= obj.free_symbols
    return sorted(found, key=lambda s: s.name)


def _entry_is_zero(expr: sp.Basic) -> bool:
    expanded = sp.expand(expr)
    if expanded == 0:
        return True
    if expanded.is_polynomial():   # an expanded polynomial that is not 0 is not identically 0
        return False
    return sp.simplify(expanded) == 0


def is_zero(expr: sp.Basic | sp.MatrixBase) -> bool:
    """True when ``expr`` is identically 0 (every entry, for a matrix).

    Polynomials are decided exactly by expansion; other expressions by ``sympy.simplify``.
    """
    if isinstance(expr, sp.MatrixBase):
        return all(_entry_is_zero(entry) for entry in expr)
    return _entry_is_zero(expr)


def _degree_of(expr: sp.Basic, variables: Sequence[sp.Symbol]) -> int | None:
    expr = sp.expand(expr)
    if expr == 0:
        return None
    if expr.is_polynomial(*variables):
        degrees = {sum(monomial) for monomial in sp.Poly(expr, *variables).monoms()}
        return degrees.pop() if len(degrees) == 1 else None
    t = sp.Dummy("t", positive=True)
    scaled = expr.xreplace({v: t * v for v in variables})
    ratio = sp.simplify(scaled / expr)
    if ratio.free_symbols - {t}:
        return None
    if ratio == 1:
        return 0
    power = sp.simplify(sp.log(ratio) / sp.log(t))
    return int(power) if power.is_integer else None


def homogeneity_degree(expr: sp.Basic | sp.MatrixBase, variables: Iterable[sp.Symbol]) -> int | None:
    r"""The degree ``k`` with :math:`f(t x) = t^k f(x)` for all ``t > 0``, or ``None`` if ``f`` is not homogeneous.

    For a matrix every non-zero entry must have the same degree. Polynomials are read off
    their monomials; other expressions are tested by substituting ``t·x``.
    """
    variables = list(variables)
    entries = list(expr) if isinstance(expr, sp.MatrixBase) else [expr]
    degrees = {_degree_of(e, variables) for e in entries if sp.expand(e) != 0}
    if len(degrees) != 1:
        return None
    return degrees.pop()


Moment = Callable[[sp.Symbol, int], sp.Expr]


def standard_moment(symbol: sp.Symbol, power: int) -> sp.Expr:
    r"""Moments of a standardised variable: :math:`E[x] = 0`, :math:`E[x^2] = 1`, and named symbols
    :math:`\mu_3(x), \mu_4(x), \dots` above — so a result that needs only the first two moments
    shows no :math:`\mu_k`, and one that needs more shows which."""
    if power == 0:
        return sp.Integer(1)
    if power == 1:
        return sp.Integer(0)
    if power == 2:
        return sp.Integer(1)
    return sp.Symbol(f"mu_{power}({symbol.name})")


def expectation(expr: sp.Expr, random_symbols: Sequence[sp.Symbol], moment: Moment = standard_moment) -> sp.Expr:
    r""":math:`E[\,\mathrm{expr}\,]` for a polynomial in **mutually independent** random symbols.

    Independence is what lets the expectation of a monomial factor into a product of moments,
    :math:`E[\prod_i x_i^{a_i}] = \prod_i E[x_i^{a_i}]`; nothing about the distribution is
    assumed beyond what ``moment(x, k)`` returns.
    """
    random_symbols = list(random_symbols)
    poly = sp.Poly(sp.expand(expr), *random_symbols)
    total = sp.Integer(0)
    for powers, coefficient in poly.terms():
        term = coefficient
        for symbol, power in zip(random_symbols, powers):
            term *= moment(symbol, power)
        total += term
    return sp.expand(total)


def variance(expr: sp.Expr, random_symbols: Sequence[sp.Symbol], moment: Moment = standard_moment) -> sp.Expr:
    r""":math:`\mathrm{Var}[X] = E[X^2] - E[X]^2` for a polynomial in independent random symbols."""
    mean = expectation(expr, random_symbols, moment)
    second = expectation(sp.expand(expr ** 2), random_symbols, moment)
    return sp.expand(second - mean ** 2)      # a polynomial: expansion is its canonical form


def softmax(logits: Sequence[sp.Expr]) -> sp.Matrix:
    r"""Symbolic softmax :math:`p_j = e^{z_j} / \sum_l e^{z_l}` as a column vector."""
    exps = [sp.exp(z) for z in logits]
    total = sp.Add(*exps)
    return sp.Matrix([e / total for e in exps])


def softmax_rows(scores: sp.MatrixBase, keep: Sequence[bool] | None = None) -> sp.Matrix:
    r"""Row-wise symbolic softmax :math:`\alpha_{ij} = e^{s_{ij}} / \sum_l e^{s_{il}}` of an ``n × m`` matrix.

    ``keep`` (length ``m``, optional) masks keys: a key with ``keep[j] = False`` gets weight 0
    in every row, as a padded key does.
    """
    if keep is not None and len(keep) != scores.cols:
        raise ValueError(f"keep has {len(keep)} entries, expected one per column of scores {scores.shape}")
    rows = []
    for i in range(scores.rows):
        exps = [sp.exp(scores[i, j]) if keep is None or keep[j] else sp.Integer(0) for j in range(scores.cols)]
        rows.append(sp.Matrix([exps]) / sp.Add(*exps))
    return sp.Matrix.vstack(*rows)


class LayerNormParts(NamedTuple):
    """A symbolic LayerNorm and the pieces it is made of."""

    output: sp.Matrix      # γ ⊙ (x − μ1)/√(σ² + ε) + β
    centred: sp.Matrix     # x − μ1
    variance: sp.Expr      # σ², the biased variance


def layer_norm(x: sp.MatrixBase, eps: sp.Expr | float = 0, gain: sp.MatrixBase | None = None,
               bias: sp.MatrixBase | None = None, factor_variance: bool = False) -> LayerNormParts:
    r"""Symbolic LayerNorm of one vector (row or column):
    :math:`\mathrm{LN}(x) = \gamma \odot (x - \mu\mathbf 1)/\sqrt{\sigma^2 + \varepsilon} + \beta`.

    ``factor_variance=True`` factors σ², which lets sympy take a positive scale out of the square
    root (:math:`\sqrt{\alpha^2 \sigma^2} = \alpha\sigma` for α > 0).
    """
    if 1 not in x.shape:
        raise ValueError(f"x must be a row or column vector, got shape {x.shape}")
    width = len(x)
    centred = x - (sp.Add(*x) / width) * sp.ones(*x.shape)          # x − μ1
    variance = sp.Add(*[e**2 for e in centred]) / width              # σ² (biased)
    if factor_variance:
        variance = sp.factor(variance)
    output = centred / sp.sqrt(variance + eps)                       # (x − μ1)/√(σ² + ε)
    if gain is not None:
        output = output.multiply_elementwise(gain)                   # γ ⊙ …
    if bias is not None:
        output = output + bias                                       # … + β
    return LayerNormParts(output, centred, variance)


def layer_norm_rows(rows: sp.MatrixBase, gain: sp.MatrixBase | None = None, bias: sp.MatrixBase | None = None,
                    eps: sp.Expr | float = 0) -> sp.Matrix:
    """:func:`layer_norm` applied to every row of an ``n × d`` matrix (the output only)."""
    return sp.Matrix.vstack(*[layer_norm(rows[i, :], eps, gain, bias).output for i in range(rows.rows)])
