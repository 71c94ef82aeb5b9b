"""attnref against torch.nn.MultiheadAttention, LayerNorm and TransformerEncoderLayer (float64)."""

from __future__ import annotations

import math

import pytest
import torch

import attnref
from attnref import MultiHeadWeights
from conftest import PARITY_ATOL, randn


def randomise(module: torch.nn.Module, gen, scale: float = 0.3) -> torch.nn.Module:
    """Every parameter from the test's own generator (torch's initialisation would read the global
    RNG, and leaves biases at zero, where they would go untested); LayerNorm gains near 1."""
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            parameter.copy_(randn(gen, *parameter.shape) * scale + (1.0 if name.startswith("norm") and
                                                                     name.endswith("weight") else 0.0))
    return module


def torch_mha(gen, d=8, h=2, bias=True, kdim=None, vdim=None):
    module = torch.nn.MultiheadAttention(d, h, bias=bias, kdim=kdim, vdim=vdim, batch_first=True,
                                         dtype=torch.float64)
    return randomise(module, gen)


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
@pytest.mark.parametrize("bias", [True, False])
def test_mha_self_attention_matches_torch(gen, form, bias):
    module = torch_mha(gen, bias=bias)
    x = randn(gen, 3, 6, 8)
    expected, expected_weights = module(x, x, x, average_attn_weights=False)
    ours = form(x, MultiHeadWeights.from_torch(module))
    assert (ours.output - expected).abs().max() < PARITY_ATOL
    assert (ours.weights - expected_weights).abs().max() < PARITY_ATOL


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
def test_mha_cross_attention_with_key_mask_matches_torch(gen, form):
    module = torch_mha(gen, d=12, h=3)
    x, memory = randn(gen, 2, 4, 12), randn(gen, 2, 7, 12)
    key_mask = torch.ones(2, 7, dtype=torch.bool)
    key_mask[0, 5:] = False
    expected, _ = module(x, memory, memory, key_padding_mask=~key_mask)   # torch: True = ignore
    ours = form(x, MultiHeadWeights.from_torch(module), key=memory, key_mask=key_mask)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
def test_mha_causal_and_attn_mask_match_torch(gen, form):
    module = torch_mha(gen)
    x = randn(gen, 2, 5, 8)
    causal_mask = torch.ones(5, 5, dtype=torch.bool).tril()
    expected, _ = module(x, x, x, attn_mask=~causal_mask)   # torch: True = not allowed
    ours_causal = form(x, MultiHeadWeights.from_torch(module), causal=True)
    ours_mask = form(x, MultiHeadWeights.from_torch(module), mask=causal_mask)
    assert (ours_causal.output - expected).abs().max() < PARITY_ATOL
    assert (ours_mask.output - expected).abs().max() < PARITY_ATOL


def test_mha_with_different_key_and_value_widths_matches_torch(gen):
    module = torch_mha(gen, d=8, h=2, kdim=5, vdim=3)
    x, keys, values = randn(gen, 4, 8), randn(gen, 6, 5), randn(gen, 6, 3)
    expected, _ = module(x, keys, values)
    ours = attnref.multi_head_attention(x, MultiHeadWeights.from_torch(module), key=keys, value=values)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_weights_round_trip_through_torch(gen):
    weights = MultiHeadWeights.random(16, 4, generator=gen)
    back = MultiHeadWeights.from_torch(weights.to_torch())
    for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        assert torch.equal(getattr(back, name), getattr(weights, name)), name


def test_per_head_and_packed_forms_agree(gen):
    weights = MultiHeadWeights.random(12, 3, generator=gen)
    x = randn(gen, 2, 5, 12)
    a = attnref.multi_head_attention(x, weights)
    b = attnref.multi_head_attention_packed(x, weights)
    assert (a.output - b.output).abs().max() < PARITY_ATOL


def test_parameter_count_matches_torch():
    for d, h in [(8, 2), (512, 8), (64, 16)]:
        module = torch.nn.MultiheadAttention(d, h)
        assert attnref.attention_parameter_count(d, h) == sum(p.numel() for p in module.parameters())
        assert attnref.attention_parameter_count(d, h) == 4 * d * d + 4 * d
        no_bias = torch.nn.MultiheadAttention(d, h, bias=False)
        assert attnref.attention_parameter_count(d, h, bias=False) == sum(p.numel() for p in no_bias.parameters())


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_parameter_count_matches_torch(activation):
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, activation=activation)
    assert attnref.encoder_layer_parameter_count(64, 4, 256) == sum(p.numel() for p in layer.parameters())


def test_decoder_and_whole_model_parameter_count_match_torch():
    from attnref.counts import decoder_layer_parameter_count
    layer = torch.nn.TransformerDecoderLayer(64, 4, 256)
    assert decoder_layer_parameter_count(64, 4, 256) == sum(p.numel() for p in layer.parameters())
    model = torch.nn.Transformer(64, 4, 2, 2, 256, batch_first=True)
    config = attnref.TransformerConfig(n_layers=2, d=64, d_ff=256, h=4, vocab=0, final_layer_norms=True)
    assert attnref.transformer_parameter_count(config)["total"] == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_torch(gen, affine):
    module = torch.nn.LayerNorm(10, eps=1e-5, elementwise_affine=affine, dtype=torch.float64)
    if affine:
        with torch.no_grad():
            module.weight.normal_(generator=gen)
            module.bias.normal_(generator=gen)
    x = randn(gen, 3, 4, 10) * 5 + 2
    params = attnref.LayerNormParams(
        gain=module.weight.detach() if affine else None, bias=module.bias.detach() if affine else None, eps=1e-5)
    assert (attnref.layer_norm(x, params) - module(x)).abs().max() < PARITY_ATOL


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_post_ln_encoder_layer_matches_torch(gen, activation):
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation=activation, batch_first=True,
                                             norm_first=False, dtype=torch.float64)
    randomise(layer, gen)
    x = randn(gen, 2, 6, 16)
    key_mask = torch.ones(2, 6, dtype=torch.bool)
    key_mask[1, 4:] = False
    ours = attnref.encoder_layer(x, attnref.EncoderLayer.from_torch(layer), key_mask=key_mask)
    expected = layer(x, src_key_padding_mask=~key_mask)
    assert (ours - expected).abs().max() < PARITY_ATOL


def test_encoder_layer_reads_the_placement():
    """A pre-LN torch layer is read as pre-LN (it used to be rejected; now both placements run)."""
    assert attnref.EncoderLayer.from_torch(torch.nn.TransformerEncoderLayer(8, 2, 16, norm_first=True)).norm_first
    assert not attnref.EncoderLayer.from_torch(torch.nn.TransformerEncoderLayer(8, 2, 16)).norm_first


def test_sinusoidal_encoding_values():
    pe = attnref.sinusoidal_positional_encoding(50, 16)
    p, i = 7, 3
    assert abs(pe[p, 2 * i].item() - math.sin(p / 10000 ** (2 * i / 16))) < 1e-15
    assert abs(pe[p, 2 * i + 1].item() - math.cos(p / 10000 ** (2 * i / 16))) < 1e-15
    assert torch.allclose(pe[0, 1::2], torch.ones(8, dtype=torch.float64))


def test_head_projections_are_the_per_head_products(gen):
    weights = MultiHeadWeights.random(12, 3, generator=gen)
    x, memory = randn(gen, 2, 4, 12), randn(gen, 2, 6, 12)
    q, k, v = attnref.head_projections(x, weights, key=memory)
    for i in range(weights.h):
        assert (q[:, i] - (x @ weights.w_q[i] + weights.b_q[i])).abs().max() < PARITY_ATOL
        assert (k[:, i] - (memory @ weights.w_k[i] + weights.b_k[i])).abs().max() < PARITY_ATOL
        assert (v[:, i] - (memory @ weights.w_v[i] + weights.b_v[i])).abs().max() < PARITY_ATOL


def test_per_head_and_packed_forms_agree_with_only_some_biases(gen):
    full = MultiHeadWeights.random(8, 2, generator=gen)
    weights = MultiHeadWeights(w_q=full.w_q, w_k=full.w_k, w_v=full.w_v, w_o=full.w_o, b_q=full.b_q, b_v=full.b_v)
    x = randn(gen, 5, 8)
    a = attnref.multi_head_attention(x, weights)
    b = attnref.multi_head_attention_packed(x, weights)
    assert (a.output - b.output).abs().max() < PARITY_ATOL


def test_encoder_layer_with_weights_returns_the_attention_weights(gen):
    """The weights returned are torch's (per head, not averaged), and ``z`` is torch's output."""
    module = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=torch.float64)
    randomise(module, gen)
    x = randn(gen, 2, 5, 8)
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[1, 3:] = False
    z, weights = attnref.encoder_layer_with_weights(x, attnref.EncoderLayer.from_torch(module), key_mask=key_mask)
    _, expected_weights = module.self_attn(x, x, x, key_padding_mask=~key_mask, average_attn_weights=False)
    assert weights.shape == (2, 2, 5, 5)
    assert (weights - expected_weights).abs().max() < PARITY_ATOL
    assert (z - module(x, src_key_padding_mask=~key_mask)).abs().max() < PARITY_ATOL
