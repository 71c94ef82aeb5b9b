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
    ours = form(x, weights=MultiHeadWeights.from_torch(module))
    assert (ours.output - expected).abs().max() < PARITY_ATOL
    assert (ours.weights - expected_weights).abs().max() < PARITY_ATOL


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
def test_mha_cross_attention_with_key_mask_matches_torch(gen, form):
    module = torch_mha(gen, d=12, h=3)
    x, memory = randn(gen, 2, 4, 12), randn(gen, 2, 7, 12)
    key_mask = torch.ones(2, 7, dtype=torch.bool)
    key_mask[0, 5:] = False
    expected, _ = module(x, memory, memory, key_padding_mask=~key_mask)   # torch: True = ignore
    ours = form(x, weights=MultiHeadWeights.from_torch(module), key=memory, key_mask=key_mask)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
def test_mha_causal_and_attn_mask_match_torch(gen, form):
    module = torch_mha(gen)
    x = randn(gen, 2, 5, 8)
    causal_mask = torch.ones(5, 5, dtype=torch.bool).tril()
    expected, _ = module(x, x, x, attn_mask=~causal_mask)   # torch: True = not allowed
    ours_causal = form(x, weights=MultiHeadWeights.from_torch(module), causal=True)
    ours_mask = form(x, weights=MultiHeadWeights.from_torch(module), mask=causal_mask)
    assert (ours_causal.output - expected).abs().max() < PARITY_ATOL
    assert (ours_mask.output - expected).abs().max() < PARITY_ATOL


def test_mha_with_different_key_and_value_widths_matches_torch(gen):
    module = torch_mha(gen, d=8, h=2, kdim=5, vdim=3)
    x, keys, values = randn(gen, 4, 8), randn(gen, 6, 5), randn(gen, 6, 3)
    expected, _ = module(x, keys, values)
    ours = attnref.multi_head_attention(x, weights=MultiHeadWeights.from_torch(module), key=keys, value=values)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_weights_round_trip_through_torch(gen):
    weights = MultiHeadWeights.random(16, 4, generator=gen)
    back = MultiHeadWeights.from_torch(weights.to_torch())
    for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        assert torch.equal(getattr(back, name), getattr(weights, name)), name


def test_per_head_and_packed_forms_agree(gen):
    weights = MultiHeadWeights.random(12, 3, generator=gen)
    x = randn(gen, 2, 5, 12)
    a = attnref.multi_head_attention(x, weights=weights)
    b = attnref.multi_head_attention_packed(x, weights=weights)
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
    ours = attnref.encoder_layer(x, weights=attnref.EncoderLayer.from_torch(layer), key_mask=key_mask).output
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
    q, k, v = attnref.head_projections(x, weights=weights, key=memory)
    for i in range(weights.h):
        assert (q[:, i] - (x @ weights.w_q[i] + weights.b_q[i])).abs().max() < PARITY_ATOL
        assert (k[:, i] - (memory @ weights.w_k[i] + weights.b_k[i])).abs().max() < PARITY_ATOL
        assert (v[:, i] - (memory @ weights.w_v[i] + weights.b_v[i])).abs().max() < PARITY_ATOL


def test_per_head_and_packed_forms_agree_with_only_some_biases(gen):
    full = MultiHeadWeights.random(8, 2, generator=gen)
    weights = MultiHeadWeights(w_q=full.w_q, w_k=full.w_k, w_v=full.w_v, w_o=full.w_o, b_q=full.b_q, b_v=full.b_v)
    x = randn(gen, 5, 8)
    a = attnref.multi_head_attention(x, weights=weights)
    b = attnref.multi_head_attention_packed(x, weights=weights)
    assert (a.output - b.output).abs().max() < PARITY_ATOL


def test_encoder_layer_returns_the_attention_weights(gen):
    """The weights returned are torch's (per head, not averaged), and ``z`` is torch's output."""
    module = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, dtype=torch.float64)
    randomise(module, gen)
    x = randn(gen, 2, 5, 8)
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[1, 3:] = False
    result = attnref.encoder_layer(x, weights=attnref.EncoderLayer.from_torch(module), key_mask=key_mask)
    z, weights = result.output, result.weights
    _, expected_weights = module.self_attn(x, x, x, key_padding_mask=~key_mask, average_attn_weights=False)
    assert weights.shape == (2, 2, 5, 5)
    assert (weights - expected_weights).abs().max() < PARITY_ATOL
    assert (z - module(x, src_key_padding_mask=~key_mask)).abs().max() < PARITY_ATOL


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
def test_per_head_mask_matches_torch(gen, form):
    """attnref's (b, h, n, m) mask is torch's (b·h, n, m) attn_mask (torch: True = not allowed)."""
    module = torch_mha(gen, d=8, h=2)
    x = randn(gen, 3, 5, 8)
    keep = torch.rand(3, 2, 5, 5, generator=gen) > 0.4
    keep[..., 0] = True
    key_mask = torch.ones(3, 5, dtype=torch.bool)
    key_mask[2, 3:] = False
    expected, expected_weights = module(x, x, x, attn_mask=~keep.reshape(6, 5, 5), key_padding_mask=~key_mask,
                                        average_attn_weights=False)
    ours = form(x, weights=MultiHeadWeights.from_torch(module), mask=keep, key_mask=key_mask)
    assert (ours.output - expected).abs().max() < PARITY_ATOL
    assert (ours.weights - expected_weights).abs().max() < PARITY_ATOL


# ------------------------------------------------------------------------------------------
# float32: tolerances from float32's unit round-off
# ------------------------------------------------------------------------------------------

U32 = torch.finfo(torch.float32).eps / 2   # unit round-off of float32, 2⁻²⁴ ≈ 6e-8


@pytest.mark.parametrize("form", [attnref.multi_head_attention, attnref.multi_head_attention_packed])
def test_float32_multi_head_attention_is_float32_accurate(gen, form):
    """Against the float64 evaluation of the same float32 numbers. Each output passes five
    stages (projection, scores, softmax, weighted sum, output projection), each a sum of at
    most d = 16 terms: the error is below 5·d·u·(a bound on the magnitudes, ≤ 4 here)."""
    weights32 = MultiHeadWeights.random(16, 4, generator=gen).to(dtype=torch.float32)
    x32 = randn(gen, 2, 6, 16).float()
    ours = form(x32, weights=weights32)
    reference = form(x32.double(), weights=weights32.to(dtype=torch.float64))
    assert ours.output.dtype == torch.float32
    assert (ours.output.double() - reference.output).abs().max() < 5 * 16 * U32 * 4
    assert (ours.weights.double() - reference.weights).abs().max() < 5 * 16 * U32 * 4
    expected = weights32.to_torch()(x32, x32, x32)[0]
    assert (ours.output - expected).abs().max() < 2 * 5 * 16 * U32 * 4   # both within the bound


def test_float32_layer_norm_is_float32_accurate(gen):
    """(x − μ)/σ with d = 32 terms in μ and σ²: error below 4·d·u relative to |y| ≤ √d."""
    x32 = (randn(gen, 4, 32) * 3 + 1).float()
    params = attnref.LayerNormParams(gain=randn(gen, 32).float(), bias=randn(gen, 32).float())
    ours = attnref.layer_norm(x32, params)
    reference = attnref.layer_norm(x32.double(), params.to(dtype=torch.float64))
    scale = reference.abs().max().item()
    assert ours.dtype == torch.float32
    assert (ours.double() - reference).abs().max() < 4 * 32 * U32 * scale
    torch_ln = torch.nn.functional.layer_norm(x32, (32,), params.gain, params.bias, eps=params.eps)
    assert (ours - torch_ln).abs().max() < 2 * 4 * 32 * U32 * scale


# ------------------------------------------------------------------------------------------
# Non-contiguous inputs give the contiguous inputs' results
# ------------------------------------------------------------------------------------------

def test_non_contiguous_inputs(gen):
    base = randn(gen, 8, 2, 6)                    # (d, b, n): transposed below to (b, n, d)
    x = base.permute(1, 2, 0)                      # (2, 6, 8), non-contiguous
    assert not x.is_contiguous()
    dense = x.contiguous()
    weights = MultiHeadWeights.random(8, 2, generator=gen)
    layer = attnref.EncoderLayer.random(8, 2, 16, generator=gen)
    key_mask = torch.ones(6, 2, dtype=torch.bool).T                # (2, 6), non-contiguous
    key_mask[1, 4:] = False
    runs = [
        lambda x, km: attnref.scaled_dot_product_attention(x, x[:, ::2], x[:, ::2], key_mask=km[:, ::2]).output,
        lambda x, km: attnref.multi_head_attention(x, weights=weights, key_mask=km).output,
        lambda x, km: attnref.multi_head_attention_packed(x, weights=weights, key_mask=km).output,
        lambda x, km: attnref.layer_norm(x),
        lambda x, km: attnref.pre_ln_layer(x, weights=layer, key_mask=km).output,
        lambda x, km: attnref.pre_ln_layer(x, weights=layer, causal=True).output,
    ]
    for run in runs:
        assert (run(x, key_mask) - run(dense, key_mask.contiguous())).abs().max() < PARITY_ATOL


# ------------------------------------------------------------------------------------------
# Devices and dtypes
# ------------------------------------------------------------------------------------------

def test_constructors_place_weights_where_asked():
    weights = MultiHeadWeights.random(8, 2, device="meta")
    layer = attnref.EncoderLayer.random(8, 2, 16, device="meta")
    tensors = [getattr(weights, n) for n in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_o")]
    tensors += [layer.attention.w_q, layer.norm_1.gain, layer.norm_2.bias, layer.ffn.w_1, layer.ffn.b_2]
    tensors.append(attnref.sinusoidal_positional_encoding(4, 8, device="meta"))
    assert all(t.device.type == "meta" for t in tensors)


def test_to_changes_every_tensor(gen):
    layer = attnref.EncoderLayer.random(8, 2, 16, norm_first=True, generator=gen).to(dtype=torch.float32)
    assert layer.norm_first
    assert {t.dtype for t in (layer.attention.w_q, layer.attention.b_o, layer.norm_1.gain, layer.norm_2.bias,
                              layer.ffn.w_2, layer.ffn.b_1)} == {torch.float32}
    assert MultiHeadWeights.random(8, 2, generator=gen).to("meta").w_k.device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_runs_on_cuda_and_agrees_with_the_cpu(gen):
    layer = attnref.EncoderLayer.random(8, 2, 16, norm_first=True, generator=gen)
    x = randn(gen, 2, 5, 8)
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[1, 3:] = False
    on_gpu = attnref.pre_ln_layer(x.cuda(), weights=layer.to("cuda"), key_mask=key_mask.cuda(), causal=True)
    on_cpu = attnref.pre_ln_layer(x, weights=layer, key_mask=key_mask, causal=True)
    assert on_gpu.output.device.type == "cuda"
    assert (on_gpu.output.cpu() - on_cpu.output).abs().max() < 1e-10
    weights = MultiHeadWeights.random(8, 2, generator=gen, device="cuda")
    assert weights.w_q.device.type == "cuda"
    assert attnref.multi_head_attention(x.cuda(), weights=weights, causal=True).output.device.type == "cuda"
    assert attnref.sinusoidal_positional_encoding(4, 8, device="cuda").device.type == "cuda"


def test_annotated_transformer_layer_norm_is_torch_s_with_a_rescaled_gain_at_eps_zero(gen):
    """book/notation.md, eq-notation-layernorm-map: a_2 (x − mean)/(x.std(−1) + 0) + b_2 (Bessel-
    corrected std, the Annotated Transformer's) equals attnref's LayerNorm with gain √((d−1)/d)·a_2."""
    d = 7
    x, a_2, b_2 = randn(gen, 3, d) * 4 + 1, randn(gen, d), randn(gen, d)
    annotated = a_2 * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 0.0) + b_2
    ours = attnref.layer_norm(x, attnref.LayerNormParams(gain=math.sqrt((d - 1) / d) * a_2, bias=b_2, eps=0.0))
    assert (ours - annotated).abs().max() < PARITY_ATOL
    with_eps = attnref.layer_norm(x, attnref.LayerNormParams(gain=math.sqrt((d - 1) / d) * a_2, bias=b_2, eps=1e-6))
    assert (with_eps - annotated).abs().max() > 0   # ε > 0: no exact map
