"""No NaN from any attention path at extreme magnitudes (issue 44 item 3).

The blockwise path (``need_weights=False``) used to multiply the keys by the scale before its
overflow guard looked: q ~ 1e-5, k ~ 1e18, scale 1e21 in float32 have finite scores (≈ 1e34), but
``k · scale`` ≈ 1e39 overflows, and the output was ``[nan, nan]`` where the one-matrix path and
torch give numbers. The rule tested here, for every attnref attention path (one matrix and
blockwise, with and without masks, with a gradient wanted, and multi-head attention on top): an
output is either finite and a convex combination of the values (every entry within
``[min_j v_jc, max_j v_jc]``), or a ``ValueError`` naming the overflow — and that error only when
something the documented computation forms really overflows (the products ``q_i · k_j`` or the
scores ``(q_i · k_j) · scale``, judged from float64 with exponents kept apart).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import attnref
from attnref import blockwise

N, M, D = 3, 5, 4


def _inputs(dtype, exp_q, exp_k, seed):
    """q (N, D) ~ 10^exp_q, k (M, D) ~ 10^exp_k with random signs and mantissas in [1, 10), v ~ N(0, 1)."""
    g = torch.Generator().manual_seed(seed)

    def draw(rows, exponent):
        mantissa = torch.rand(rows, D, generator=g, dtype=torch.float64) * 9 + 1
        sign = torch.where(torch.rand(rows, D, generator=g) < 0.5, -1.0, 1.0).double()
        return sign * mantissa, exponent

    (q_m, eq), (k_m, ek) = draw(N, exp_q), draw(M, exp_k)
    q = (q_m * 10.0 ** eq).to(dtype)
    k = (k_m * 10.0 ** ek).to(dtype)
    v = torch.randn(M, 3, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


def _log10_largest(q, k, scale):
    """log10 of max |q_i · k_j| and of max |q_i · k_j · scale|, from float64 with the inputs' exponents
    taken out first (neither the products nor the scale can overflow here)."""
    sq = float(q.abs().amax().double()) or 1.0
    sk = float(k.abs().amax().double()) or 1.0
    products = (q.double() / sq) @ (k.double() / sk).T                # entries ≤ D in magnitude
    top = float(products.abs().amax())
    if top == 0:
        return -math.inf, -math.inf
    logged = math.log10(top) + math.log10(sq) + math.log10(sk)
    return logged, logged + math.log10(abs(scale))


def _paths(q, k, v, scale):
    """Every attnref attention path that takes a scale: name -> output (or the exception raised)."""
    key_mask = torch.tensor([True, False, True, True, True])
    additive = torch.zeros(N, M, dtype=q.dtype)
    additive[:, 1] = -1.0
    calls = {}
    for need_weights in (True, False):
        tag = "weights" if need_weights else "blockwise"
        calls[f"{tag}"] = lambda nw=need_weights: attnref.scaled_dot_product_attention(
            q, k, v, scale=scale, need_weights=nw).output
        calls[f"{tag}, causal"] = lambda nw=need_weights: attnref.scaled_dot_product_attention(
            q, k, v, scale=scale, causal=True, need_weights=nw).output
        calls[f"{tag}, key_mask"] = lambda nw=need_weights: attnref.scaled_dot_product_attention(
            q, k, v, scale=scale, key_mask=key_mask, need_weights=nw).output
        calls[f"{tag}, additive mask"] = lambda nw=need_weights: attnref.scaled_dot_product_attention(
            q, k, v, scale=scale, mask=additive, need_weights=nw).output
        calls[f"{tag}, window"] = lambda nw=need_weights: attnref.scaled_dot_product_attention(
            q, k, v, scale=scale, window=2, need_weights=nw).output

    def with_gradient():
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        out = attnref.scaled_dot_product_attention(*leaves, scale=scale, need_weights=False).output
        out.sum().backward()
        for leaf in leaves:          # a gradient may overflow (it is not promised); it must not be NaN
            assert not bool(torch.isnan(leaf.grad).any()), "NaN gradient"
        return out.detach()

    calls["blockwise, gradient"] = with_gradient
    results = {}
    for name, call in calls.items():
        try:
            results[name] = call()
        except ValueError as error:
            results[name] = error
    return results


def _assert_sound(q, k, v, scale):
    log_products, log_scores = _log10_largest(q, k, scale)
    limit = math.log10(torch.finfo(q.dtype).max)
    overflows = max(log_products, log_scores) > limit - 0.01          # what the one-matrix path forms
    low, high = v.double().amin(0), v.double().amax(0)
    for name, result in _paths(q, k, v, scale).items():
        if isinstance(result, ValueError):
            assert "overflow" in str(result), f"{name}: {result}"
            assert overflows, (f"{name} refused scores that do not overflow: log10 max |q·k| = {log_products:.2f}, "
                               f"log10 max |score| = {log_scores:.2f}, limit {limit:.2f}: {result}")
            continue
        assert bool(torch.isfinite(result).all()), f"{name}: non-finite output {result}"
        slack = 1e-5 * (high - low).abs().amax()
        inside = (result.double() >= low - slack) & (result.double() <= high + slack)
        assert bool(inside.all()), f"{name}: output {result} is not a convex combination of the values"


def test_the_reported_case_gives_the_one_matrix_answer_not_nan():
    """Issue 44's case: q ~ 1e-5, k ~ 1e18, scale 1e21 in float32 (scores ≈ 1e34, finite).
    fails_if: the blockwise path scales the keys before the guard (k · scale = 1e39 overflows: NaN)."""
    q = torch.tensor([[1e-5, 2e-5, -1e-5, 3e-5]])
    k = torch.tensor([[1e18, -1e18, 2e18, 1e18], [-2e18, 1e18, 1e18, -1e18], [1.5e18, 0.5e18, -1e18, 2e18]])
    v = torch.tensor([[1.5, -0.3], [0.2, -1.0], [1.3, -0.4]])
    full = attnref.scaled_dot_product_attention(q, k, v, scale=1e21).output
    lean = attnref.scaled_dot_product_attention(q, k, v, scale=1e21, need_weights=False).output
    torch_says = torch.nn.functional.scaled_dot_product_attention(q[None, None], k[None, None], v[None, None],
                                                                  scale=1e21)[0, 0]
    assert bool(torch.isfinite(torch_says).all())
    assert torch.equal(lean, full)
    assert torch.allclose(lean, torch_says)


def test_float64_tiny_queries_large_keys():
    """float64, q ~ 1e-300, k ~ 1e150, scale 1e300: the scores are about 1e150 (finite). fails_if: the
    guard's norms underflow to 0 (‖q‖² = 1e-600) and the keys are scaled first (1e450 = inf: NaN)."""
    q, k, v = _inputs(torch.float64, -300, 150, seed=0)
    _assert_sound(q, k, v, 1e300)
    lean = attnref.scaled_dot_product_attention(q, k, v, scale=1e300, need_weights=False).output
    assert torch.equal(lean, attnref.scaled_dot_product_attention(q, k, v, scale=1e300).output)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_overflowing_scores_still_raise(dtype):
    """The promise kept: scores that overflow raise ValueError, through the blockwise entry point too —
    both when the products overflow and when only the scale makes them."""
    e = int(math.log10(torch.finfo(dtype).max))
    for exp_q, exp_k, scale in ((e // 2 + 2, e // 2 + 2, 1.0), (e // 2 - 2, e // 2 - 2, 10.0 ** 8)):
        q, k, v = _inputs(dtype, exp_q, exp_k, seed=1)
        for need_weights in (True, False):
            with pytest.raises(ValueError, match="overflow"):
                attnref.scaled_dot_product_attention(q, k, v, scale=scale, need_weights=need_weights)


def test_the_guard_bounds_what_the_tiles_compute(monkeypatch):
    """Every tile the blockwise path forms is finite when the guard lets it run: the guard is checked
    against the tiles themselves (spied), over the magnitudes of the property test below."""
    seen = []
    real = blockwise._scores_tile

    def spy(*args, **kwargs):
        tile = real(*args, **kwargs)
        seen.append(bool(torch.isnan(tile).any() or torch.isposinf(tile).any()))
        return tile

    monkeypatch.setattr(blockwise, "_scores_tile", spy)
    for exp_q, exp_k, exp_s in ((-5, 18, 21), (10, 10, 17), (-20, 30, 27), (19, 19, -5)):
        q, k, v = _inputs(torch.float32, exp_q, exp_k, seed=2)
        try:
            attnref.scaled_dot_product_attention(q, k, v, scale=10.0 ** exp_s, need_weights=False)
        except ValueError:
            pass
    assert seen and not any(seen)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([torch.float32, torch.float64]),
       fractions=st.tuples(st.floats(-0.95, 0.95), st.floats(-0.95, 0.95), st.floats(-0.5, 1.1)),
       seed=st.integers(0, 2 ** 16))
@example(dtype=torch.float32, fractions=(-5 / 38.5, 18 / 38.5, 34 / 38.5), seed=0)       # issue 44's case
@example(dtype=torch.float64, fractions=(-300 / 308.3, 150 / 308.3, 150 / 308.3), seed=0)
def test_no_nan_from_any_attention_path_at_any_magnitude(dtype, fractions, seed):
    """Magnitudes of q and k spread over the dtype's exponent range (10^(f · e), e = log10 of the
    largest number) and the scale chosen so that the scores land anywhere from 10^(−e/2) to past
    the overflow line (10^(1.1 e)): the products, the scores and the scale's factors cross it in
    every combination. fails_if: a path forms an intermediate its guard does not bound (NaN), or
    refuses scores that do not overflow."""
    e = math.log10(torch.finfo(dtype).max)
    exp_q, exp_k, target = (round(f * e) for f in fractions)
    exp_s = target - exp_q - exp_k
    assume(abs(exp_s) <= 0.99 * e)                   # the scale itself a finite number of the dtype's range
    q, k, v = _inputs(dtype, exp_q, exp_k, seed)
    assume(bool(torch.isfinite(q).all()) and bool(torch.isfinite(k).all()) and (q != 0).any() and (k != 0).any())
    _assert_sound(q, k, v, 10.0 ** exp_s)


def test_multi_head_attention_without_weights_at_extreme_inputs():
    """Multi-head attention on top (per head and packed): the same rule at x ~ 1e15 in float32
    (the per-head scores ≈ 1e30 are finite; x W is ≈ 1e15)."""
    g = torch.Generator().manual_seed(3)
    w = attnref.MultiHeadWeights.random(8, 2, generator=g, dtype=torch.float32)
    x = torch.randn(2, 5, 8, generator=g) * 1e15
    for attend in (attnref.multi_head_attention, attnref.multi_head_attention_packed):
        full = attend(x, weights=w).output
        lean = attend(x, weights=w, need_weights=False).output
        assert bool(torch.isfinite(lean).all())
        assert torch.allclose(lean, full, rtol=1e-4, atol=1e-4 * float(full.abs().amax()))


def test_vmap_over_the_blockwise_path():
    """torch.func.vmap over need_weights=False: the value checks step aside inside vmap and the
    blockwise loop (in-place tiles) hands over to the one-matrix path. fails_if: a raw RuntimeError
    ("Batching rule not implemented for aten::bmm.out" or "data-dependent control flow")."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(3, 2, 6, 4, generator=g) for _ in range(3))

    def one(q, k, v):
        return attnref.scaled_dot_product_attention(q, k, v, causal=True, need_weights=False).output

    for checked in (True, False):
        with attnref.checks(checked):
            mapped = torch.func.vmap(one)(q, k, v)
        assert torch.allclose(mapped, one(q, k, v), atol=1e-6)
    assert attnref.checks is not None and attnref._validate.values_checked()   # switched back on outside
