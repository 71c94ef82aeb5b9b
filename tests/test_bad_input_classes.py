"""The reviewer's classes of bad input (issue #30, item 2): each gets a ValueError naming the
argument the caller passed (and the shapes), or a documented result — one test per class —
and a property test throws random wrong types and shapes at the public API."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnref
from attnref import MultiHeadWeights, counts, decoder, rope


def t(*shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype)


def r(seed: int, *shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def decoder_parts(d=8, h=4, h_kv=2, d_k=2, d_ff=12):
    config = decoder.DecoderConfig(d=d, h=h, h_kv=h_kv, d_k=d_k)
    shapes = {"attention_norm": (d,), "w_q": (d, h * d_k), "w_k": (d, h_kv * d_k), "w_v": (d, h_kv * d_k),
              "w_o": (h * d_k, d), "ffn_norm": (d,), "w_gate": (d, d_ff), "w_up": (d, d_ff), "w_down": (d_ff, d)}
    return config, decoder.DecoderLayerWeights(**{k: r(i, *s) for i, (k, s) in enumerate(shapes.items())})


# --- raw exceptions become ValueErrors --------------------------------------------------------------

@pytest.mark.parametrize("dim, message", [(5, r"dim = 5 is out of range for logits of shape \(2, 3\)"),
                                          ("a", r"dim must be an int axis of logits \(2, 3\), got 'a'"),
                                          (True, "dim must be an int axis")])
def test_softmax_dim(dim, message):
    with pytest.raises(ValueError, match=message):
        attnref.softmax(t(2, 3), dim=dim)


def test_meta_tensors_give_shapes_only():
    """Documented: a meta tensor has no values, so value checks are skipped and the result is meta."""
    meta = dict(dtype=torch.float64, device="meta")
    assert attnref.softmax(torch.ones(2, 3, **meta)).shape == (2, 3)
    result = attnref.scaled_dot_product_attention(torch.ones(2, 4, **meta), torch.ones(3, 4, **meta),
                                                  torch.ones(3, 5, **meta), causal=True)
    assert result.output.device.type == "meta" and result.output.shape == (2, 5)
    assert attnref.layer_norm(torch.ones(2, 4, **meta), attnref.LayerNormParams(eps=0.0)).shape == (2, 4)
    assert attnref.cosine_scores(torch.ones(2, 4, **meta), torch.ones(3, 4, **meta)).shape == (2, 3)
    assert rope.rotate(torch.ones(3, 4, **meta)).shape == (3, 4)
    assert decoder.rms_norm(torch.ones(3, 4, **meta), eps=0.0).shape == (3, 4)


def test_additive_scores_activation_must_be_callable():
    with pytest.raises(ValueError, match=r"activation must be a callable such as torch.tanh, got 'tanh' \(str\)"):
        attnref.additive_scores(t(2, 4), t(3, 4), w_query=t(4, 2), w_key=t(4, 2), v=t(2), activation="tanh")


@pytest.mark.parametrize("slope, message", [("0.2", "negative_slope must be a real number, got '0.2'"),
                                            (float("nan"), "negative_slope must be finite, got nan")])
def test_gat_negative_slope(slope, message):
    with pytest.raises(ValueError, match=message):
        attnref.gat_scores(t(3, 4), weight=t(4, 2), a=t(4), negative_slope=slope)
    with pytest.raises(ValueError, match=message):
        attnref.gatv2_scores(t(3, 4), weight=t(8, 2), a=t(2), negative_slope=slope)


@pytest.mark.parametrize("kwargs, message", [(dict(d_k=-1), "d_k must be a positive int, got -1"),
                                             (dict(d_v=2.5), "d_v must be a positive int, got 2.5"),
                                             (dict(dtype=torch.int64), "dtype must be a floating torch.dtype"),
                                             (dict(bias="no"), "bias must be True or False, got 'no'")])
def test_multi_head_weights_random_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadWeights.random(8, 2, **kwargs)


def test_from_torch_of_the_wrong_module():
    with pytest.raises(ValueError, match="module must be MultiheadAttention, got Linear"):
        MultiHeadWeights.from_torch(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="layer must be TransformerEncoderLayer, got Linear"):
        attnref.EncoderLayer.from_torch(torch.nn.Linear(4, 4))


def test_feed_forward_given_a_tuple():
    ffn = attnref.FeedForward.random(4, 8)
    with pytest.raises(ValueError, match="ffn must be FeedForward, got tuple"):
        attnref.feed_forward(t(3, 4), (ffn.w_1, ffn.b_1, ffn.w_2, ffn.b_2))


def test_stack_layers_given_one_layer():
    layer = attnref.EncoderLayer.random(8, 2, 16)
    with pytest.raises(ValueError, match=r"weights must be a list or tuple .* got EncoderLayer \(one layer: pass \[layer\]\)"):
        attnref.stack_layers(t(3, 8), weights=layer)
    with pytest.raises(ValueError, match=r"weights\[1\] must be an attnref.EncoderLayer, got str"):
        attnref.stack_layers(t(3, 8), weights=[layer, "layer"])


def test_transformer_parameter_count_of_a_name():
    with pytest.raises(ValueError, match="config must be TransformerConfig, got str"):
        attnref.transformer_parameter_count("base")


def test_swiglu_with_mixed_dtypes():
    with pytest.raises(ValueError, match=r"inputs must share one dtype, got x: torch.float64 \(3, 4\), "
                                         r"w_gate: torch.float32 \(4, 6\)"):
        decoder.swiglu(t(3, 4), t(4, 6, dtype=torch.float32), t(4, 6), t(6, 4))


def test_grouped_query_attention_with_a_dict_layer():
    config, _ = decoder_parts()
    with pytest.raises(ValueError, match="weights must be DecoderLayerWeights, got dict"):
        decoder.grouped_query_attention(t(3, 8), weights={}, config=config)
    with pytest.raises(ValueError, match="config must be DecoderConfig, got dict"):
        decoder.decoder_block(t(3, 8), weights=decoder_parts()[1], config={})


# --- silent nonsense becomes a ValueError or a documented result ------------------------------------

@pytest.mark.parametrize("size", [1e154, 1e300, 1e-160, 1e-310])
def test_cosine_scores_of_huge_and_tiny_rows(size):
    """‖x‖ squared the entries: norms ≥ 1e154 overflowed (cosine 0 instead of 0.93), tiny rows underflowed."""
    q, k = torch.tensor([[1.0, 2.0, 2.0]], dtype=torch.float64), torch.tensor([[2.0, 1.0, 2.0]], dtype=torch.float64)
    expected = attnref.cosine_scores(q, k)                            # 8/9
    assert math.isclose(float(expected), 8 / 9, rel_tol=1e-15)
    assert torch.allclose(attnref.cosine_scores(q * size, k * size), expected, rtol=1e-12, atol=0)


def test_gat_nonlinearity_must_be_a_bool():
    with pytest.raises(ValueError, match="nonlinearity must be True or False, got 'no'"):
        attnref.gat_scores(t(3, 4), weight=t(4, 2), a=t(4), nonlinearity="no")


def test_per_head_mask_cannot_be_confused_with_the_batch():
    """(h, n, m) with input (B, n, d) and B == h was applied per batch element, silently."""
    weights, x = MultiHeadWeights.random(8, 2), r(0, 2, 5, 8)
    per_head = torch.ones(2, 5, 5, dtype=torch.bool).tril()
    per_head[1] = True                                                # head 0 causal, head 1 sees all
    with pytest.raises(ValueError, match=r"mask of shape \(2, 5, 5\) with query \(2, 5, 8\) is ambiguous: .* "
                                         r"\(1, 2, 5, 5\) .* \(2, 1, 5, 5\)"):
        attnref.multi_head_attention(x, weights=weights, mask=per_head)
    spelled = attnref.multi_head_attention(x, weights=weights, mask=per_head[None])          # (1, h, n, m): per head
    assert torch.equal(spelled.weights[:, 0].triu(1), torch.zeros(2, 5, 5, dtype=torch.float64))
    assert (spelled.weights[:, 1] > 0).all()
    packed = attnref.multi_head_attention_packed(x, weights=weights, mask=per_head[None])
    assert torch.allclose(packed.weights, spelled.weights, atol=1e-12)


@pytest.mark.parametrize("make", [lambda: attnref.FeedForward.random(4, 8, bias="no"),
                                  lambda: attnref.EncoderLayer.random(8, 2, 16, norm_first="no"),
                                  lambda: counts.attention_parameter_count(8, 2, bias="no")])
def test_bias_and_flags_must_be_real_bools(make):
    with pytest.raises(ValueError, match="must be True or False, got 'no'"):
        make()


def test_sinusoidal_encoding_of_an_integer_dtype():
    with pytest.raises(ValueError, match="dtype must be a floating torch.dtype, got torch.int64"):
        attnref.sinusoidal_positional_encoding(4, 8, dtype=torch.int64)


@pytest.mark.parametrize("call, message", [
    (lambda: counts.feed_forward_parameter_count(-8, 16), "d must be a positive int, got -8"),
    (lambda: counts.layer_norm_parameter_count(-1), "d must be a positive int, got -1"),
    (lambda: counts.encoder_layer_parameter_count(8, 2, -16), "d_ff must be a positive int, got -16"),
    (lambda: counts.attention_parameter_count(8, 2, d_k=-4), "d_k must be a positive int, got -4"),
    (lambda: counts.TransformerConfig(d=-512), "d must be a positive int, got -512"),
    (lambda: counts.TransformerConfig(bias="no"), "bias must be True or False"),
    (lambda: counts.feed_forward_parameter_count(8, 16, bias="no"), "bias must be True or False")])
def test_counts_with_negative_sizes_or_a_truthy_bias(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_rope_refuses_nan():
    """Decision: RoPE raises on NaN or ±inf in x (attnref does not propagate NaN); positions too."""
    x = t(3, 4)
    x[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"x contains NaN \(shape \(3, 4\)\)"):
        rope.rotate(x)
    with pytest.raises(ValueError, match="positions must be finite"):
        rope.rotate(t(3, 4), torch.tensor([0.0, float("nan"), 2.0]))


def test_rms_norm_of_a_zero_row_without_eps():
    """Decision: like layer_norm's constant row, 0/0 raises; with eps > 0 a zero row maps to 0;
    NaN in x raises."""
    x = t(2, 4)
    x[1] = 0
    with pytest.raises(ValueError, match=r"x of shape \(2, 4\) has a zero row: RMSNorm with eps = 0"):
        decoder.rms_norm(x, eps=0.0)
    assert torch.equal(decoder.rms_norm(x, eps=1e-6)[1], torch.zeros(4, dtype=torch.float64))
    x[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"x contains NaN"):
        decoder.rms_norm(x)


# --- misleading errors name what the caller passed --------------------------------------------------

def test_overflowing_scores_are_not_called_logits():
    q = t(2, 4) * 1e200
    with pytest.raises(ValueError, match=r"the scores query @ keyᵀ · scale \(query \(2, 4\), key \(3, 4\), "
                                         r"scale = 0.5\) overflow torch.float64"):
        attnref.scaled_dot_product_attention(q, q[:1].expand(3, 4), t(3, 2))
    with pytest.raises(ValueError, match=r"the scores x @ xᵀ \(x \(2, 4\)\) overflow"):
        attnref.parameter_free_self_attention(q)
    with pytest.raises(ValueError, match=r"beta times the cosine scores .* overflow torch.float32"):
        attnref.cosine_attention(t(2, 4, dtype=torch.float32), t(3, 4, dtype=torch.float32),
                                 t(3, 2, dtype=torch.float32), beta=1e39)


def test_a_denormal_row_is_not_a_zero_row():
    tiny = torch.full((1, 4), 1e-310, dtype=torch.float64)
    assert torch.allclose(attnref.cosine_scores(tiny, t(2, 4)), t(1, 2), rtol=1e-12)
    with pytest.raises(ValueError, match=r"key of shape \(2, 4\) has a zero row \(every entry exactly 0\)"):
        attnref.cosine_scores(t(1, 4), torch.zeros(2, 4, dtype=torch.float64))


def test_layer_errors_name_x_not_query():
    layer = attnref.EncoderLayer.random(8, 2, 16)
    for run in (attnref.post_ln_layer, attnref.pre_ln_layer, attnref.encoder_layer):
        with pytest.raises(ValueError, match=r"x must have a floating dtype .* got torch.int64"):
            run(t(3, 8, dtype=torch.int64), weights=layer)
        with pytest.raises(ValueError, match=r"x has shape \(3, 6\), expected width d = 8 of the layer"):
            run(t(3, 6), weights=layer)


def test_decoder_block_names_ffn_norm_not_gain():
    config, layer = decoder_parts()     # the weights are frozen and validated when built
    with pytest.raises(ValueError, match=r"ffn_norm has shape \(5,\), expected \(8,\)"):
        dataclasses.replace(layer, ffn_norm=t(5))
    with pytest.raises(ValueError, match=r"attention_norm has shape \(5,\), expected \(8,\)"):
        dataclasses.replace(layer, attention_norm=t(5))
    with pytest.raises(ValueError, match=r"ffn_norm has shape \(5,\), expected \(8,\) for x"):
        decoder._rms_norm(r(0, 3, 8), t(5), 1e-6, "ffn_norm")   # the name reaches the norm's own check


def test_trainable_layer_names_weights_not_layer():
    with pytest.raises(ValueError, match="weights must be an attnref.EncoderLayer, got dict"):
        attnref.TrainableLayer({})


def test_cosine_attention_accepts_a_zero_key_that_key_mask_removes():
    keys = r(0, 3, 4)
    keys[2] = 0
    result = attnref.cosine_attention(r(1, 2, 4), keys, r(2, 3, 2), beta=2.0,
                                      key_mask=torch.tensor([True, True, False]))
    assert torch.equal(result.weights[:, 2], torch.zeros(2, dtype=torch.float64))
    reference = attnref.cosine_attention(r(1, 2, 4), keys[:2], r(2, 3, 2)[:2], beta=2.0)
    assert torch.allclose(result.output, reference.output, atol=1e-15)
    with pytest.raises(ValueError, match="key of shape \\(3, 4\\) has a zero row"):
        attnref.cosine_attention(r(1, 2, 4), keys, r(2, 3, 2), key_mask=torch.tensor([True, False, True]))


# --- property: random wrong arguments get a ValueError or a documented result -----------------------

def _valid_calls():
    """Each public function with valid arguments, as (name, function, args, kwargs)."""
    config, layer = decoder_parts()
    weights, enc = MultiHeadWeights.random(8, 2), attnref.EncoderLayer.random(8, 2, 16)
    q, k, v, x = r(0, 2, 4), r(1, 3, 4), r(2, 3, 2), r(3, 3, 8)
    return [
        ("softmax", attnref.softmax, [r(4, 2, 3)], {"dim": -1}),
        ("sdpa", attnref.scaled_dot_product_attention, [q, k, v], {"mask": None, "causal": False, "scale": None}),
        ("attention_from_scores", attnref.attention_from_scores, [r(5, 2, 3), v], {"causal": False}),
        ("luong_dot", attnref.luong_dot_scores, [q, k], {}),
        ("luong_general", attnref.luong_general_scores, [q, k], {"weight": r(6, 4, 4)}),
        ("additive", attnref.additive_scores, [q, k], {"w_query": r(7, 4, 2), "w_key": r(8, 4, 2), "v": r(9, 2),
                                                        "activation": torch.tanh}),
        ("cosine_scores", attnref.cosine_scores, [q, k], {}),
        ("cosine_attention", attnref.cosine_attention, [q, k, v], {"beta": 1.0, "key_mask": None}),
        ("parameter_free", attnref.parameter_free_self_attention, [x], {"causal": False}),
        ("linear", attnref.linear_attention, [q, k, v], {"mask": None}),
        ("gat", attnref.gat_scores, [q], {"weight": r(10, 4, 2), "a": r(11, 4), "negative_slope": 0.2, "nonlinearity": True}),
        ("gatv2", attnref.gatv2_scores, [q], {"weight": r(12, 8, 2), "a": r(13, 2), "negative_slope": 0.2}),
        ("mha", attnref.multi_head_attention, [x], {"weights": weights, "mask": None, "key_mask": None, "causal": False}),
        ("mha_packed", attnref.multi_head_attention_packed, [x], {"weights": weights, "mask": None, "causal": False}),
        ("mhw_random", MultiHeadWeights.random, [8, 2], {"d_k": None, "bias": True, "dtype": torch.float64}),
        ("layer_norm", attnref.layer_norm, [x], {"params": None}),
        ("layer_norm_params", attnref.LayerNormParams, [], {"gain": None, "bias": None, "eps": 1e-5}),
        ("feed_forward", attnref.feed_forward, [x, enc.ffn], {}),
        ("ffn_random", attnref.FeedForward.random, [8, 16], {"activation": "relu", "bias": True}),
        ("post_ln", attnref.post_ln_layer, [x], {"weights": enc, "mask": None, "causal": False}),
        ("pre_ln", attnref.pre_ln_layer, [x], {"weights": enc, "key_mask": None}),
        ("causal_pre_ln", attnref.pre_ln_layer, [x], {"weights": enc, "mask": None, "causal": True}),
        ("stack", attnref.stack_layers, [x], {"weights": [enc], "causal": False, "variant": None}),
        ("encoder_layer", attnref.encoder_layer, [x], {"weights": enc, "variant": "attention + FFN"}),
        ("encoder_random", attnref.EncoderLayer.random, [8, 2, 16], {"norm_first": False}),
        ("sinusoidal", attnref.sinusoidal_positional_encoding, [4, 8], {"dtype": torch.float64}),
        ("attention_count", attnref.attention_parameter_count, [8, 2], {"d_k": None, "bias": True}),
        ("encoder_count", attnref.encoder_layer_parameter_count, [8, 2, 16], {"bias": True}),
        ("transformer_count", attnref.transformer_parameter_count, [attnref.TransformerConfig()], {}),
        ("rope_rotate", rope.rotate, [r(14, 3, 4)], {"positions": None, "base": 10000.0}),
        ("rope_cos_sin", rope.cos_sin, [torch.arange(3), 4], {"base": 10000.0}),
        ("rope_matrix", rope.rotation_matrix, [2, 4], {"base": 10000.0}),
        ("rms_norm", decoder.rms_norm, [x], {"gain": None, "eps": 1e-6}),
        ("swiglu", decoder.swiglu, [x, layer.w_gate, layer.w_up, layer.w_down], {}),
        ("gqa", decoder.grouped_query_attention, [x], {"weights": layer, "config": config, "positions": None,
                                                        "key_mask": None, "causal": True}),
        ("decoder_block", decoder.decoder_block, [x], {"weights": layer, "config": config, "positions": None,
                                                       "mask": None, "causal": True}),
    ]


CALLS = _valid_calls()
WRONG = [None, "a", "no", 2.5, -1, 0, True, float("nan"), float("inf"), [1.0, 2.0], (3,), {}, object(),
         torch.float16, torch.int64, torch.tensor(1), torch.ones(3, dtype=torch.int64),
         torch.ones(2, dtype=torch.bool), torch.ones(5, 7, dtype=torch.float64),
         torch.ones(2, 3, 4, 5, dtype=torch.float32), torch.full((3, 8), float("nan"), dtype=torch.float64),
         torch.ones(3, 8, dtype=torch.float64, device="meta"), torch.zeros(3, 8, dtype=torch.float64),
         torch.empty(0, 8, dtype=torch.float64), torch.ones(3, 8, dtype=torch.float16),
         torch.ones(3, 8, dtype=torch.bool), torch.full((3, 8), -1e300, dtype=torch.float64), 10**30,
         MultiHeadWeights.random(4, 2), attnref.EncoderLayer.random(4, 2, 8)]


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    return []


@settings(max_examples=600)
@given(call=st.sampled_from(range(len(CALLS))), slot=st.integers(0, 7), wrong=st.sampled_from(range(len(WRONG))))
def test_wrong_arguments_get_a_value_error_or_a_documented_result(call, slot, wrong):
    """One argument of a valid call replaced by a wrong type, shape, dtype or value: the call raises
    ValueError, or returns (the replacement was acceptable, e.g. ``None`` for an optional mask, a
    meta tensor — shapes only — or an empty batch) with no NaN in any tensor it returns."""
    name, function, args, kwargs = CALLS[call]
    args, kwargs = list(args), dict(kwargs)
    slots = [("arg", i) for i in range(len(args))] + [("kw", key) for key in kwargs]
    kind, where = slots[slot % len(slots)]
    if kind == "arg":
        args[where] = WRONG[wrong]
    else:
        kwargs[where] = WRONG[wrong]
    try:
        result = function(*args, **kwargs)
    except ValueError:
        return
    for tensor in _tensors(result if isinstance(result, (tuple, list)) else [result]):
        if tensor.device.type != "meta" and tensor.is_floating_point():
            assert not torch.isnan(tensor).any(), f"{name} returned NaN with {WRONG[wrong]!r} at {where}"
