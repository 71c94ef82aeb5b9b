"""Gradients of every mechanism: finite differences (gradcheck) and torch's modules (float64).

* ``torch.autograd.gradcheck`` compares each function's autograd Jacobian with central finite
  differences, with respect to the inputs and the weights, on small sizes;
* the gradients of a loss through attnref and through torch's ``LayerNorm``,
  ``MultiheadAttention`` and ``TransformerEncoderLayer`` (both norm placements) agree, for the
  input and for every weight. torch's weight gradients are brought into attnref's layout by
  the same ``from_torch`` conversion as the weights (a transpose, a split and a reshape: linear
  maps, so they carry gradients as they carry weights).

A constant row — a zero-padding token — once gave LayerNorm NaN gradients (the derivative of
√ at 0); the layers are checked with such a row in the batch.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import fields

import pytest
import torch
from torch.autograd import gradcheck

import attnref
from attnref import sequence_layers as sl
from attnref.layers import named_tensors
from conftest import randn

GRAD_ATOL = 1e-10


def leaf(gen, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return (randn(gen, *shape) * scale).requires_grad_()


def check(function, *inputs: torch.Tensor) -> None:
    assert gradcheck(function, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


# ------------------------------------------------------------------------------------------
# gradcheck: every mechanism, inputs and weights
# ------------------------------------------------------------------------------------------

def test_gradcheck_softmax_with_a_masked_entry(gen):
    logits = leaf(gen, 3, 5)
    mask = torch.zeros(3, 5, dtype=torch.float64)
    mask[1, 2] = float("-inf")
    check(lambda z: attnref.softmax(z + mask), logits)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_scaled_dot_product_attention(gen, causal):
    q, k, v = leaf(gen, 2, 3, 4), leaf(gen, 2, 5, 4), leaf(gen, 2, 5, 3)
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    check(lambda q, k, v: attnref.scaled_dot_product_attention(q, k, v, causal=causal, key_mask=key_mask).output,
          q, k, v)


def test_gradcheck_score_functions(gen):
    q, k = leaf(gen, 3, 4), leaf(gen, 5, 4)
    w, w_q, w_k, v = leaf(gen, 4, 4), leaf(gen, 4, 6), leaf(gen, 4, 6), leaf(gen, 6)
    check(attnref.luong_dot_scores, q, k)
    check(lambda q, k, w: attnref.luong_general_scores(q, k, weight=w), q, k, w)
    check(lambda q, k, w_q, w_k, v: attnref.additive_scores(q, k, w_query=w_q, w_key=w_k, v=v), q, k, w_q, w_k, v)
    check(attnref.cosine_scores, q, k)


def test_gradcheck_cosine_attention_with_a_strength_per_query(gen):
    q, k, v, beta = leaf(gen, 3, 4), leaf(gen, 5, 4), leaf(gen, 5, 2), leaf(gen, 3, 1)
    check(lambda q, k, v, beta: attnref.cosine_attention(q, k, v, beta=beta).output, q, k, v, beta)


def test_gradcheck_parameter_free_and_linear_attention(gen):
    x = leaf(gen, 4, 3, scale=0.5)
    check(lambda x: attnref.parameter_free_self_attention(x, causal=True).output, x)
    q, k, v = leaf(gen, 3, 4), leaf(gen, 5, 4), leaf(gen, 5, 2)
    check(lambda q, k, v: attnref.linear_attention(q, k, v).output, q, k, v)


def test_gradcheck_gat_and_gatv2(gen):
    nodes, w, a = leaf(gen, 4, 3), leaf(gen, 3, 2), leaf(gen, 4)
    check(lambda nodes, w, a: attnref.gat_scores(nodes, weight=w, a=a), nodes, w, a)
    w2, a2 = leaf(gen, 6, 2), leaf(gen, 2)
    check(lambda nodes, w, a: attnref.gatv2_scores(nodes, weight=w, a=a), nodes, w2, a2)


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
def test_gradcheck_multi_head_attention_inputs_and_weights(gen, form):
    base = attnref.MultiHeadWeights.random(4, 2, generator=gen)
    x = leaf(gen, 3, 4)
    tensors = [getattr(base, f.name).clone().requires_grad_() for f in fields(base)]

    def run(x, *weights):
        return form(x, weights=attnref.MultiHeadWeights(*weights), causal=True).output

    check(run, x, *tensors)


@pytest.mark.parametrize("constant_row", [False, True])
def test_gradcheck_layer_norm(gen, constant_row):
    x = leaf(gen, 3, 5)
    if constant_row:
        x = torch.cat([x.detach(), torch.full((1, 5), 2.5, dtype=torch.float64)]).requires_grad_()
    gain, bias = leaf(gen, 5), leaf(gen, 5)
    check(lambda x, g, b: attnref.layer_norm(x, attnref.LayerNormParams(gain=g, bias=b, eps=1e-3)), x, gain, bias)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_gradcheck_feed_forward(gen, activation):
    x, w_1, b_1, w_2, b_2 = leaf(gen, 3, 4), leaf(gen, 4, 6), leaf(gen, 6), leaf(gen, 6, 4), leaf(gen, 4)
    check(lambda x, w_1, b_1, w_2, b_2: attnref.feed_forward(x, attnref.FeedForward(w_1, b_1, w_2, b_2, activation)),
          x, w_1, b_1, w_2, b_2)


def test_gradcheck_sequence_layers(gen):
    x, w, b = leaf(gen, 5, 3), leaf(gen, 3, 2), leaf(gen, 2)
    check(sl.position_wise_linear, x, w, b)
    check(sl.sliding_window_linear, x, leaf(gen, 2, 3, 2), b)
    check(lambda v, m: sl.token_mixing_linear(v, mixing=m).output, x, leaf(gen, 4, 5))


@pytest.mark.parametrize("run", [attnref.post_ln_layer, attnref.pre_ln_layer,
                                 functools.partial(attnref.pre_ln_layer, causal=True)],
                         ids=["post-LN", "pre-LN", "causal pre-LN"])
def test_gradcheck_layers_with_a_zero_padding_row(gen, run):
    layer = attnref.EncoderLayer.random(4, 2, 6, generator=gen)
    x = torch.cat([randn(gen, 3, 4), torch.zeros(1, 4, dtype=torch.float64)]).requires_grad_()
    key_mask = torch.tensor([True, True, True, False])
    check(lambda x: run(x, weights=layer, key_mask=key_mask).output, x)


# ------------------------------------------------------------------------------------------
# Against torch's modules: the same loss, the same gradients
# ------------------------------------------------------------------------------------------

def randomise(module: torch.nn.Module, gen, scale: float = 0.3) -> torch.nn.Module:
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            gain = name.startswith("norm") and name.endswith("weight") or name == "weight"
            parameter.copy_(randn(gen, *parameter.shape) * scale + (1.0 if gain else 0.0))
    return module


def grads_of(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` whose parameters are the gradients of ``module``'s."""
    holder = copy.deepcopy(module)
    with torch.no_grad():
        for into, source in zip(holder.parameters(), module.parameters()):
            into.copy_(source.grad)
    return holder


def assert_same_gradients(ours, theirs, x_ours: torch.Tensor, x_theirs: torch.Tensor) -> None:
    assert torch.isfinite(x_ours.grad).all()
    assert (x_ours.grad - x_theirs.grad).abs().max() < GRAD_ATOL
    expected = named_tensors(theirs)
    for name, tensor in named_tensors(ours).items():
        assert torch.isfinite(tensor.grad).all(), name
        assert (tensor.grad - expected[name]).abs().max() < GRAD_ATOL, name


def requiring_grad(weights):
    for tensor in named_tensors(weights).values():
        tensor.requires_grad_()
    return weights


def with_zero_row(gen, *shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = randn(gen, *shape)
    x[-1, -1] = 0.0                                   # a zero-padding token: a constant row
    return x.clone().requires_grad_(), x.clone().requires_grad_()


def test_layer_norm_gradients_match_torch_with_a_constant_row(gen):
    module = randomise(torch.nn.LayerNorm(6, dtype=torch.float64), gen)
    x_ours, x_theirs = with_zero_row(gen, 2, 4, 6)
    probe = randn(gen, 2, 4, 6)
    params = requiring_grad(attnref.LayerNormParams(gain=module.weight.detach().clone(),
                                                    bias=module.bias.detach().clone(), eps=module.eps))
    (attnref.layer_norm(x_ours, params) * probe).sum().backward()
    (module(x_theirs) * probe).sum().backward()
    assert (x_ours.grad - x_theirs.grad).abs().max() < GRAD_ATOL
    assert (params.gain.grad - module.weight.grad).abs().max() < GRAD_ATOL
    assert (params.bias.grad - module.bias.grad).abs().max() < GRAD_ATOL


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
def test_multi_head_attention_gradients_match_torch(gen, form):
    module = randomise(torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64), gen)
    x_ours = randn(gen, 2, 5, 8).requires_grad_()
    x_theirs = x_ours.detach().clone().requires_grad_()
    key_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    probe = randn(gen, 2, 5, 8)
    weights = requiring_grad(attnref.MultiHeadWeights.from_torch(module))
    (form(x_ours, weights=weights, key_mask=key_mask, causal=True).output * probe).sum().backward()
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    (module(x_theirs, x_theirs, x_theirs, key_padding_mask=~key_mask, attn_mask=causal)[0] * probe).sum().backward()
    assert_same_gradients(weights, attnref.MultiHeadWeights.from_torch(grads_of(module)), x_ours, x_theirs)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("causal", [False, True], ids=["padding", "causal+padding"])
def test_encoder_layer_gradients_match_torch(gen, norm_first, causal):
    module = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first,
                                              dtype=torch.float64)
    randomise(module, gen)
    x_ours, x_theirs = with_zero_row(gen, 2, 5, 8)   # the last token of the second sequence: zeros
    key_mask = torch.tensor([[True] * 5, [True, True, True, True, False]])
    probe = randn(gen, 2, 5, 8)
    layer = requiring_grad(attnref.EncoderLayer.from_torch(module))
    (attnref.encoder_layer(x_ours, weights=layer, key_mask=key_mask, causal=causal).output * probe).sum().backward()
    src_mask = torch.ones(5, 5, dtype=torch.bool).triu(1) if causal else None
    (module(x_theirs, src_mask=src_mask, is_causal=causal, src_key_padding_mask=~key_mask) * probe).sum().backward()
    assert_same_gradients(layer, attnref.EncoderLayer.from_torch(grads_of(module)), x_ours, x_theirs)
