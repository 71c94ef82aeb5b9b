"""attnref.sigmoid_attention (chapter 1, Q8) against oracles that do not share its code: an explicit
loop over queries and keys in Python floats (math.exp), torch's own sigmoid formula, torch's
gradcheck in float64; masks, the default bias −log m, bad input, half precision."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import attnref
from attnref.sigmoid import sigmoid_attention


def randn(gen, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=gen, dtype=dtype)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(38)


def loop_sigmoid_attention(q, k, v, bias=None, keep=None, scale=None):
    """y_i = Σ_j σ(q_i·k_j·scale + b) v_j, one query and one key at a time, in Python floats."""
    n, d_k = q.shape
    m, d_v = v.shape
    scale = 1 / math.sqrt(d_k) if scale is None else scale
    bias = -math.log(m) if bias is None else bias
    q, k, v = q.tolist(), k.tolist(), v.tolist()
    weights = [[0.0] * m for _ in range(n)]
    output = [[0.0] * d_v for _ in range(n)]
    for i in range(n):
        for j in range(m):
            if keep is not None and not keep[i][j]:
                continue                                   # a removed key: weight exactly 0
            z = sum(q[i][a] * k[j][a] for a in range(d_k)) * scale + bias
            w = 1 / (1 + math.exp(-z))
            weights[i][j] = w
            for c in range(d_v):
                output[i][c] += w * v[j][c]
    return torch.tensor(output, dtype=torch.float64), torch.tensor(weights, dtype=torch.float64)


@pytest.mark.parametrize("n, m, d_k, d_v", [(3, 5, 4, 2), (1, 1, 1, 1), (6, 17, 8, 3), (4, 2, 5, 7)])
def test_matches_an_explicit_loop_with_the_default_bias(gen, n, m, d_k, d_v):
    q, k, v = randn(gen, n, d_k), randn(gen, m, d_k), randn(gen, m, d_v)
    result = sigmoid_attention(q, k, v)
    output, weights = loop_sigmoid_attention(q, k, v)
    torch.testing.assert_close(result.output, output, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(result.weights, weights, rtol=1e-12, atol=1e-14)


def test_matches_the_loop_with_bias_scale_and_masks(gen):
    n, m, d_k, d_v = 5, 6, 4, 3
    q, k, v = randn(gen, n, d_k), randn(gen, m, d_k), randn(gen, m, d_v)
    key_mask = torch.tensor([True, True, False, True, True, False])
    keep = (key_mask[None, :] & torch.ones(n, m, dtype=torch.bool).tril()).tolist()
    result = sigmoid_attention(q, k, v, bias=0.7, scale=0.3, key_mask=key_mask, causal=True)
    output, weights = loop_sigmoid_attention(q, k, v, bias=0.7, keep=keep, scale=0.3)
    torch.testing.assert_close(result.output, output, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(result.weights, weights, rtol=1e-12, atol=1e-14)
    removed = ~torch.tensor(keep)
    assert bool((result.weights[removed] == 0).all())             # exactly 0, not merely small
    assert bool((result.weights[~removed] > 0).all())


def test_boolean_and_additive_masks_agree_and_remove_exactly(gen):
    q, k, v = randn(gen, 4, 3), randn(gen, 5, 3), randn(gen, 5, 2)
    keep = torch.rand(4, 5, generator=gen) < 0.6
    additive = torch.zeros(4, 5, dtype=torch.float64).masked_fill(~keep, float("-inf"))
    boolean = sigmoid_attention(q, k, v, mask=keep)
    added = sigmoid_attention(q, k, v, mask=additive)
    assert torch.equal(boolean.weights, added.weights)
    assert bool((boolean.weights[~keep] == 0).all())
    # a finite additive mask shifts the sigmoid's argument
    shift = sigmoid_attention(q, k, v, mask=torch.full((4, 5), 0.5, dtype=torch.float64))
    torch.testing.assert_close(shift.weights, sigmoid_attention(q, k, v, bias=-math.log(5) + 0.5).weights,
                               rtol=1e-14, atol=0)


def test_default_bias_is_minus_log_m_and_rows_do_not_sum_to_one(gen):
    q, k, v = randn(gen, 3, 4), randn(gen, 9, 4), randn(gen, 9, 2)
    result = sigmoid_attention(q, k, v)
    z = q @ k.T / 2                                               # scale 1/√d_k = 1/2
    # σ(z − log m) = e^z / (m + e^z): the identity the chapter derives
    torch.testing.assert_close(result.weights, z.exp() / (9 + z.exp()), rtol=1e-13, atol=0)
    torch.testing.assert_close(result.scores, z - math.log(9), rtol=1e-14, atol=1e-15)
    assert ((result.weights.sum(-1) - 1).abs() > 1e-3).all()
    torch.testing.assert_close(sigmoid_attention(q, k, v, bias=0.0).weights, torch.sigmoid(z), rtol=1e-14, atol=0)


def test_batched_inputs_broadcast_like_the_torch_formula(gen):
    q, k, v = randn(gen, 2, 3, 4, 5), randn(gen, 3, 6, 5), randn(gen, 3, 6, 2)
    result = sigmoid_attention(q, k, v, bias=-1.0)
    reference = torch.sigmoid(q @ k.transpose(-2, -1) / math.sqrt(5) - 1.0) @ v
    assert result.output.shape == (2, 3, 4, 2) and result.weights.shape == (2, 3, 4, 6)
    torch.testing.assert_close(result.output, reference, rtol=1e-13, atol=1e-14)


def test_gradcheck_float64_through_query_key_value_and_a_learned_bias(gen):
    q, k, v = (randn(gen, *s).requires_grad_() for s in ((3, 4), (5, 4), (5, 2)))
    bias = torch.tensor(-1.3, dtype=torch.float64, requires_grad=True)
    keep = torch.tensor([True, True, False, True, True])
    assert torch.autograd.gradcheck(
        lambda q_, k_, v_, b_: sigmoid_attention(q_, k_, v_, bias=b_, key_mask=keep).output, (q, k, v, bias))
    assert torch.autograd.gradgradcheck(lambda q_, k_, v_: sigmoid_attention(q_, k_, v_).output, (q, k, v))


def test_the_gradient_of_one_weight_reaches_only_its_own_score(gen):
    """Elementwise: ∂w_ij/∂z_il = 0 for l ≠ j (softmax couples the whole row)."""
    q, k, v = randn(gen, 1, 3), randn(gen, 4, 3), randn(gen, 4, 2)
    k = k.requires_grad_()
    weights = sigmoid_attention(q, k, v).weights[0]
    (grad,) = torch.autograd.grad(weights[1], k)
    assert bool((grad[[0, 2, 3]] == 0).all()) and bool((grad[1] != 0).any())


def test_empty_key_set_and_empty_queries(gen):
    q = randn(gen, 3, 4)
    result = sigmoid_attention(q, randn(gen, 0, 4), randn(gen, 0, 2))
    assert result.weights.shape == (3, 0) and torch.equal(result.output, torch.zeros(3, 2, dtype=torch.float64))
    empty = sigmoid_attention(randn(gen, 0, 4), randn(gen, 5, 4), randn(gen, 5, 2))
    assert empty.output.shape == (0, 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_lower_precision_is_computed_in_float32_and_rounded_once(gen, dtype):
    q, k, v = randn(gen, 4, 8), randn(gen, 6, 8), randn(gen, 6, 3)
    result = sigmoid_attention(q.to(dtype), k.to(dtype), v.to(dtype))
    assert result.output.dtype == dtype and result.weights.dtype == dtype
    q32, k32, v32 = (t.to(dtype).float() for t in (q, k, v))
    reference = torch.sigmoid(q32 @ k32.T / math.sqrt(8) - math.log(6)) @ v32
    eps = torch.finfo(dtype).eps                                   # within one rounding of the float32 result
    torch.testing.assert_close(result.output.float(), reference.to(dtype).float(), rtol=4 * eps,
                               atol=4 * eps * reference.abs().max().item())
    # and far closer than the computation in the low precision itself would be, for half formats
    if dtype != torch.float32:
        assert (result.output.float() - reference).abs().max() <= eps * reference.abs().max()


def test_call_shape_tensors_positional_rest_keyword_only():
    parameters = inspect.signature(sigmoid_attention).parameters
    positional = [p.name for p in parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == ["query", "key", "value"]
    options = ("bias", "mask", "key_mask", "causal", "scale", "need_weights")
    assert {name: parameters[name].default for name in options} == {
        "bias": None, "mask": None, "key_mask": None, "causal": False, "scale": None, "need_weights": True}
    assert all(parameters[name].kind == inspect.Parameter.KEYWORD_ONLY for name in options)


def test_need_weights_false_gives_the_same_output_and_no_weights(gen):
    q, k, v = randn(gen, 3, 4), randn(gen, 5, 4), randn(gen, 5, 2)
    full, lean = sigmoid_attention(q, k, v, causal=True), sigmoid_attention(q, k, v, causal=True, need_weights=False)
    assert lean.weights is None and torch.equal(lean.output, full.output)
    with pytest.raises(ValueError, match="need_weights"):
        sigmoid_attention(q, k, v, need_weights="no")
    assert attnref.sigmoid_attention is sigmoid_attention


def test_bad_input_names_the_argument_and_the_shapes(gen):
    q, k, v = randn(gen, 3, 4), randn(gen, 5, 4), randn(gen, 5, 2)
    with pytest.raises(ValueError, match=r"query and key must have the same width d_k.*\(3, 4\).*\(5, 3\)"):
        sigmoid_attention(q, randn(gen, 5, 3), v)
    with pytest.raises(ValueError, match=r"key and value must have the same length m.*\(5, 4\).*\(6, 2\)"):
        sigmoid_attention(q, k, randn(gen, 6, 2))
    with pytest.raises(ValueError, match="bias must be finite"):
        sigmoid_attention(q, k, v, bias=float("nan"))
    with pytest.raises(ValueError, match="bias must be a real number"):
        sigmoid_attention(q, k, v, bias="log")
    with pytest.raises(ValueError, match=r"bias must be a real number or a 0-dimensional floating tensor.*\(5,\)"):
        sigmoid_attention(q, k, v, bias=torch.zeros(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="scale must be finite"):
        sigmoid_attention(q, k, v, scale=float("inf"))
    with pytest.raises(ValueError, match="query"):
        sigmoid_attention(q.masked_fill(q > 0, float("nan")), k, v)
    with pytest.raises(ValueError, match="causal"):
        sigmoid_attention(q, k, v, causal=1)
    with pytest.raises(ValueError, match="mask"):
        sigmoid_attention(q, k, v, mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"width d_k = 0"):
        sigmoid_attention(randn(gen, 3, 0), randn(gen, 5, 0), v)
    with pytest.raises(ValueError, match=r"\+inf"):
        sigmoid_attention(q, k, v, mask=torch.full((3, 5), float("inf"), dtype=torch.float64))
    with pytest.raises(TypeError, match="takes 3 positional arguments but 4"):
        sigmoid_attention(q, k, v, None)
