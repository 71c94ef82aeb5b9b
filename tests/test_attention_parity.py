"""attnref's single-head attention against torch.nn.functional.scaled_dot_product_attention (float64)."""

from __future__ import annotations

import math

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
    assert (attnref.luong_general_scores(q, k, weight=w) - q @ w @ k.transpose(-2, -1)).abs().max() < PARITY_ATOL
    lin = attnref.linear_attention(q, k, v)
    assert (lin.output - q @ (k.transpose(-2, -1) @ v)).abs().max() < PARITY_ATOL


def test_additive_scores_definition(gen):
    s, h = randn(gen, 3, 4), randn(gen, 5, 6)
    w_s, w_h, v = randn(gen, 4, 8), randn(gen, 6, 8), randn(gen, 8)
    scores = attnref.additive_scores(s, h, w_query=w_s, w_key=w_h, v=v)
    by_loop = torch.tensor([[float(v @ torch.tanh(s[i] @ w_s + h[j] @ w_h)) for j in range(5)] for i in range(3)],
                           dtype=torch.float64)
    assert (scores - by_loop).abs().max() < PARITY_ATOL


def test_gat_and_gatv2_scores_definition(gen):
    nodes, w, a = randn(gen, 5, 3), randn(gen, 3, 4), randn(gen, 8)
    e = attnref.gat_scores(nodes, weight=w, a=a)
    z = nodes @ w
    loop = torch.tensor([[float(F.leaky_relu(a @ torch.cat([z[i], z[j]]), 0.2)) for j in range(5)] for i in range(5)],
                        dtype=torch.float64)
    assert (e - loop).abs().max() < PARITY_ATOL
    w2, a2 = randn(gen, 6, 4), randn(gen, 4)
    e2 = attnref.gatv2_scores(nodes, weight=w2, a=a2)
    loop2 = torch.tensor([[float(a2 @ F.leaky_relu(torch.cat([nodes[i], nodes[j]]) @ w2, 0.2)) for j in range(5)]
                          for i in range(5)], dtype=torch.float64)
    assert (e2 - loop2).abs().max() < PARITY_ATOL


# ------------------------------------------------------------------------------------------
# One API: the same masks, with the same meaning, in every attention; one result type
# ------------------------------------------------------------------------------------------

def masks(gen, batch=2, n=5, m=7):
    keep = torch.rand(batch, n, m, generator=gen) > 0.3
    keep[..., 0] = True
    key_mask = torch.ones(batch, m, dtype=torch.bool)
    key_mask[1, 5:] = False
    return keep, key_mask


def test_every_attention_returns_an_attention_result(gen):
    from attnref import sequence_layers as sl
    q, k, v = qkv(gen, m=5, d_v=4)
    weights = attnref.MultiHeadWeights.random(4, 2, generator=gen)
    layer = attnref.EncoderLayer.random(4, 2, 8, generator=gen)
    results = [attnref.scaled_dot_product_attention(q, k, v), attnref.cosine_attention(q, k, v),
               attnref.linear_attention(q, k, v), attnref.parameter_free_self_attention(q),
               attnref.attention_from_scores(q @ k.transpose(-2, -1), v), attnref.multi_head_attention(q, weights=weights),
               attnref.multi_head_attention_packed(q, weights=weights), attnref.encoder_layer(q, weights=layer),
               attnref.pre_ln_layer(q, weights=layer), attnref.post_ln_layer(q, weights=layer),
               attnref.pre_ln_layer(q, weights=layer, causal=True),
               attnref.stack_layers(q, weights=[layer, layer]),
               sl.token_mixing_linear(v, mixing=randn(gen, 3, 5))]
    assert all(isinstance(r, attnref.AttentionResult) for r in results)


def test_key_mask_and_causal_mean_the_same_as_the_mask_they_stand_for(gen):
    q, k, v = qkv(gen, n=7, m=7)
    keep, key_mask = masks(gen, n=7, m=7)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    full = keep & key_mask[:, None, :] & causal
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
    ours = attnref.scaled_dot_product_attention(q, k, v, mask=keep, key_mask=key_mask, causal=True)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_parameter_free_attention_with_masks_matches_torch(gen):
    x = randn(gen, 2, 5, 4) * 0.5
    keep, key_mask = masks(gen, n=5, m=5)
    full = keep & key_mask[:, None, :] & torch.ones(5, 5, dtype=torch.bool).tril()
    ours = attnref.parameter_free_self_attention(x, mask=keep, key_mask=key_mask, causal=True)
    expected = F.scaled_dot_product_attention(x, x, x, attn_mask=full, scale=1.0)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_cosine_attention_with_masks_matches_torch(gen):
    q, k, v = qkv(gen)
    keep, key_mask = masks(gen)
    beta = randn(gen, 2, 5, 1).abs() * 3
    ours = attnref.cosine_attention(q, k, v, beta=beta, mask=keep, key_mask=key_mask)
    expected = F.scaled_dot_product_attention(F.normalize(q, dim=-1) * beta, F.normalize(k, dim=-1), v,
                                              attn_mask=keep & key_mask[:, None, :], scale=1.0)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_linear_attention_with_masks_sums_the_kept_pairs_only(gen):
    q, k, v = qkv(gen)
    keep, key_mask = masks(gen)
    ours = attnref.linear_attention(q, k, v, mask=keep, key_mask=key_mask, causal=True)
    for b in range(2):
        for i in range(5):
            kept = [j for j in range(7) if keep[b, i, j] and key_mask[b, j] and j <= i]
            y = sum((float(q[b, i] @ k[b, j]) * v[b, j] for j in kept), torch.zeros(3, dtype=torch.float64))
            assert (ours.output[b, i] - y).abs().max() < PARITY_ATOL


def test_attention_from_scores_with_a_key_mask(gen):
    scores, v = randn(gen, 2, 5, 7), randn(gen, 2, 7, 3)
    _, key_mask = masks(gen)
    ours = attnref.attention_from_scores(scores, v, key_mask=key_mask)
    expected = torch.softmax(scores.masked_fill(~key_mask[:, None, :], float("-inf")), -1) @ v
    assert (ours.output - expected).abs().max() < PARITY_ATOL


# ------------------------------------------------------------------------------------------
# Unit tests against explicit loops
# ------------------------------------------------------------------------------------------

def test_luong_dot_scores_by_loop(gen):
    s, h = randn(gen, 2, 3, 4), randn(gen, 2, 5, 4)
    scores = attnref.luong_dot_scores(s, h)
    loop = torch.tensor([[[sum(float(s[b, i, a] * h[b, j, a]) for a in range(4)) for j in range(5)]
                          for i in range(3)] for b in range(2)], dtype=torch.float64)
    assert (scores - loop).abs().max() < PARITY_ATOL


def test_parameter_free_self_attention_by_loop(gen):
    x = randn(gen, 4, 3)
    result = attnref.parameter_free_self_attention(x)
    for i in range(4):
        logits = [float(x[i] @ x[j]) for j in range(4)]
        top = max(logits)
        exps = [math.exp(z - top) for z in logits]
        alpha = [e / sum(exps) for e in exps]
        y = sum(alpha[j] * x[j] for j in range(4))
        assert max(abs(result.weights[i, j].item() - alpha[j]) for j in range(4)) < PARITY_ATOL
        assert (result.output[i] - y).abs().max() < PARITY_ATOL


def test_fused_bilinear_by_loop(gen):
    weights = attnref.MultiHeadWeights.random(6, 2, generator=gen)
    for head in range(2):
        fused = weights.fused_bilinear(head)
        w_q, w_k = weights.w_q[head], weights.w_k[head]
        loop = torch.tensor([[sum(float(w_q[r, a] * w_k[c, a]) for a in range(3)) for c in range(6)]
                             for r in range(6)], dtype=torch.float64)
        assert (fused - loop).abs().max() < PARITY_ATOL
        x, y = randn(gen, 6), randn(gen, 6)   # the score of the head without biases: (x W_Q)·(y W_K)
        assert abs(float(x @ fused @ y) - float((x @ w_q) @ (y @ w_k))) < PARITY_ATOL


def test_row_norms_keep_the_plain_norm_bit_for_bit_where_it_is_accurate():
    # Only rows whose plain norm overflows or falls below sqrt(tiny / eps) are rescaled: a float32
    # row of norm about 1e-13 (squares still normal numbers) keeps x.norm() exactly.
    from attnref.attention import _row_norms
    g = torch.Generator().manual_seed(0)
    for dtype, scale in ((torch.float32, 1e-13), (torch.float64, 1e-140)):
        x = torch.randn(64, 32, generator=g, dtype=torch.float64).to(dtype) * scale
        assert torch.equal(_row_norms(x), x.norm(dim=-1, keepdim=True)), dtype
