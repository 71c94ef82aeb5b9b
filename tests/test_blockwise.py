"""The online-softmax attention (attnref/blockwise.py, claim F1) against independent oracles.

Each check is written as a function of the implementation, so that it runs on attnref's module
and on mutants — copies of ``attnref/blockwise.py`` with one plausible bug each — where it must
fail. The oracle is never the blockwise code itself: torch's SDPA (math path, float64) with an
explicitly built boolean mask, autograd through that one-matrix formula, and brute force over
the index pairs for the block plan.

Tolerances (float64, unit round-off u = 2^-53 ≈ 1.1e-16): the blockwise output and the
one-matrix output each carry a relative error of a few u times (d_k + number of blocks + a
few); 1e-12 leaves three orders of margin and is still ten orders below any of the bugs
(a missing rescale or a shifted block changes outputs by O(1)).
"""

from __future__ import annotations

import functools
import math
import itertools
import types
from pathlib import Path

import pytest
import torch

import attnref
from attnref import blockwise

SOURCE = Path(blockwise.__file__)
TOLERANCE = 1e-12


def mutant(original: str, replacement: str) -> types.ModuleType:
    """A copy of attnref/blockwise.py with one piece of source text replaced."""
    source = SOURCE.read_text(encoding="utf-8")
    assert source.count(original) == 1, (f"mutation site {original!r} found {source.count(original)} times in "
                                         "attnref/blockwise.py: update tests/test_blockwise.py to the current wording")
    module = types.ModuleType("attnref_blockwise_mutant")
    module.__file__ = str(SOURCE)
    exec(compile(source.replace(original, replacement), f"{SOURCE} (mutant)", "exec"), module.__dict__)
    return module


@functools.lru_cache(maxsize=None)
def _visibility(n: int, m: int, causal: bool, window: int | None) -> torch.Tensor:
    """(n, m) boolean, True where query i sees key j — built by brute force over the pairs."""
    keep = torch.ones(n, m, dtype=torch.bool)
    for i in range(n):
        for j in range(m):
            if (causal or window is not None) and j > i:
                keep[i, j] = False
            if window is not None and j <= i - window:
                keep[i, j] = False
    return keep


def visibility(n: int, m: int, causal: bool, window: int | None) -> torch.Tensor:
    return _visibility(n, m, causal, window).clone()


def oracle(q, k, v, scale, mask, causal, window):
    """torch's SDPA (float64 math path) with the combined boolean mask; rows with no visible key -> 0."""
    n, m = q.shape[-2], k.shape[-2]
    keep = visibility(n, m, causal, window)
    if mask is not None:
        keep = keep & mask
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)
    return torch.where(keep.any(dim=-1, keepdim=True), out, torch.zeros_like(out))


def matches_one_matrix(impl, seed: int = 0) -> float:
    """Worst |blockwise − oracle| over sizes, block widths that do and do not divide n and m,
    n ≠ m, causal, sliding windows, a key mask and broadcast batch axes (float64)."""
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    for n, m, block, causal, window in itertools.product((1, 9, 16), (1, 7, 16), (1, 3, 4, 16), (False, True),
                                                          (None, 1, 3)):
        q = torch.randn(2, 1, n, 5, generator=generator, dtype=torch.float64)
        k = torch.randn(1, 3, m, 5, generator=generator, dtype=torch.float64)
        v = torch.randn(2, 3, m, 4, generator=generator, dtype=torch.float64)
        for mask in (None, torch.rand(2, 1, 1, m, generator=generator) > 0.3):
            got = impl.blockwise_attention(q, k, v, scale=0.4, mask=mask, causal=causal, window=window, block=block)
            want = oracle(q, k, v, 0.4, mask, causal, window)
            worst = max(worst, float((got - want).abs().max()))
    return worst


def rising_scores_match(impl) -> float:
    """Keys whose scores rise from block to block, so the running maximum changes at every block
    (a missing rescale of the accumulator or of the running sum cannot hide)."""
    generator = torch.Generator().manual_seed(1)
    q = torch.randn(6, 4, generator=generator, dtype=torch.float64).abs()
    k = torch.arange(1, 25, dtype=torch.float64)[:, None] * torch.ones(1, 4, dtype=torch.float64) / 8   # rising
    v = torch.randn(24, 3, generator=generator, dtype=torch.float64)
    got = impl.blockwise_attention(q, k, v, scale=1.0, block=5)
    return float((got - oracle(q, k, v, 1.0, None, False, None)).abs().max())


def far_negative_scores_match(impl) -> float:
    """Every score near −1500: the softmax is well defined, but e^{score − 0} underflows to 0,
    so a running maximum that starts at 0 instead of −∞ gives a zero output."""
    generator = torch.Generator().manual_seed(2)
    direction = torch.randn(1, 8, generator=generator, dtype=torch.float64)
    q = 40 * direction / direction.norm() + 0.01 * torch.randn(5, 8, generator=generator, dtype=torch.float64)
    k = -40 * direction / direction.norm() + 0.01 * torch.randn(11, 8, generator=generator, dtype=torch.float64)
    v = torch.randn(11, 3, generator=generator, dtype=torch.float64)
    got = impl.blockwise_attention(q, k, v, scale=1.0, block=4)
    return float((got - oracle(q, k, v, 1.0, None, False, None)).abs().max())


def gradients_match(impl) -> float:
    """Worst |blockwise gradient − autograd through the one-matrix oracle| (float64)."""
    generator = torch.Generator().manual_seed(3)
    worst = 0.0
    for causal, window, block in ((False, None, 3), (True, None, 2), (True, 4, 3), (False, None, 64)):
        q, k = (torch.randn(2, 9, 4, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(2))
        v = torch.randn(2, 9, 3, generator=generator, dtype=torch.float64, requires_grad=True)
        mask = torch.rand(2, 9, 9, generator=generator) > 0.2
        weights = torch.randn(2, 9, 3, generator=generator, dtype=torch.float64)
        ours = torch.autograd.grad((impl.blockwise_attention(q, k, v, scale=0.5, mask=mask, causal=causal,
                                                             window=window, block=block) * weights).sum(), (q, k, v))
        theirs = torch.autograd.grad((oracle(q, k, v, 0.5, mask, causal, window) * weights).sum(), (q, k, v))
        worst = max(worst, *(float((a - b).abs().max()) for a, b in zip(ours, theirs)))
    return worst


CHECKS = {
    "matches the one-matrix oracle": matches_one_matrix,
    "rising scores": rising_scores_match,
    "far negative scores": far_negative_scores_match,
    "gradients": gradients_match,
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_blockwise_attention_passes_each_check(name):
    assert CHECKS[name](blockwise) < TOLERANCE


#: One plausible bug each, the text that makes it, and the check that must catch it.
MUTANTS = {
    "accumulator not rescaled by e^{m_old - m_new}": (
        "rows.mul_(rescale)                                                # α_i a_i",
        "rows.mul_(1.0)", "rising scores"),
    "running sum not rescaled": (
        "row_sum[:, r0:r1].mul_(rescale)", "row_sum[:, r0:r1].mul_(1.0)", "rising scores"),
    "running max starts at 0 instead of -inf": (
        'row_max = q.new_full((B, n, 1), float("-inf"))', "row_max = q.new_zeros(B, n, 1)", "far negative scores"),
    "divided by the running sum inside the loop (too early)": (
        "rows.baddbmm_(probabilities, v[:, k0:k1])  ",
        "rows.baddbmm_(probabilities, v[:, k0:k1]).div_(row_sum[:, r0:r1])  ", "rising scores"),
    "causal: key block skipped for its own first row (off by one)": (
        "return min(k0, n), n", "return min(k0 + 1, n), n", "matches the one-matrix oracle"),
    "window: last row that sees a key block off by one": (
        "min(n, k1 - 1 + window)", "min(n, k1 - 2 + window)", "matches the one-matrix oracle"),
    "diagonal tile: last masked row off by one": (
        "diagonal_end = min(r1, max(r0, k1 - 1))", "diagonal_end = min(r1, max(r0, k1 - 2))",
        "matches the one-matrix oracle"),
    "backward without the D_i = dy_i · y_i term": (
        "grad_p.sub_(delta[:, r0:r1])", "grad_p", "gradients"),
    "backward: key gradient without the scale": (
        "grad_k.mul_(scale)", "grad_k", "gradients"),
}


@pytest.mark.parametrize("bug", list(MUTANTS))
def test_each_plausible_bug_fails_its_check(bug):
    original, replacement, check = MUTANTS[bug]
    error = CHECKS[check](mutant(original, replacement))
    assert not error < TOLERANCE, f"{bug}: {check} still passes (error {error:.2e})"   # NaN fails too


# ------------------------------------------------------------------------------------------
# The block plan: skipped tiles are fully hidden, computed ones are not; about half under causal
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,m,block,causal,window", [(16, 16, 4, True, None), (17, 13, 5, True, None),
                                                     (20, 20, 3, False, 4), (9, 30, 4, True, None),
                                                     (12, 12, 12, True, None), (10, 10, 3, False, None)])
def test_plan_skips_exactly_the_hidden_key_rows(n, m, block, causal, window):
    keep = visibility(n, m, causal, window)
    plan = blockwise.plan(n, m, block, causal, window)
    computed = {k0: (r0, r1) for k0, _, r0, r1 in plan.steps}
    for k0 in range(0, m, block):
        seen_by = keep[:, k0:k0 + block].any(dim=1).nonzero().flatten().tolist()   # rows that see the block
        if not seen_by:
            assert k0 not in computed
        else:
            assert computed[k0] == (seen_by[0], seen_by[-1] + 1)


def test_causal_plan_computes_about_half_the_tiles():
    """T = n / block tiles per side: the causal plan touches T(T + 1)/2 of the T² tiles."""
    for tiles in (1, 2, 8, 32):
        plan = blockwise.plan(64 * tiles, 64 * tiles, 64, causal=True)
        assert (plan.tiles_computed, plan.tiles_total) == (tiles * (tiles + 1) // 2, tiles * tiles)


# ------------------------------------------------------------------------------------------
# Through SDPA: need_weights=False is the blockwise path, with the same answers
# ------------------------------------------------------------------------------------------

def test_sdpa_without_weights_runs_the_blockwise_path(monkeypatch):
    calls = []
    real = blockwise.blockwise_attention
    monkeypatch.setattr(blockwise, "blockwise_attention", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    q = torch.randn(3, 8, dtype=torch.float64)
    result = attnref.scaled_dot_product_attention(q, q, q, need_weights=False, causal=True)
    assert result.weights is None and len(calls) == 1 and calls[0]["causal"] is True
    attnref.scaled_dot_product_attention(q, q, q)
    assert len(calls) == 1                       # the default (weights returned) does not


@pytest.mark.parametrize("kwargs", [{}, {"causal": True}, {"window": 3}, {"key_mask": "random"},
                                    {"mask": "additive", "causal": True}, {"scale": 0.3}])
def test_sdpa_output_is_the_same_with_and_without_weights(kwargs):
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(2, 3, 40, 8, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 3, 33, 8, generator=generator, dtype=torch.float64)
    v = torch.randn(2, 3, 33, 6, generator=generator, dtype=torch.float64)
    if kwargs.get("key_mask") == "random":
        kwargs = {"key_mask": torch.rand(2, 3, 33, generator=generator) > 0.3}
    if kwargs.get("mask") == "additive":
        kwargs = {"mask": torch.randn(40, 33, generator=generator, dtype=torch.float64), "causal": True}
    full = attnref.scaled_dot_product_attention(q, k, v, **kwargs)
    lean = attnref.scaled_dot_product_attention(q, k, v, need_weights=False, **kwargs)
    assert lean.weights is None
    assert float((full.output - lean.output).abs().max()) < TOLERANCE


def test_window_is_sliding_window_causal_attention():
    """window = w: query i sees keys i − w < j ≤ i, in both paths, against torch with that mask."""
    generator = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(30, 8, generator=generator, dtype=torch.float64) for _ in range(3))
    for w in (1, 4, 29, 100):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visibility(30, 30, True, w))
        for need_weights in (True, False):
            got = attnref.scaled_dot_product_attention(q, k, v, window=w, need_weights=need_weights).output
            assert float((got - want).abs().max()) < TOLERANCE
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="window"):
            attnref.scaled_dot_product_attention(q, k, v, window=bad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_accumulates_in_float32(dtype):
    """float16/bfloat16: the blockwise path computes in float32 and rounds once, so it returns the
    same output as the one-matrix path up to that rounding (here: at most one unit in the last place
    of the half-precision result, relative to the float64 answer)."""
    generator = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 300, 16, generator=generator).to(dtype) for _ in range(3))
    exact = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    lean = attnref.scaled_dot_product_attention(q, k, v, causal=True, need_weights=False).output
    assert lean.dtype == dtype
    ulp = torch.finfo(dtype).eps * exact.abs().clamp_min(2.0 ** -6)
    assert bool(((lean.double() - exact).abs() <= ulp).all())


def test_sdpa_gradients_without_weights_pass_gradcheck():
    generator = torch.Generator().manual_seed(7)
    q = torch.randn(2, 4, 3, generator=generator, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 5, 3, generator=generator, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 5, 2, generator=generator, dtype=torch.float64, requires_grad=True)

    def attend(q, k, v):
        return attnref.scaled_dot_product_attention(q, k, v, causal=True, need_weights=False).output

    assert torch.autograd.gradcheck(attend, (q, k, v))
    assert torch.autograd.gradgradcheck(attend, (q, k, v))


def test_fully_masked_rows_give_zero_output_and_gradient():
    q, k, v = (torch.randn(4, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    key_mask = torch.tensor([False, False, False, False])
    out = attnref.scaled_dot_product_attention(q, k, v, key_mask=key_mask, need_weights=False).output
    assert bool((out == 0).all())
    out.sum().backward()
    assert all(bool((t.grad == 0).all()) for t in (q, k, v))


def test_overflowing_scores_are_refused_in_the_blockwise_path_too():
    big = torch.full((4, 4), 1e200, dtype=torch.float64)
    with pytest.raises(ValueError, match="overflow"):
        attnref.scaled_dot_product_attention(big, big, big[:, :2], need_weights=False)


# ------------------------------------------------------------------------------------------
# F1's round-off bound, term by term (issue 44 item 4): each error source, injected alone into a
# float64 run of the recurrence, moves the output by no more than its own term of the bound
# ------------------------------------------------------------------------------------------

U32 = 2.0 ** -24                       # float32's unit round-off


def _recurrence(scores, v, block, alpha_error=None):
    """Eq. (f1-recurrence) in float64 for scores (n, m) and values (m, d_v); ``alpha_error[t]``
    multiplies the rescale factor α of block t by (1 + alpha_error[t]) — a rounding error put in by hand."""
    n, m = scores.shape
    row_max = torch.full((n, 1), -math.inf, dtype=torch.float64)
    row_sum = torch.zeros(n, 1, dtype=torch.float64)
    acc = torch.zeros(n, v.shape[1], dtype=torch.float64)
    for t, k0 in enumerate(range(0, m, block)):
        tile = scores[:, k0:k0 + block]
        new_max = torch.maximum(row_max, tile.amax(-1, keepdim=True))
        alpha = torch.exp(row_max - new_max)
        if alpha_error is not None:
            alpha = alpha * (1 + alpha_error[t])
        p = torch.exp(tile - new_max)
        row_sum = alpha * row_sum + p.sum(-1, keepdim=True)
        acc = alpha * acc + p @ v[k0:k0 + block]
        row_max = new_max
    return acc / row_sum


def _rising_case(seed=11, n=6, m=48, d_v=5):
    """Scores that rise from block to block (every α < 1 and matters) and values of both signs."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, m, generator=g, dtype=torch.float64) + torch.linspace(0, 6, m, dtype=torch.float64)
    v = torch.randn(m, d_v, generator=g, dtype=torch.float64)
    weights = torch.softmax(scores, -1)
    return scores, v, weights @ v.abs()                       # Σ_j w_ij |v_jc|: (n, d_v)


def test_the_rescale_factor_does_not_cancel():
    """Issue 44's case: α₂ perturbed by 1e-7 (less than one ulp of float32's exp, 2u = 1.19e-7) moves
    the output — the old proof said the rounded α "cancels" and its bound had no term for it — and
    the move is inside the bound's α term. fails_if: the α term is missing (0) or smaller than its
    effect (it multiplies only the blocks before t, so it is not common to every term of a and ℓ)."""
    scores, v, spread = _rising_case()
    block = 8
    T = math.ceil(scores.shape[1] / block)
    exact = _recurrence(scores, v, block)
    assert float((exact - torch.softmax(scores, -1) @ v).abs().max()) < 1e-13       # the emulation is right
    alpha_error = [0.0] * T
    alpha_error[1] = 1e-7                                                          # α₂ (the second block)
    moved = _recurrence(scores, v, block, alpha_error) - exact
    assert float(moved.abs().max()) > 1e-9, "α₂'s error cancelled after all"
    terms = blockwise.round_off_terms(4, 0.0, block, T, scale=0.125, exact_scores=True)
    assert bool((moved.abs() <= terms["alpha"] * U32 * spread).all())
    # every α rounded by a full ulp the same way (the worst for rising scores): still inside the term
    worst = _recurrence(scores, v, block, [2 * U32] * T) - exact
    assert bool((worst.abs() <= terms["alpha"] * U32 * spread).all())
    assert float((worst.abs() / (U32 * spread)).max()) > 0.5                        # of the order of u: not negligible


def test_the_scale_rounding_is_counted_unless_the_scale_is_a_power_of_two():
    """(q·k) · scale rounds once per score unless the scale is a power of two: the term is 2σ then and
    0 otherwise; an injected relative error of u on every score moves the output within it.
    fails_if: the scale term is missing for scale = 0.3 (or charged for 1/8, which is exact)."""
    scores, v, spread = _rising_case(seed=12)
    sigma = float(scores.abs().max())
    terms = blockwise.round_off_terms(8, sigma, 8, 6, scale=0.3)
    assert terms["scale"] == 2 * sigma and blockwise.round_off_terms(8, sigma, 8, 6, scale=0.125)["scale"] == 0
    g = torch.Generator().manual_seed(13)
    signs = torch.where(torch.rand(scores.shape, generator=g) < 0.5, -1.0, 1.0).double()
    moved = torch.softmax(scores * (1 + U32 * signs), -1) @ v - torch.softmax(scores, -1) @ v
    assert bool((moved.abs() <= terms["scale"] * U32 * spread).all())
    q = torch.randn(7, 8, generator=g)
    k = torch.randn(9, 8, generator=g)
    tile = blockwise.blockwise_attention(q, k, torch.eye(9), scale=0.125, block=4)    # weights, one scale power of 2
    exact = torch.softmax((q.double() @ k.double().T) * 0.125, -1)
    assert float((tile.double() - exact).abs().max()) < 1e-6


@pytest.mark.parametrize("scale", [0.3, 1 / math.sqrt(48), 0.125])
def test_blockwise_float32_within_the_bound_for_any_scale(scale):
    """float32 blockwise against float64 with the bound of round_off_coefficient, power-of-two scale or
    not. fails_if: the implementation or the bound is off by more than the bound's slack."""
    g = torch.Generator().manual_seed(14)
    q, k, v = torch.randn(16, 48, generator=g), torch.randn(200, 48, generator=g), torch.randn(200, 6, generator=g)
    block = 32
    T = math.ceil(200 / block)
    got = blockwise.blockwise_attention(q, k, v, scale=scale, block=block).double()
    weights = torch.softmax(scale * q.double() @ k.double().T, -1)
    exact = weights @ v.double()
    sigma = scale * float(q.double().norm(dim=-1).max() * k.double().norm(dim=-1).max())
    bound = blockwise.round_off_coefficient(48, sigma, block, T, scale=scale) * U32 * (weights @ v.double().abs())
    assert bool(((got - exact).abs() <= bound).all())


def test_the_single_tile_shortcut_gives_the_loop_s_numbers_bit_for_bit():
    """One block holding every key and row skips the loop's rescale of the empty start (issue 46
    item 7, per-call overhead): the same outputs and log-sum-exps, bit for bit, as the loop itself
    (a copy of the module without the shortcut). fails_if: the shortcut drops a mask, the fully
    masked rows' zero output, or rounds differently."""
    loop_only = mutant("if len(steps) == 1 and steps[0][2:] == (0, n):", "if False:")
    generator = torch.Generator().manual_seed(15)
    for dtype in (torch.float32, torch.float64):
        for n, m in ((16, 16), (7, 5), (3, 9)):
            q = torch.randn(2, n, 8, generator=generator, dtype=dtype)
            k = torch.randn(2, m, 8, generator=generator, dtype=dtype)
            v = torch.randn(2, m, 4, generator=generator, dtype=dtype)
            key_mask = torch.rand(2, 1, m, generator=generator) > 0.4
            key_mask[0] = False                                   # a batch element with every key masked
            for kwargs in ({}, {"causal": True}, {"mask": key_mask}, {"window": 2},
                           {"mask": torch.randn(n, m, generator=generator, dtype=dtype), "causal": True}):
                ours = blockwise.blockwise_attention(q, k, v, scale=0.3, return_log_sum_exp=True, **kwargs)
                loop = loop_only.blockwise_attention(q, k, v, scale=0.3, return_log_sum_exp=True, **kwargs)
                assert blockwise.plan(n, m, blockwise.default_block(2, n, m, 4), kwargs.get("causal", False),
                                      kwargs.get("window")).steps.__len__() == 1
                for a, b in zip(ours, loop):
                    assert torch.equal(a, b), (dtype, n, m, sorted(kwargs))
