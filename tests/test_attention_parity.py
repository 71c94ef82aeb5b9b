"""attnref's single-head attention against torch.nn.functional.scaled_dot_product_attention (float64)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnref
from conftest import PARITY_ATOL, randn


def qkv(gen, batch=(2,), n=5, m=7, d_k=4, d_v=3):
    return randn(gen, *batch, n, d_k), randn(gen, *batch, m, d_k), randn(gen, *batch, m, d_v)


def test_sdpa_matches_torch_without_mask(gen):
    q, k, v = qkv(gen)
    ours = attnref.scaled_dot_product_attention(q, k, v)
    assert (ours.output - F.scaled_dot_product_attention(q, k, v)).abs().max() < PARITY_ATOL


def test_sdpa_weights_are_the_softmax_of_scaled_scores(gen):
    q, k, v = qkv(gen)
    ours = attnref.scaled_dot_product_attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    assert (ours.weights - expected).abs().max() < PARITY_ATOL


def test_sdpa_matches_torch_with_boolean_mask(gen):
    q, k, v = qkv(gen)
    mask = torch.rand(2, 5, 7, generator=gen) > 0.4
    mask[..., 0] = True   # every query keeps at least one key
    ours = attnref.scaled_dot_product_attention(q, k, v, mask=mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (ours.output - theirs).abs().max() < PARITY_ATOL
    assert (ours.weights[~mask] == 0).all()


def test_sdpa_matches_torch_with_additive_mask(gen):
    q, k, v = qkv(gen)
    additive = randn(gen, 5, 7)
    additive[1, 3] = float("-inf")
    ours = attnref.scaled_dot_product_attention(q, k, v, mask=additive)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    assert (ours.output - theirs).abs().max() < PARITY_ATOL


@pytest.mark.parametrize("n, m", [(6, 6), (4, 6), (6, 4)])
def test_sdpa_matches_torch_causal(gen, n, m):
    q, k, v = qkv(gen, n=n, m=m)
    ours = attnref.scaled_dot_product_attention(q, k, v, causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (ours.output - theirs).abs().max() < PARITY_ATOL
    assert (ours.weights.triu(diagonal=1) == 0).all()


def test_sdpa_custom_scale_matches_torch(gen):
    q, k, v = qkv(gen)
    ours = attnref.scaled_dot_product_attention(q, k, v, scale=0.3)
    theirs = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    assert (ours.output - theirs).abs().max() < PARITY_ATOL


def test_fully_masked_row_gives_zero_weights_and_output_like_torch(gen):
    q, k, v = qkv(gen)
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[2] = False
    ours = attnref.scaled_dot_product_attention(q, k, v, mask=mask)
    assert (ours.weights[:, 2] == 0).all() and (ours.output[:, 2] == 0).all()
    assert torch.allclose(ours.weights[:, [0, 1, 3, 4]].sum(-1), torch.ones(2, 4, dtype=torch.float64))
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (ours.output - theirs).abs().max() < PARITY_ATOL


def test_softmax_matches_torch_and_handles_huge_logits(gen):
    logits = randn(gen, 4, 9) * 50
    assert (attnref.softmax(logits) - torch.softmax(logits, -1)).abs().max() < PARITY_ATOL
    huge = torch.tensor([[1e300, -1e300, 0.0], [-1e300, -1e300, -1e300]], dtype=torch.float64)
    p = attnref.softmax(huge)
    assert torch.isfinite(p).all()
    assert p[0].tolist() == [1.0, 0.0, 0.0] and torch.allclose(p[1], torch.full((3,), 1 / 3, dtype=torch.float64))


def test_float32_is_computed_in_float32(gen):
    q, k, v = (t.float() for t in qkv(gen))
    out = attnref.scaled_dot_product_attention(q, k, v)
    assert out.output.dtype == torch.float32
    assert (out.output - F.scaled_dot_product_attention(q, k, v)).abs().max() < 1e-5


def test_cosine_attention_weights(gen):
    q, k, v = qkv(gen)
    result = attnref.cosine_attention(q, k, v, beta=3.0)
    cos = F.cosine_similarity(q[..., :, None, :], k[..., None, :, :], dim=-1)
    assert (result.weights - torch.softmax(3.0 * cos, -1)).abs().max() < PARITY_ATOL


def test_luong_general_and_linear_attention(gen):
    q, k, v = qkv(gen, d_k=4)
    w = randn(gen, 4, 4)
    assert (attnref.luong_general_scores(q, k, w) - q @ w @ k.transpose(-2, -1)).abs().max() < PARITY_ATOL
    lin = attnref.linear_attention(q, k, v)
    assert (lin.output - q @ (k.transpose(-2, -1) @ v)).abs().max() < PARITY_ATOL


def test_additive_scores_definition(gen):
    s, h = randn(gen, 3, 4), randn(gen, 5, 6)
    w_s, w_h, v = randn(gen, 4, 8), randn(gen, 6, 8), randn(gen, 8)
    scores = attnref.additive_scores(s, h, w_s, w_h, v)
    by_loop = torch.tensor([[float(v @ torch.tanh(s[i] @ w_s + h[j] @ w_h)) for j in range(5)] for i in range(3)],
                           dtype=torch.float64)
    assert (scores - by_loop).abs().max() < PARITY_ATOL


def test_gat_and_gatv2_scores_definition(gen):
    nodes, w, a = randn(gen, 5, 3), randn(gen, 3, 4), randn(gen, 8)
    e = attnref.gat_scores(nodes, w, a)
    z = nodes @ w
    loop = torch.tensor([[float(F.leaky_relu(a @ torch.cat([z[i], z[j]]), 0.2)) for j in range(5)] for i in range(5)],
                        dtype=torch.float64)
    assert (e - loop).abs().max() < PARITY_ATOL
    w2, a2 = randn(gen, 6, 4), randn(gen, 4)
    e2 = attnref.gatv2_scores(nodes, w2, a2)
    loop2 = torch.tensor([[float(a2 @ F.leaky_relu(torch.cat([nodes[i], nodes[j]]) @ w2, 0.2)) for j in range(5)]
                          for i in range(5)], dtype=torch.float64)
    assert (e2 - loop2).abs().max() < PARITY_ATOL
