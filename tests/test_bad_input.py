"""Bad input gets a ValueError that names the argument and the shapes — one test per case."""

from __future__ import annotations

import pytest
import torch

import attnref
from attnref import MultiHeadWeights


def t(*shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype)


def test_wrong_rank():
    with pytest.raises(ValueError, match=r"query must have at least 2 dimensions, got shape \(4,\)"):
        attnref.scaled_dot_product_attention(t(4), t(3, 4), t(3, 2))


def test_query_and_key_widths_differ():
    with pytest.raises(ValueError, match=r"d_k: query has shape \(2, 4\) and key has shape \(3, 5\)"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 5), t(3, 2))


def test_key_and_value_lengths_differ():
    with pytest.raises(ValueError, match=r"length m: key has shape \(3, 4\) and value has shape \(5, 2\)"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), t(5, 2))


def test_batch_dimensions_do_not_broadcast():
    with pytest.raises(ValueError, match=r"batch dimensions do not broadcast: query \(2, 3, 4\)"):
        attnref.scaled_dot_product_attention(t(2, 3, 4), t(5, 3, 4), t(5, 3, 2))


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ValueError, match="d_model = 10 is not divisible by the number of heads h = 3"):
        MultiHeadWeights.random(10, 3)
    with pytest.raises(ValueError, match="d_model = 10 is not divisible"):
        attnref.attention_parameter_count(10, 3)


def test_mha_input_width_differs_from_weights():
    weights = MultiHeadWeights.random(8, 2)
    with pytest.raises(ValueError, match=r"query has shape \(5, 6\) and w_q has shape \(2, 8, 4\)"):
        attnref.multi_head_attention(t(5, 6), weights=weights)


def test_mask_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"mask of shape \(3, 3\) does not broadcast to the scores' shape \(\.\.\., n, m\) = \(2, 3\)"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), t(3, 2), mask=torch.ones(3, 3, dtype=torch.bool))


def test_mask_of_the_wrong_dtype():
    with pytest.raises(ValueError, match=r"mask must be boolean .* got torch.int64 with shape \(2, 3\)"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), t(3, 2), mask=torch.ones(2, 3, dtype=torch.long))


def test_additive_mask_with_nan():
    mask = torch.zeros(2, 3, dtype=torch.float64)
    mask[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"additive mask of shape \(2, 3\) contains NaN or \+inf"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), t(3, 2), mask=mask)


def test_key_mask_of_the_wrong_shape():
    weights = MultiHeadWeights.random(8, 2)
    with pytest.raises(ValueError, match=r"key_mask has shape \(2, 4\), expected \(..., m\) with m = 5, the key "
                                         r"positions \(2, 5\)"):
        attnref.multi_head_attention(t(2, 5, 8), weights=weights, key_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_mask of shape \(3, 5\) does not broadcast to the scores' shape "
                                         r"\(..., n, m\) = \(2, 5, 5\)"):
        attnref.multi_head_attention(t(2, 5, 8), weights=weights, key_mask=torch.ones(3, 5, dtype=torch.bool))


def test_non_floating_dtype():
    with pytest.raises(ValueError, match=r"query must have a floating dtype .* got torch.int64 with shape \(2, 4\)"):
        attnref.scaled_dot_product_attention(t(2, 4, dtype=torch.long), t(3, 4), t(3, 2))


def test_mixed_dtypes():
    with pytest.raises(ValueError, match=r"inputs must share one dtype, got query: torch.float32 \(2, 4\)"):
        attnref.scaled_dot_product_attention(t(2, 4, dtype=torch.float32), t(3, 4), t(3, 2))


def test_nan_input():
    q = t(2, 4)
    q[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"query contains NaN \(shape \(2, 4\)\)"):
        attnref.scaled_dot_product_attention(q, t(3, 4), t(3, 2))


def test_inf_input():
    v = t(3, 2)
    v[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"value contains ±inf \(shape \(3, 2\)\)"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), v)


def test_softmax_rejects_positive_infinity():
    with pytest.raises(ValueError, match=r"logits contain \+inf \(shape \(3,\)\)"):
        attnref.softmax(torch.tensor([0.0, float("inf"), 1.0], dtype=torch.float64))


def test_fully_masked_query_row_returns_zeros_not_nan():
    """Documented policy: a query with no key to attend gets zero weights and a zero output."""
    mask = torch.tensor([[True, True, False], [False, False, False]])
    result = attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), t(3, 2), mask=mask)
    assert torch.equal(result.weights[1], torch.zeros(3, dtype=torch.float64))
    assert torch.equal(result.output[1], torch.zeros(2, dtype=torch.float64))


def test_zero_vector_in_cosine_scores():
    keys = t(3, 4)
    keys[2] = 0
    with pytest.raises(ValueError, match=r"key of shape \(3, 4\) has a zero row"):
        attnref.cosine_scores(t(2, 4), keys)


def test_layer_norm_gain_of_the_wrong_width():
    with pytest.raises(ValueError, match=r"gain has shape \(5,\), expected \(4,\) for x \(2, 4\)"):
        attnref.layer_norm(t(2, 4), attnref.LayerNormParams(gain=t(5)))


def test_multi_head_weights_with_inconsistent_shapes():
    with pytest.raises(ValueError, match=r"w_k has shape \(2, 8, 3\), expected \(2, ·, 4\)"):
        MultiHeadWeights(w_q=t(2, 8, 4), w_k=t(2, 8, 3), w_v=t(2, 8, 4), w_o=t(8, 8))


def test_not_a_tensor():
    with pytest.raises(ValueError, match="query must be a torch.Tensor, got list"):
        attnref.scaled_dot_product_attention([[1.0]], t(3, 4), t(3, 2))




# ------------------------------------------------------------------------------------------
# Empty sizes: a documented result (empty in, empty out) or a ValueError
# ------------------------------------------------------------------------------------------

def test_no_key_gives_zero_weights_and_a_zero_output():
    """m = 0: every query has nothing to attend, like a fully masked query (documented)."""
    result = attnref.scaled_dot_product_attention(t(2, 4), t(0, 4), t(0, 3))
    assert result.weights.shape == (2, 0) and torch.equal(result.output, torch.zeros(2, 3, dtype=torch.float64))
    assert attnref.softmax(t(2, 0)).shape == (2, 0)


def test_no_query_gives_empty_results():
    result = attnref.scaled_dot_product_attention(t(0, 4), t(3, 4), t(3, 2))
    assert result.output.shape == (0, 2) and result.weights.shape == (0, 3)
    mha = attnref.multi_head_attention(t(0, 8), weights=MultiHeadWeights.random(8, 2))
    assert mha.output.shape == (0, 8) and mha.weights.shape == (2, 0, 0)
    assert attnref.pre_ln_layer(t(0, 8), weights=attnref.EncoderLayer.random(8, 2, 16)).output.shape == (0, 8)


def test_layer_norm_of_zero_width():
    with pytest.raises(ValueError, match=r"x has shape \(2, 0\): LayerNorm over d = 0 entries is undefined"):
        attnref.layer_norm(t(2, 0))


def test_zero_key_width_without_a_scale():
    with pytest.raises(ValueError, match=r"query \(2, 0\) and key \(3, 0\) have width d_k = 0"):
        attnref.scaled_dot_product_attention(t(2, 0), t(3, 0), t(3, 2))
    # with an explicit scale the scores are the empty sum 0: uniform weights
    result = attnref.scaled_dot_product_attention(t(2, 0), t(3, 0), t(3, 2), scale=1.0)
    assert torch.allclose(result.weights, torch.full((2, 3), 1 / 3, dtype=torch.float64))


def test_layer_norm_without_eps_of_a_constant_row():
    with pytest.raises(ValueError, match=r"x of shape \(2, 4\) has a constant row: LayerNorm with eps = 0"):
        attnref.layer_norm(t(2, 4), attnref.LayerNormParams(eps=0.0))


# ------------------------------------------------------------------------------------------
# Arguments of the wrong kind
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("function", ["luong_dot_scores", "cosine_scores"])
def test_score_batch_dimensions_do_not_broadcast(function):
    with pytest.raises(ValueError, match=r"batch dimensions do not broadcast: query \(2, 3, 4\), key \(5, 3, 4\)"):
        getattr(attnref, function)(t(2, 3, 4), t(5, 3, 4))


def test_additive_and_general_score_batch_dimensions_do_not_broadcast():
    with pytest.raises(ValueError, match=r"batch dimensions do not broadcast: query \(2, 3, 4\), key \(5, 3, 4\)"):
        attnref.additive_scores(t(2, 3, 4), t(5, 3, 4), w_query=t(4, 2), w_key=t(4, 2), v=t(2))
    with pytest.raises(ValueError, match=r"batch dimensions do not broadcast: query \(2, 3, 4\), key \(5, 3, 4\)"):
        attnref.luong_general_scores(t(2, 3, 4), t(5, 3, 4), weight=t(4, 4))


def test_beta_of_one_value_per_key_is_rejected():
    """A (3,) beta with n = m = 3 would broadcast along the keys: one strength per key, silently."""
    with pytest.raises(ValueError, match=r"beta of shape \(3,\) must hold one value per query: shape \(\.\.\., n, 1\)"):
        attnref.cosine_attention(t(3, 4), t(3, 4), t(3, 2), beta=t(3))


@pytest.mark.parametrize("beta", ["2", float("nan"), True])
def test_beta_must_be_a_finite_real(beta):
    with pytest.raises(ValueError, match="beta must be"):
        attnref.cosine_attention(t(3, 4), t(3, 4), t(3, 2), beta=beta)


def test_scale_must_be_a_real_number():
    with pytest.raises(ValueError, match=r"scale must be a real number, got 'a' \(str\)"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), t(3, 2), scale="a")


def test_mask_on_another_device():
    mask = torch.ones(2, 3, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3\) is on meta, the inputs on cpu"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), t(3, 2), mask=mask)
    with pytest.raises(ValueError, match=r"key_mask of shape \(2, 3\) is on meta, key on cpu"):
        attnref.multi_head_attention(t(2, 3, 8), weights=MultiHeadWeights.random(8, 2), key_mask=mask)


def test_inputs_on_two_devices():
    with pytest.raises(ValueError, match=r"inputs must be on one device, got query: cpu \(2, 4\), key: meta"):
        attnref.scaled_dot_product_attention(t(2, 4), torch.ones(3, 4, dtype=torch.float64, device="meta"), t(3, 2))


@pytest.mark.parametrize("causal", ["no", 1, None])
def test_causal_must_be_a_bool(causal):
    with pytest.raises(ValueError, match="causal must be True or False"):
        attnref.scaled_dot_product_attention(t(2, 4), t(3, 4), t(3, 2), causal=causal)
    with pytest.raises(ValueError, match="causal must be True or False"):
        attnref.multi_head_attention(t(2, 8), weights=MultiHeadWeights.random(8, 2), causal=causal)


@pytest.mark.parametrize("eps, message", [(float("nan"), "eps must be finite, got nan"),
                                          (-1e-5, "eps must be ≥ 0"), ("1e-5", "eps must be a real number")])
def test_layer_norm_eps(eps, message):
    with pytest.raises(ValueError, match=message):
        attnref.LayerNormParams(eps=eps)


def test_ffn_bias_of_the_wrong_shape():
    """A (5, 8) b_2 would broadcast over a batch of 5 tokens silently."""
    with pytest.raises(ValueError, match=r"b_2 has shape \(5, 8\), expected \(8,\) for w_2 \(16, 8\)"):
        attnref.FeedForward(t(8, 16), t(16), t(16, 8), t(5, 8))
    with pytest.raises(ValueError, match=r"b_1 has shape \(8,\), expected \(16,\) for w_1 \(8, 16\)"):
        attnref.FeedForward(t(8, 16), t(8), t(16, 8), t(8))


def test_ffn_bias_of_the_wrong_dtype():
    with pytest.raises(ValueError, match=r"inputs must share one dtype, got w_2: torch.float64 \(16, 8\), "
                                         r"b_2: torch.float32 \(8,\)"):
        attnref.FeedForward(t(8, 16), t(16), t(16, 8), t(8, dtype=torch.float32))


def test_ffn_weights_of_two_dtypes():
    with pytest.raises(ValueError, match=r"inputs must share one dtype, got w_1: torch.float64 \(8, 16\), "
                                         r"w_2: torch.float32 \(16, 8\)"):
        attnref.FeedForward(t(8, 16), None, t(16, 8, dtype=torch.float32), None)


def test_ffn_input_of_another_dtype():
    ffn = attnref.FeedForward(t(8, 16), None, t(16, 8), None)
    with pytest.raises(ValueError, match=r"inputs must share one dtype, got x: torch.float32 \(3, 8\)"):
        attnref.feed_forward(t(3, 8, dtype=torch.float32), ffn)


def test_mha_errors_name_what_the_caller_passed():
    weights = MultiHeadWeights.random(8, 2)
    with pytest.raises(ValueError, match=r"batch dimensions do not broadcast: query \(2, 5, 8\), key \(3, 6, 8\)"):
        attnref.multi_head_attention(t(2, 5, 8), weights=weights, key=t(3, 6, 8))
    with pytest.raises(ValueError, match=r"mask of shape \(5, 4\) does not broadcast to the scores' shape "
                                         r"\(\.\.\., n, m\) = \(2, 5, 5\)"):
        attnref.multi_head_attention_packed(t(2, 5, 8), weights=weights, mask=torch.ones(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3, 5, 5\) does not broadcast to the per-head "
                                         r"scores' shape \(\.\.\., h, n, m\) = \(2, 2, 5, 5\)"):
        attnref.multi_head_attention(t(2, 5, 8), weights=weights, mask=torch.ones(2, 3, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="weights must be MultiHeadWeights, got Tensor"):
        attnref.multi_head_attention(t(2, 5, 8), weights=t(8, 8))


def test_linear_attention_takes_boolean_masks_only():
    with pytest.raises(ValueError, match=r"linear_attention takes boolean masks only .* shape \(2, 3\)"):
        attnref.linear_attention(t(2, 4), t(3, 4), t(3, 2), mask=t(2, 3))


def test_encoder_layer_of_inconsistent_widths():
    good = attnref.EncoderLayer.random(8, 2, 16)
    with pytest.raises(ValueError, match=r"the FFN input width must be the model width d: attention.w_o has shape "
                                         r"\(8, 8\) and ffn.w_1 has shape \(6, 16\)"):
        attnref.EncoderLayer(good.attention, good.norm_1, attnref.FeedForward(t(6, 16), None, t(16, 8), None),
                             good.norm_2)
    with pytest.raises(ValueError, match="norm_first must be True or False, got 'yes'"):
        attnref.EncoderLayer(good.attention, good.norm_1, good.ffn, good.norm_2, norm_first="yes")


def test_rms_norm_of_huge_entries_is_not_zero():
    """float32 entries 1e20: x² overflows to inf and the plain formula returns zeros; rms_norm rescales
    by the largest entry first, as layer_norm does. fails_if: the rescaled path is dropped."""
    from attnref import decoder
    x = torch.tensor([[1e20, -2e20, 3e20, 5e19], [1.0, 2.0, 3.0, 4.0]])
    exact = x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
    ours = decoder.rms_norm(x, eps=1e-6)
    assert torch.allclose(ours.double(), exact, rtol=1e-6)
    plain = torch.nn.RMSNorm(4, eps=1e-6, elementwise_affine=False)(x[1:])   # an ordinary row: bit for bit torch's
    assert torch.equal(ours[1:], plain)
    tiny = torch.tensor([[1e-30, -2e-30, 3e-30, 0.0]])                        # x² underflows: ε = 0 still normalises
    assert torch.allclose(decoder.rms_norm(tiny, eps=0.0).double(),
                          tiny.double() / tiny.double().pow(2).mean(-1, keepdim=True).sqrt(), rtol=1e-6)


def test_a_mask_of_h_entries_with_h_weight_draws_is_refused():
    """Batched weights (3 draws), an unbatched input, a (3, n, n) mask and h = 3: the mask's 3 could be
    the draws or the heads. The old code took it per head silently (output off by 2.88 from the
    per-draw reading); now it is refused, and both spellings give their own oracle.
    fails_if: the B == h refusal looks at the input's batch axes only."""
    from attnref.layers import stack_weights
    g = torch.Generator().manual_seed(0)
    draws = [MultiHeadWeights.random(6, 3, generator=g) for _ in range(3)]
    batched = stack_weights(draws)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(3, 4, 4, generator=g) > 0.4
    mask[..., 0] = True
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4, 4\) with the weights' batch axes \(3,\) is "
                                         r"ambiguous.*\(1, 3, 4, 4\).*\(3, 1, 4, 4\)"):
        attnref.multi_head_attention(x, weights=batched, mask=mask)
    per_draw = attnref.multi_head_attention(x, weights=batched, mask=mask[:, None]).output
    assert torch.allclose(per_draw, torch.stack([attnref.multi_head_attention(x, weights=w, mask=m).output
                                                 for w, m in zip(draws, mask)]), atol=1e-12)
    per_head = attnref.multi_head_attention(x, weights=batched, mask=mask[None]).output
    assert torch.allclose(per_head, torch.stack([attnref.multi_head_attention(x, weights=w, mask=mask).output
                                                 for w in draws]), atol=1e-12)


def test_float8_input_is_named():
    """fails_if: float8 reaches torch's matmul (a raw NotImplementedError)."""
    q = torch.ones(2, 4).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"query must have a floating dtype \(float16, bfloat16, float32 or float64\), "
                                         r"got torch.float8_e4m3fn with shape \(2, 4\) \(an 8-bit float"):
        attnref.scaled_dot_product_attention(q, q, q)
    with pytest.raises(ValueError, match="dtype must be a floating torch.dtype"):
        MultiHeadWeights.random(4, 2, dtype=torch.float8_e5m2)


def test_numpy_booleans_are_booleans():
    """causal=np.True_ (what numpy comparisons give) is accepted and means True; np.False_ False."""
    import numpy as np
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 4, generator=g, dtype=torch.float64)
    assert torch.equal(attnref.scaled_dot_product_attention(q, q, q, causal=np.True_).output,
                       attnref.scaled_dot_product_attention(q, q, q, causal=True).output)
    w = MultiHeadWeights.random(4, 2)
    assert torch.equal(attnref.multi_head_attention(q, weights=w, causal=np.bool_(1 > 0)).output,
                       attnref.multi_head_attention(q, weights=w, causal=True).output)
    assert torch.equal(attnref.multi_head_attention(q, weights=w, causal=np.False_).output,
                       attnref.multi_head_attention(q, weights=w).output)


def test_key_mask_broadcasts_as_mask_does():
    """A (m,) key_mask applies to every sequence, like a (1, m) mask. fails_if: key_mask must spell out
    every batch axis (the old refusal) or broadcasts over the wrong axis."""
    from attnref import decoder
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    keep = torch.tensor([True, False, True, True, False])
    w = MultiHeadWeights.random(8, 2, generator=g)
    for f in (attnref.multi_head_attention, attnref.multi_head_attention_packed):
        assert torch.equal(f(x, weights=w, key_mask=keep).output, f(x, weights=w, mask=keep[None, :]).output)
        assert torch.equal(f(x, weights=w, key_mask=keep).output, f(x, weights=w, key_mask=keep.expand(2, 5)).output)
    assert torch.equal(attnref.scaled_dot_product_attention(x, x, x, key_mask=keep).output,
                       attnref.scaled_dot_product_attention(x, x, x, mask=keep).output)
    config = decoder.DecoderConfig(d=8, h=2, h_kv=2, d_k=4)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    block = decoder.DecoderLayerWeights(attention_norm=r(8), w_q=r(8, 8), w_k=r(8, 8), w_v=r(8, 8), w_o=r(8, 8),
                                        ffn_norm=r(8), w_gate=r(8, 16), w_up=r(8, 16), w_down=r(16, 8))
    assert torch.equal(decoder.decoder_block(x, weights=block, config=config, key_mask=keep).output,
                       decoder.decoder_block(x, weights=block, config=config, key_mask=keep.expand(2, 5)).output)
