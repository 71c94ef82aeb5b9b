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
        attnref.multi_head_attention(t(5, 6), weights)


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
    with pytest.raises(ValueError, match=r"key_mask has shape \(2, 4\), expected the key positions \(2, 5\)"):
        attnref.multi_head_attention(t(2, 5, 8), weights, key_mask=torch.ones(2, 4, dtype=torch.bool))


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


