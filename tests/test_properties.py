"""Property tests over random shapes and values (hypothesis)."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

import attnref

dims = st.integers(min_value=1, max_value=6)
seeds = st.integers(min_value=0, max_value=2**31 - 1)
scales = st.floats(min_value=1e-3, max_value=30.0)


def draw(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


@given(n=dims, m=dims, d_k=dims, d_v=dims, seed=seeds, scale=scales)
def test_weights_are_positive_and_rows_sum_to_one(n, m, d_k, d_v, seed, scale):
    q, k, v = draw(seed, n, d_k, scale=scale), draw(seed + 1, m, d_k, scale=scale), draw(seed + 2, m, d_v)
    weights = attnref.scaled_dot_product_attention(q, k, v).weights
    assert (weights >= 0).all()
    assert torch.allclose(weights.sum(-1), torch.ones(n, dtype=torch.float64), atol=1e-12)


@given(length=dims, seed=seeds, shift=st.floats(min_value=-1e6, max_value=1e6), scale=scales)
def test_softmax_is_shift_invariant(length, seed, shift, scale):
    logits = draw(seed, 3, length, scale=scale)
    shifted = logits + shift
    # Exact in real arithmetic; in float64 the shifted logits themselves are rounded to the
    # spacing of |shift|, so the comparison allows that rounding and nothing more.
    rounding = 4 * torch.finfo(torch.float64).eps * abs(shift)
    assert torch.allclose(attnref.softmax(shifted), attnref.softmax(logits), atol=1e-12 + rounding, rtol=0)


@given(n=st.integers(min_value=2, max_value=6), d=st.sampled_from([4, 6, 8]), seed=seeds)
def test_self_attention_is_permutation_equivariant(n, d, seed):
    weights = attnref.MultiHeadWeights.random(d, 2, generator=torch.Generator().manual_seed(seed))
    x = draw(seed + 1, n, d)
    permutation = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 2))
    out = attnref.multi_head_attention(x, weights=weights).output
    out_permuted = attnref.multi_head_attention(x[permutation], weights=weights).output
    assert torch.allclose(out_permuted, out[permutation], atol=1e-12)


@given(n=dims, m=st.integers(min_value=1, max_value=8), seed=seeds, scale=scales)
def test_outputs_lie_in_the_convex_hull_of_the_values(n, m, seed, scale):
    """Each output is Σ_j α_ij v_j with α_ij ≥ 0, Σ_j α_ij = 1: inside the hull, hence inside the box."""
    q, k, v = draw(seed, n, 3, scale=scale), draw(seed + 1, m, 3, scale=scale), draw(seed + 2, m, 2)
    result = attnref.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(result.weights @ v, result.output, atol=1e-12)
    low, high = v.min(0).values, v.max(0).values
    assert ((result.output >= low - 1e-12) & (result.output <= high + 1e-12)).all()
    # and on every direction u: min_j u·v_j ≤ u·y_i ≤ max_j u·v_j
    directions = draw(seed + 3, 16, 2)
    projected_values = v @ directions.T            # (m, 16)
    projected_outputs = result.output @ directions.T   # (n, 16)
    assert (projected_outputs <= projected_values.max(0).values + 1e-12).all()
    assert (projected_outputs >= projected_values.min(0).values - 1e-12).all()


@given(n=dims, d=st.integers(min_value=2, max_value=6), seed=seeds, alpha=st.floats(min_value=0.01, max_value=100))
def test_layer_norm_without_affine_is_scale_invariant(n, d, seed, alpha):
    x = draw(seed, n, d)
    params = attnref.LayerNormParams(eps=0.0)
    assert torch.allclose(attnref.layer_norm(alpha * x, params), attnref.layer_norm(x, params), atol=1e-9)


@given(n=st.integers(min_value=1, max_value=5), m=st.integers(min_value=1, max_value=5), seed=seeds,
       per_head=st.booleans(), with_key_mask=st.booleans(), causal=st.booleans())
def test_per_head_and_packed_forms_agree_under_every_mask(n, m, seed, per_head, with_key_mask, causal):
    """Both multi-head forms slice a per-head mask (b, h, n, m), a shared mask, a key mask and the
    causal mask the same way (a head given another head's mask would differ)."""
    gen = torch.Generator().manual_seed(seed)
    weights = attnref.MultiHeadWeights.random(6, 3, generator=gen)
    x, memory = draw(seed, 2, n, 6), draw(seed + 1, 2, m, 6)
    shape = (2, 3, n, m) if per_head else (2, n, m)
    mask = torch.rand(*shape, generator=gen) > 0.5
    key_mask = torch.rand(2, m, generator=gen) > 0.3 if with_key_mask else None
    a = attnref.multi_head_attention(x, weights=weights, key=memory, mask=mask, key_mask=key_mask, causal=causal)
    b = attnref.multi_head_attention_packed(x, weights=weights, key=memory, mask=mask, key_mask=key_mask, causal=causal)
    assert torch.allclose(a.output, b.output, atol=1e-12) and torch.allclose(a.weights, b.weights, atol=1e-12)
    if per_head:   # a removed pair has weight 0 in its own head
        assert (a.weights[~mask] == 0).all()


@given(n=dims, d=st.integers(min_value=1, max_value=6), seed=seeds, constant_rows=st.integers(min_value=0, max_value=2))
def test_layer_norm_gradients_are_finite(n, d, seed, constant_rows):
    """Constant rows (zero padding among them) included: LayerNorm's gradient is finite everywhere."""
    x = torch.cat([draw(seed, n, d), torch.full((constant_rows, d), float(seed % 3), dtype=torch.float64)])
    x.requires_grad_()
    params = attnref.LayerNormParams(eps=1e-5)
    (attnref.layer_norm(x, params) * draw(seed + 1, n + constant_rows, d)).sum().backward()
    assert torch.isfinite(x.grad).all()
