"""Half precision as the field computes it: float16/bfloat16 inputs get scores, softmax and
normalisation statistics in float32 and RoPE tables in float64, results rounded once to the
input's dtype.

Every error is measured against a float64 reference computed from the same (rounded) half
inputs, and attnref's error must be at most twice torch's (or transformers' Llama's, for RoPE).
The property tests draw shapes and scales, extreme ones included (logits up to 6e4, scores
beyond float16's 65504, positions beyond 2048).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnref
from attnref import decoder, rope

HALF = [torch.float16, torch.bfloat16]
halves = st.sampled_from(HALF)
seeds = st.integers(min_value=0, max_value=2**31 - 1)


def draw(seed: int, *shape: int, scale: float = 1.0, offset: float = 0.0, dtype=torch.float16) -> torch.Tensor:
    """Seeded normal draws, rounded to ``dtype`` (the inputs both implementations see)."""
    sample = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (sample * scale + offset).to(dtype)


def error(result: torch.Tensor, reference: torch.Tensor) -> float:
    """Largest absolute error of a half-precision result against a float64 reference."""
    assert result.dtype != torch.float64
    return (result.double() - reference).abs().max().item()


def at_most_twice(ours: float, theirs: float) -> None:
    assert ours <= 2 * theirs, f"attnref's error {ours:.3g} is more than twice torch's {theirs:.3g}"


# --- softmax -------------------------------------------------------------------------------------

@given(dtype=halves, rows=st.integers(1, 8), m=st.integers(2, 300), seed=seeds,
       scale=st.sampled_from([0.1, 1.0, 4.0, 30.0, 1e3, 6e4]))
def test_softmax_error_is_at_most_twice_torchs(dtype, rows, m, seed, scale):
    logits = draw(seed, rows, m, scale=scale, dtype=dtype).clamp(-6e4, 6e4)
    reference = torch.softmax(logits.double(), dim=-1)
    ours = attnref.softmax(logits)
    assert ours.dtype == dtype
    at_most_twice(error(ours, reference), error(torch.softmax(logits, dim=-1), reference))


@pytest.mark.parametrize("dtype", HALF)
def test_softmax_of_half_precision_rounds_once(dtype):
    """The weights are attnref's float32 softmax of the same logits, rounded once (a softmax
    computed in the format itself, or rounded twice, differs in the last bits)."""
    logits = draw(1, 16, 512, scale=4.0, dtype=dtype)
    assert torch.equal(attnref.softmax(logits), attnref.softmax(logits.float()).to(dtype))


# --- LayerNorm and RMSNorm -----------------------------------------------------------------------

@given(dtype=halves, rows=st.integers(1, 6), d=st.integers(2, 256), seed=seeds,
       scale=st.sampled_from([1e-2, 1.0, 3.0, 100.0]), offset=st.sampled_from([0.0, 1.0, 50.0]))
def test_layer_norm_error_is_at_most_twice_torchs(dtype, rows, d, seed, scale, offset):
    x = draw(seed, rows, d, scale=scale, offset=offset, dtype=dtype)
    gain, bias = draw(seed + 1, d, dtype=dtype), draw(seed + 2, d, dtype=dtype)
    reference = torch.nn.functional.layer_norm(x.double(), (d,), gain.double(), bias.double(), 1e-5)
    ours = attnref.layer_norm(x, attnref.LayerNormParams(gain=gain, bias=bias, eps=1e-5))
    theirs = torch.nn.functional.layer_norm(x, (d,), gain, bias, 1e-5)
    assert ours.dtype == dtype
    at_most_twice(error(ours, reference), error(theirs, reference))


@pytest.mark.parametrize("dtype", HALF)
def test_rms_norm_statistic_in_float32(dtype):
    """Llama's RMSNorm: the mean square in float32, the normalised row rounded, then the gain."""
    x, gain = draw(3, 8, 512, scale=200.0, dtype=dtype), draw(4, 512, dtype=dtype)
    reference = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6)
    ours = decoder.rms_norm(x, None, 1e-6)
    in_format = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)     # statistic in the format
    assert error(ours, reference) <= 2 * torch.finfo(dtype).eps * reference.abs().max()
    assert error(ours, reference) < error(in_format, reference)
    assert decoder.rms_norm(x, gain, 1e-6).dtype == dtype


# --- scaled dot-product attention, at extreme scales ---------------------------------------------

@given(dtype=halves, n=st.integers(1, 12), m=st.integers(1, 40), d_k=st.sampled_from([4, 16, 64]),
       seed=seeds, scale=st.sampled_from([0.5, 3.0, 12.0, 40.0, 60.0]), causal=st.booleans())
def test_sdpa_error_is_at_most_twice_torchs(dtype, n, m, d_k, seed, scale, causal):
    """Scores from O(1) to beyond 65504 (|q|, |k| ~ 60, d_k = 64): attnref stays within 2× torch."""
    q, k = draw(seed, 2, n, d_k, scale=scale, dtype=dtype), draw(seed + 1, 2, m, d_k, scale=scale, dtype=dtype)
    v = draw(seed + 2, 2, m, 8, dtype=dtype)
    causal = causal and n <= m
    reference = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                                 is_causal=causal)
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ours = attnref.scaled_dot_product_attention(q, k, v, causal=causal)
    assert ours.output.dtype == ours.weights.dtype == dtype
    at_most_twice(error(ours.output, reference), error(theirs, reference))


def test_sdpa_with_scores_beyond_float16s_range_is_finite():
    """q·k beyond 65504 overflowed float16 (a ValueError about "logits"); in float32 it is fine."""
    q, k, v = draw(5, 16, 64, scale=60.0), draw(6, 16, 64, scale=60.0), draw(7, 16, 8)
    assert (q.double() @ k.double().T).abs().max() > 65504
    result = attnref.scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(result.output).all() and torch.isfinite(result.weights).all()


@pytest.mark.parametrize("dtype", HALF)
def test_multi_head_and_cosine_attention_in_half_precision(dtype):
    weights = attnref.MultiHeadWeights.random(16, 4, generator=torch.Generator().manual_seed(0), dtype=dtype)
    x = draw(8, 2, 7, 16, scale=30.0, dtype=dtype)
    q, k, v = attnref.head_projections(x, weights=weights)           # the projections in the format, as torch's
    reference = attnref.scaled_dot_product_attention(q.double(), k.double(), v.double()).weights
    ours = attnref.multi_head_attention(x, weights=weights)
    packed = attnref.multi_head_attention_packed(x, weights=weights)
    assert ours.output.dtype == dtype and torch.isfinite(ours.output).all()
    assert (ours.weights.double() - reference).abs().max() <= torch.finfo(dtype).eps
    assert (packed.weights.double() - reference).abs().max() <= torch.finfo(dtype).eps
    q, k = draw(9, 5, 8, scale=1e3, dtype=dtype), draw(10, 6, 8, scale=1e3, dtype=dtype)
    cosine = attnref.cosine_scores(q, k)
    assert cosine.dtype == dtype
    assert (cosine.double() - attnref.cosine_scores(q.double(), k.double())).abs().max() <= torch.finfo(dtype).eps


# --- RoPE: float64 tables, positions beyond 2048 --------------------------------------------------

@settings(max_examples=12)
@given(dtype=halves, n=st.sampled_from([2049, 4100, 8192]), d_k=st.sampled_from([8, 64]), seed=seeds,
       base=st.sampled_from([10000.0, 5e5]))
def test_rope_error_is_at_most_twice_llamas(dtype, n, d_k, seed, base):
    """transformers' Llama: float32 tables cast to the input dtype, rotation in the input dtype."""
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    x = draw(seed, 1, 1, n, d_k, dtype=dtype)
    positions = torch.arange(n)
    reference = rope.rotate(x.double(), positions, base)
    theta = base ** -(torch.arange(0, d_k, 2, dtype=torch.int64).float() / d_k)      # Llama's inv_freq
    angles = positions.float()[:, None] * theta                                      # float32
    both = torch.cat((angles, angles), dim=-1)
    cos, sin = both.cos().to(dtype), both.sin().to(dtype)
    theirs, _ = llama.apply_rotary_pos_emb(x, x, cos[None], sin[None])
    ours = rope.rotate(x, positions, base)
    assert ours.dtype == dtype
    at_most_twice(error(ours, reference), error(theirs, reference))


@pytest.mark.parametrize("dtype", HALF)
def test_rope_tells_position_4097_from_4096(dtype):
    x = draw(11, 1, 64, dtype=dtype)
    at_4096, at_4097 = rope.rotate(x, torch.tensor([4096])), rope.rotate(x, torch.tensor([4097]))
    assert not torch.equal(at_4096, at_4097)
    reference = rope.rotate(x.double(), torch.tensor([4097]))
    assert error(at_4097, reference) <= torch.finfo(dtype).eps * x.double().abs().max()
    # the tables asked for in half precision are rounded from float64, not computed in it
    cos, _ = rope.cos_sin(torch.tensor([4097]), 64, dtype=dtype)
    assert torch.equal(cos, rope.cos_sin(torch.tensor([4097]), 64, dtype=torch.float64)[0].to(dtype))


def test_sinusoidal_encoding_in_float16_is_the_rounded_float64_table():
    table = attnref.sinusoidal_positional_encoding(4100, 16, dtype=torch.float16)
    assert torch.equal(table, attnref.sinusoidal_positional_encoding(4100, 16).to(torch.float16))


def test_grouped_query_attention_positions_beyond_2048_in_float16():
    config = decoder.DecoderConfig(d=8, h=2, h_kv=1, d_k=4)
    g = torch.Generator().manual_seed(0)
    layer = decoder.DecoderLayerWeights(**{name: torch.randn(*shape, generator=g, dtype=torch.float64) * 0.3
                                           for name, shape in (("attention_norm", (8,)), ("w_q", (8, 8)),
                                                               ("w_k", (8, 4)), ("w_v", (8, 4)), ("w_o", (8, 8)),
                                                               ("ffn_norm", (8,)), ("w_gate", (8, 12)),
                                                               ("w_up", (8, 12)), ("w_down", (12, 8)))})
    x = torch.randn(1, 2100, 8, generator=g, dtype=torch.float64).to(torch.float16)
    ours = decoder.grouped_query_attention(x, weights=layer.to(dtype=torch.float16), config=config,
                                           causal=True).trace.rotated_key
    reference = decoder.grouped_query_attention(x.double(), weights=layer.to(dtype=torch.float16).to(dtype=torch.float64),
                                                config=config, causal=True).trace.rotated_key
    assert (ours.double() - reference).abs().max() <= 2 * torch.finfo(torch.float16).eps * reference.abs().max()


# --- the policy is stated where a reader looks ---------------------------------------------------

@pytest.mark.parametrize("function", [attnref.softmax, attnref.scaled_dot_product_attention, attnref.layer_norm,
                                      rope.rotate, decoder.rms_norm])
def test_half_precision_policy_is_in_the_docstring(function):
    assert "float32" in function.__doc__ and ("float16" in function.__doc__ or "half" in function.__doc__)
