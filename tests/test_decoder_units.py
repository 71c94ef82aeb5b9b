"""Fast unit oracles for the Llama-style decoder parts (no model file): grouped-query head
grouping against an explicit loop, RMSNorm against torch.nn.RMSNorm, SwiGLU against its
formula with named projections, RoPE against a per-position 2 × 2 rotation loop."""

from __future__ import annotations

import math

import pytest
import torch

from attnref import decoder, rope


def r(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def parts(d=8, h=4, h_kv=2, d_k=4, d_ff=12):
    config = decoder.DecoderConfig(d=d, h=h, h_kv=h_kv, d_k=d_k)
    shapes = {"attention_norm": (d,), "w_q": (d, h * d_k), "w_k": (d, h_kv * d_k), "w_v": (d, h_kv * d_k),
              "w_o": (h * d_k, d), "ffn_norm": (d,), "w_gate": (d, d_ff), "w_up": (d, d_ff), "w_down": (d_ff, d)}
    layer = decoder.DecoderLayerWeights(**{k: r(10 + i, *s) * 0.5 for i, (k, s) in enumerate(shapes.items())})
    return config, layer


def rotate_loop(x: torch.Tensor, base: float) -> torch.Tensor:
    """Llama's rotate_half convention, one position and one pair (p, p + d_k/2) at a time."""
    n, d_k = x.shape
    half = d_k // 2
    out = torch.empty_like(x)
    for t in range(n):
        for p in range(half):
            angle = t * base ** (-2 * p / d_k)
            c, s = math.cos(angle), math.sin(angle)
            out[t, p] = c * x[t, p] - s * x[t, p + half]
            out[t, p + half] = s * x[t, p] + c * x[t, p + half]
    return out


@pytest.mark.parametrize("h, h_kv", [(4, 2), (6, 2), (4, 1), (4, 4)])
def test_query_head_i_uses_kv_head_i_over_group(h, h_kv):
    """transformers' repeat_kv: query head i reads key/value head i // (h / h_kv)."""
    config, layer = parts(h=h, h_kv=h_kv)
    x, n, d_k = r(0, 5, 8), 5, config.d_k
    trace = decoder.grouped_query_attention(x, weights=layer, config=config, causal=True)
    q = trace.trace.rotated_query                                     # (h, n, d_k)
    k = trace.trace.rotated_key                                       # (h_kv, n, d_k)
    v = (x @ layer.w_v).reshape(n, h_kv, d_k).transpose(0, 1)         # (h_kv, n, d_k)
    heads = []
    for i in range(h):
        j = i // (h // h_kv)
        scores = q[i] @ k[j].T / math.sqrt(d_k)
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        assert torch.allclose(trace.weights[i], weights, atol=1e-12)
        heads.append(weights @ v[j])
    expected = torch.cat(heads, dim=-1) @ layer.w_o
    assert torch.allclose(trace.output, expected, atol=1e-12)


@pytest.mark.parametrize("eps", [1e-6, 0.5, 3.0])
def test_rms_norm_matches_torch_including_eps(eps):
    x, gain = r(1, 3, 5, 8) * 0.3, r(2, 8)
    module = torch.nn.RMSNorm(8, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        module.weight.copy_(gain)
    assert torch.allclose(decoder.rms_norm(x, gain, eps), module(x), atol=1e-14, rtol=1e-13)


def test_swiglu_is_down_of_silu_gate_times_up():
    x = r(3, 5, 8)
    w_gate, w_up, w_down = r(4, 8, 12), r(5, 8, 12), r(6, 12, 8)
    gate = torch.nn.functional.silu(x @ w_gate)                       # the gate goes through silu
    expected = (gate * (x @ w_up)) @ w_down
    assert torch.allclose(decoder.swiglu(x, w_gate, w_up, w_down), expected, atol=1e-12)
    swapped = (torch.nn.functional.silu(x @ w_up) * (x @ w_gate)) @ w_down
    assert not torch.allclose(swapped, expected, atol=1e-3)           # the oracle tells gate from up


@pytest.mark.parametrize("d_k, base", [(2, 10000.0), (8, 10000.0), (6, 100.0)])
def test_rope_matches_a_per_position_rotation_loop(d_k, base):
    x = r(7, 9, d_k)
    assert torch.allclose(rope.rotate(x, base=base), rotate_loop(x, base), atol=1e-13)


def test_decoder_block_is_its_parts():
    config, layer = parts()
    x = r(8, 2, 5, 8)
    block = decoder.decoder_block(x, weights=layer, config=config, causal=True)
    module = torch.nn.RMSNorm(8, eps=config.eps, dtype=torch.float64)
    with torch.no_grad():
        module.weight.copy_(layer.attention_norm)
    attention = decoder.grouped_query_attention(module(x), weights=layer, config=config, causal=True).output
    y = x + attention
    with torch.no_grad():
        module.weight.copy_(layer.ffn_norm)
    z = y + decoder.swiglu(module(y), layer.w_gate, layer.w_up, layer.w_down)
    assert torch.allclose(block.output, z, atol=1e-12)
    assert torch.allclose(block.trace.hidden, y, atol=1e-12) and torch.equal(block.trace.attention_update,
                                                                              block.trace.attention.output)


def test_decoder_weights_are_frozen_validated_and_move():
    import dataclasses
    config, layer = parts()
    with pytest.raises(dataclasses.FrozenInstanceError):
        layer.w_q = layer.w_k
    with pytest.raises(ValueError, match=r"w_o has shape \(8, 8\), expected \(16, 8\)"):
        dataclasses.replace(layer, w_o=r(0, 8, 8))
    with pytest.raises(ValueError, match=r"w_up has shape \(8, 5\), expected \(8, 12\)"):
        dataclasses.replace(layer, w_up=r(0, 8, 5))
    with pytest.raises(ValueError, match="contains NaN"):
        dataclasses.replace(layer, ffn_norm=torch.full((8,), float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="share one dtype"):
        dataclasses.replace(layer, w_gate=layer.w_gate.float())
    assert layer.to(dtype=torch.float32).w_down.dtype == torch.float32


def test_decoder_causal_is_a_keyword_defaulting_to_false():
    """The package's call shape: causal=False by default (bidirectional), True for a decoder."""
    config, layer = parts()
    x = r(9, 5, 8)
    both = decoder.grouped_query_attention(x, weights=layer, config=config)
    causal = decoder.grouped_query_attention(x, weights=layer, config=config, causal=True)
    assert (both.weights.triu(1) > 0).any() and torch.equal(causal.weights.triu(1), torch.zeros_like(causal.weights))
    tril = torch.ones(5, 5, dtype=torch.bool).tril()
    masked = decoder.grouped_query_attention(x, weights=layer, config=config, mask=tril)
    assert torch.allclose(masked.output, causal.output, atol=1e-13)
    with pytest.raises(TypeError):
        decoder.grouped_query_attention(x, layer, config)


def test_swiglu_refuses_an_output_that_overflows_to_inf_and_a_w_down_of_the_wrong_width():
    import pytest
    from attnref.decoder import swiglu
    x = torch.full((1, 2, 4), 200.0, dtype=torch.float16)
    w = torch.full((4, 8), 30.0, dtype=torch.float16)
    with pytest.raises(ValueError, match="overflows"):          # +inf, not NaN: it used to pass
        swiglu(x, w, w, torch.full((8, 4), 30.0, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"w_down must have shape \(8, 4\)"):
        swiglu(x.double(), w.double(), w.double(), torch.ones(8, 1, dtype=torch.float64))
