"""Accuracy of attnref's float64 softmax, attention and LayerNorm against a 50-digit oracle.

The oracle is mpmath at 50 significant digits, evaluated on the *same* float64 inputs (each
float64 is an exact rational number), so the measured error is the error of attnref's
float64 computation alone, not of the input's rounding. Target: 1e-13, about 900 units of
float64 round-off (u = 2⁻⁵³ ≈ 1.1e-16). How the error is measured:

* softmax weights: per entry, |p̂ − p| / p for every weight p in float64's normal range
  (p ≥ 2.2e-308); a weight below it (underflowed or subnormal) must be within 2.2e-308 of p,
  and a weight of a ``-inf`` (masked) logit must be exactly 0. Every weight must be finite.
* attention outputs: per query row, normwise ‖ô_i − o_i‖₂ / ‖o_i‖₂ (a fully masked row must be
  exactly 0); the weights as for softmax.
* LayerNorm: per row, normwise ‖ŷ − y‖₂ / ‖y‖₂; for a row whose exact output is 0 (a constant
  row, no bias) the error is ‖ŷ‖₂ itself (the outputs of other rows have size ~1).

One limit is not attnref's: the scores Q Kᵀ are rounded in float64, with an absolute error up
to γ_{d_k} Σ_a |q_a k_a| / √d_k (γ_n = n u / (1 − n u)), and softmax turns an absolute error δ
of a logit into a relative error ≈ δ of the weights. So the 1e-13 target is checked on unit-
scale inputs and on inputs whose scores are exact in float64 (integers, d_k a power of 4 so
1/√d_k is a power of 2) — huge logits and ties included — and large inexact scores are checked
against that bound instead.

The worst error of each function is printed at the end of the run (tests/conftest.py).
"""

from __future__ import annotations

import math
import sys

import mpmath
import pytest
import torch

import attnref
from attnref import LayerNormParams

TARGET = 1e-13
U = 2.0**-53                       # unit round-off of float64
TINY = sys.float_info.min          # smallest normal float64, 2.2250738585072014e-308
NEG_INF = float("-inf")

# attnref.layer_norm shifts each row by one of its entries before taking the mean (exact by
# Sterbenz's lemma when the mean dominates the spread) and scales by max|x − μ| before squaring
# (no overflow for |x| > 1e154). The cases below once failed with the naive mean-then-subtract:
# if a regression brings one back, list it in KNOWN_LAYER_NORM_LOSS (strict xfail) and fix it.
LAYER_NORM_LOSS = pytest.mark.xfail(
    strict=True, reason="attnref.layer_norm: cancellation in x − mean(x) for large |mean|/std, "
                        "overflow of the variance for |x| > 1e154 (fix: shift by a row entry, scale)")


def mp(x: float) -> mpmath.mpf:
    return mpmath.mpf(x)           # exact: every float64 is a dyadic rational


def report(record_property, function: str, error: float, where: str) -> None:
    record_property("worst_relative_error", (function, error, where))


# ------------------------------------------------------------------------------------------
# Oracles (50 digits)
# ------------------------------------------------------------------------------------------

def oracle_softmax(row: list[float]) -> list[mpmath.mpf]:
    with mpmath.workdps(50):
        finite = [mp(z) for z in row if z != NEG_INF]
        if not finite:
            return [mpmath.mpf(0)] * len(row)        # a fully masked row: all-zero weights
        top = max(finite)
        exps = [mpmath.mpf(0) if z == NEG_INF else mpmath.exp(mp(z) - top) for z in row]
        total = mpmath.fsum(exps)
        return [e / total for e in exps]


def oracle_attention(q: list[list[float]], k: list[list[float]], v: list[list[float]],
                     keep: list[list[bool]] | None = None):
    with mpmath.workdps(50):
        d_k = len(q[0])
        scale = 1 / mpmath.sqrt(d_k)
        outputs, weights = [], []
        for i, q_i in enumerate(q):
            scores = [mpmath.fsum(mp(a) * mp(b) for a, b in zip(q_i, k_j)) * scale for k_j in k]
            if keep is not None:
                scores = [s if keep[i][j] else mpmath.mpf("-inf") for j, s in enumerate(scores)]
            finite = [s for s in scores if s != mpmath.mpf("-inf")]
            if not finite:
                p = [mpmath.mpf(0)] * len(scores)
            else:
                top = max(finite)
                exps = [mpmath.mpf(0) if s == mpmath.mpf("-inf") else mpmath.exp(s - top) for s in scores]
                total = mpmath.fsum(exps)
                p = [e / total for e in exps]
            weights.append(p)
            outputs.append([mpmath.fsum(p_j * mp(v_j[c]) for p_j, v_j in zip(p, v)) for c in range(len(v[0]))])
        return outputs, weights


def oracle_layer_norm(row: list[float], eps: float, gain=None, bias=None) -> list[mpmath.mpf]:
    with mpmath.workdps(50):
        x = [mp(value) for value in row]
        d = len(x)
        mean = mpmath.fsum(x) / d
        variance = mpmath.fsum((xi - mean) ** 2 for xi in x) / d
        denominator = mpmath.sqrt(variance + mp(eps))
        y = [(xi - mean) / denominator for xi in x]
        if gain is not None:
            y = [yi * mp(g) for yi, g in zip(y, gain)]
        if bias is not None:
            y = [yi + mp(b) for yi, b in zip(y, bias)]
        return y


# ------------------------------------------------------------------------------------------
# Error measures
# ------------------------------------------------------------------------------------------

def weight_errors(computed: list[float], exact: list[mpmath.mpf], logits: list[float] | None = None) -> float:
    """Worst per-entry relative error of weights in the normal range; checks the others."""
    worst = 0.0
    with mpmath.workdps(50):
        for j, (p_hat, p) in enumerate(zip(computed, exact)):
            assert math.isfinite(p_hat), f"weight {j} is {p_hat}"
            if logits is not None and logits[j] == NEG_INF:
                assert p_hat == 0.0, f"masked weight {j} is {p_hat}, not 0"
            elif p >= TINY:
                worst = max(worst, float(abs(mp(p_hat) - p) / p))
            else:
                assert abs(mp(p_hat) - p) <= TINY, f"underflowed weight {j}: {p_hat} vs {mpmath.nstr(p, 5)}"
    return worst


def normwise_error(computed: list[float], exact: list[mpmath.mpf]) -> float:
    """‖computed − exact‖₂ / ‖exact‖₂, or ‖computed‖₂ when the exact vector is 0 (its outputs
    would have size ~1 otherwise: LayerNorm of a constant row, a fully masked query)."""
    with mpmath.workdps(50):
        difference = mpmath.sqrt(mpmath.fsum((mp(a) - b) ** 2 for a, b in zip(computed, exact)))
        size = mpmath.sqrt(mpmath.fsum(b ** 2 for b in exact))
        return float(difference / size) if size != 0 else float(difference)


# ------------------------------------------------------------------------------------------
# softmax
# ------------------------------------------------------------------------------------------

def softmax_cases(gen) -> dict[str, torch.Tensor]:
    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    t = lambda rows: torch.tensor(rows, dtype=torch.float64)   # noqa: E731
    big = 1e300
    return {
        "unit-scale logits": randn(8, 16),
        "logits ×30": 30 * randn(8, 16),
        "logits ×300 (most weights tiny)": 300 * randn(8, 16),
        "logits ×700 (weights near underflow)": 700 * randn(8, 16),
        "logits ×1e300": big * randn(4, 8),
        "±1e300": t([[big, -big, 0.0], [-big, 0.0, big], [big, big, -big], [-big, -big, -big],
                     [big, big * (1 - 2**-52), big * (1 - 2**-50)], [1e308, -1e308, 0.0]]),
        "ties": t([[0.0] * 5, [3.25] * 5, [7.0, 7.0, 1.0, -2.0, 7.0], [-5.0, 2.0, 2.0, 2.0, -5.0]]),
        "offset 1e6": 1e6 + randn(4, 16),
        "offset 1e15": 1e15 + randn(4, 16),
        "offset −1e12": -1e12 + randn(4, 16),
        "underflow boundary": t([[0.0, -700.0, -708.0, -708.39, -709.0, -720.0, -740.5, -745.0, -746.0]]),
        "masked (−inf)": t([[0.0, NEG_INF, 1.0, NEG_INF], [NEG_INF, NEG_INF, NEG_INF, 2.0],
                            [NEG_INF] * 4, [big, NEG_INF, -big, 0.0]]),
        "one key": t([[-3.0], [big], [NEG_INF]]),
    }


def test_softmax_matches_the_oracle(gen, record_property):
    worst, where = 0.0, ""
    for name, logits in softmax_cases(gen).items():
        weights = attnref.softmax(logits)
        assert torch.isfinite(weights).all(), f"{name}: non-finite weights"
        for r in range(logits.shape[0]):
            row = logits[r].tolist()
            error = weight_errors(weights[r].tolist(), oracle_softmax(row), row)
            if error > worst:
                worst, where = error, f"{name}, row {r}"
    report(record_property, "softmax", worst, where)
    assert worst <= TARGET, f"softmax: relative error {worst:.2e} > {TARGET:g} ({where})"


def test_softmax_along_other_dimensions(gen, record_property):
    logits = 20 * torch.randn(3, 5, 4, generator=gen, dtype=torch.float64)
    worst = 0.0
    for dim in (0, 1, -1):
        weights = attnref.softmax(logits, dim=dim)
        moved_logits = logits.movedim(dim, -1).reshape(-1, logits.shape[dim])
        moved_weights = weights.movedim(dim, -1).reshape(-1, logits.shape[dim])
        for r in range(moved_logits.shape[0]):
            row = moved_logits[r].tolist()
            worst = max(worst, weight_errors(moved_weights[r].tolist(), oracle_softmax(row), row))
    report(record_property, "softmax", worst, "batched logits ×20 along dims 0, 1, −1")
    assert worst <= TARGET


@pytest.mark.parametrize("magnitude", [1.0, 1e100, 1e300])
def test_softmax_is_finite_for_huge_logits(gen, magnitude):
    logits = magnitude * torch.randn(64, 32, generator=gen, dtype=torch.float64)
    logits[0] = magnitude      # a row of ties
    logits[1, ::2] = -magnitude
    weights = attnref.softmax(logits)
    assert torch.isfinite(weights).all()
    assert ((weights >= 0) & (weights <= 1)).all()
    assert (weights.sum(-1) - 1).abs().max() <= 32 * U


# ------------------------------------------------------------------------------------------
# scaled dot-product attention
# ------------------------------------------------------------------------------------------

def check_attention(q, k, v, keep=None, causal=False):
    """(worst output error, worst weight error) of one (n, d_k), (m, d_k), (m, d_v) problem."""
    if causal:
        causal_keep = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril()
        keep = causal_keep if keep is None else keep & causal_keep
        result = attnref.scaled_dot_product_attention(q, k, v, causal=True,
                                                      mask=None if keep is causal_keep else keep)
    else:
        result = attnref.scaled_dot_product_attention(q, k, v, mask=keep)
    keep_rows = None if keep is None else keep.tolist()
    outputs, weights = oracle_attention(q.tolist(), k.tolist(), v.tolist(), keep_rows)
    worst_output = worst_weight = 0.0
    for i in range(q.shape[0]):
        assert torch.isfinite(result.output[i]).all()
        worst_output = max(worst_output, normwise_error(result.output[i].tolist(), outputs[i]))
        logits = None if keep is None else [0.0 if kept else NEG_INF for kept in keep_rows[i]]
        worst_weight = max(worst_weight, weight_errors(result.weights[i].tolist(), weights[i], logits))
    return worst_output, worst_weight


def attention_cases(gen) -> dict[str, tuple]:
    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    def integers(*shape, bound):
        return torch.randint(-bound, bound + 1, shape, generator=gen).to(torch.float64)

    keys = integers(7, 16, bound=2**16)
    tied_keys = keys[:1].expand(7, 16).clone()
    mask = torch.rand(6, 7, generator=gen) > 0.4
    mask[:, 0] = True
    mask[5] = False                       # a fully masked query
    return {
        **{f"unit scale, d_k = {d_k}": (randn(6, d_k), randn(7, d_k), randn(7, 3), None, False)
           for d_k in (1, 3, 4, 16, 64)},
        "boolean mask with a fully masked query": (randn(6, 16), randn(7, 16), randn(7, 3), mask, False),
        "causal": (randn(7, 16), randn(7, 16), randn(7, 3), None, True),
        "exact scores up to 2^37 (one-hot)": (integers(6, 16, bound=2**16), keys, randn(7, 3), None, False),
        "exact scores, all keys tied": (integers(6, 16, bound=2**16), tied_keys, randn(7, 3), None, False),
        "exact small-integer scores, near ties": (integers(6, 4, bound=3), integers(7, 4, bound=3), randn(7, 3), None, False),
        "values offset by 1e8": (randn(6, 16), randn(7, 16), 1e8 + randn(7, 3), None, False),
        "values of size 1e-300": (randn(6, 16), randn(7, 16), 1e-300 * randn(7, 3), None, False),
        "values of size 1e300": (randn(6, 16), randn(7, 16), 1e300 * randn(7, 3), None, False),
    }


def test_attention_matches_the_oracle(gen, record_property):
    worst = {"output": (0.0, ""), "weights": (0.0, "")}
    for name, (q, k, v, keep, causal) in attention_cases(gen).items():
        output_error, weight_error = check_attention(q, k, v, keep, causal)
        for part, error in (("output", output_error), ("weights", weight_error)):
            if error > worst[part][0]:
                worst[part] = (error, name)
    report(record_property, "scaled_dot_product_attention (output, normwise)", *worst["output"])
    report(record_property, "scaled_dot_product_attention (weights)", *worst["weights"])
    for part, (error, name) in worst.items():
        assert error <= TARGET, f"attention {part}: relative error {error:.2e} > {TARGET:g} ({name})"


@pytest.mark.parametrize("size", [10.0, 100.0])
def test_attention_with_large_inexact_scores_stays_within_the_matmul_bound(gen, size):
    """Large scores are rounded in float64 (as in every float64 attention): the weights' error
    must stay within what that rounding allows, 2·max_j |δs_j| + 1e-13 per row."""
    d_k = 16
    q = size * torch.randn(6, d_k, generator=gen, dtype=torch.float64)
    k = size * torch.randn(7, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(7, 3, generator=gen, dtype=torch.float64)
    result = attnref.scaled_dot_product_attention(q, k, v)
    _, weights = oracle_attention(q.tolist(), k.tolist(), v.tolist())
    gamma = d_k * U / (1 - d_k * U)
    for i in range(q.shape[0]):
        score_bound = gamma * ((q[i].abs() * k.abs()).sum(-1) / math.sqrt(d_k)).max().item()
        score_bound += 2 * U * (q[i] @ k.T).abs().max().item() / math.sqrt(d_k)   # the scaling's rounding
        error = weight_errors(result.weights[i].tolist(), weights[i])
        assert error <= 2 * score_bound + TARGET, f"row {i}: {error:.2e} > bound {2 * score_bound + TARGET:.2e}"


# ------------------------------------------------------------------------------------------
# LayerNorm
# ------------------------------------------------------------------------------------------

def layer_norm_case(gen, name: str) -> tuple[torch.Tensor, float, bool]:
    """(x, eps, affine) of a named case."""
    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    cases = {
        "unit scale, d = 8": lambda: (randn(6, 8), 1e-5, True),
        "unit scale, d = 384": lambda: (randn(2, 384), 1e-5, True),
        "d = 2": lambda: (randn(6, 2), 1e-5, False),
        "tiny scale 1e-100, eps = 0": lambda: (1e-100 * randn(6, 16), 0.0, False),
        "tiny scale 1e-150, eps = 1e-5": lambda: (1e-150 * randn(6, 16), 1e-5, False),
        "large scale 1e100": lambda: (1e100 * randn(6, 16), 1e-5, True),
        "constant rows (integer)": lambda: (torch.full((3, 16), 7.0, dtype=torch.float64), 1e-5, False),
        "offset 10": lambda: (10 + randn(6, 64), 1e-5, True),
        # Cases a naive LayerNorm (and torch's) misses:
        "offset 1e4": lambda: (1e4 + randn(6, 64), 1e-5, True),
        "offset 1e8": lambda: (1e8 + randn(6, 64), 1e-5, True),
        "tiny variance: 1 + 1e-10·z, eps = 0": lambda: (1 + 1e-10 * randn(6, 64), 0.0, False),
        "constant rows (1234.567)": lambda: (torch.full((3, 7), 1234.567, dtype=torch.float64), 1e-5, False),
        "huge scale 1e200 (σ² overflows)": lambda: (1e200 * randn(6, 16), 1e-5, False),
    }
    return cases[name]()


#: Cases attnref.layer_norm is known to miss (none today).
KNOWN_LAYER_NORM_LOSS: tuple[str, ...] = ()
LAYER_NORM_CASES = [
    pytest.param(name, marks=LAYER_NORM_LOSS) if name in KNOWN_LAYER_NORM_LOSS else name
    for name in ("unit scale, d = 8", "unit scale, d = 384", "d = 2", "tiny scale 1e-100, eps = 0",
                 "tiny scale 1e-150, eps = 1e-5", "large scale 1e100", "constant rows (integer)", "offset 10",
                 "offset 1e4", "offset 1e8", "tiny variance: 1 + 1e-10·z, eps = 0", "constant rows (1234.567)",
                 "huge scale 1e200 (σ² overflows)")
]


@pytest.mark.parametrize("case", LAYER_NORM_CASES)
def test_layer_norm_matches_the_oracle(gen, record_property, case):
    x, eps, affine = layer_norm_case(gen, case)
    d = x.shape[-1]
    gain = 1 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64) if affine else None
    bias = torch.randn(d, generator=gen, dtype=torch.float64) if affine else None
    y = attnref.layer_norm(x, LayerNormParams(gain=gain, bias=bias, eps=eps))
    gain_list = None if gain is None else gain.tolist()
    bias_list = None if bias is None else bias.tolist()
    worst = 0.0
    for r in range(x.shape[0]):
        exact = oracle_layer_norm(x[r].tolist(), eps, gain_list, bias_list)
        worst = max(worst, normwise_error(y[r].tolist(), exact))
    report(record_property, "layer_norm", worst, case)
    assert worst <= TARGET, f"layer_norm: relative error {worst:.2e} > {TARGET:g} ({case})"
