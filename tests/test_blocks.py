"""attnref.blocks (post-LN, pre-LN, causal decoder-only layers, the variants, batches of layers)
against torch.nn.TransformerEncoderLayer and against each other.

Same weights in both (read with ``EncoderLayer.from_torch``), float64, dropout 0; torch's
module stays in training mode, so it takes its ordinary (not the fused "fast path") route.
Gradients of the same layers are compared in tests/test_gradients.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import attnref
from conftest import PARITY_ATOL, randn


def torch_layer(gen, d=16, h=4, d_ff=32, norm_first=True, activation="relu", scale=0.3):
    """A torch layer with every parameter drawn from the test's own generator (no global seed)."""
    layer = torch.nn.TransformerEncoderLayer(d, h, d_ff, dropout=0.0, activation=activation, batch_first=True,
                                             norm_first=norm_first, dtype=torch.float64)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.copy_(randn(gen, *parameter.shape) * scale)
        layer.norm1.weight.add_(1.0)
        layer.norm2.weight.add_(1.0)
    return layer


def padding(batch: int, n: int, lengths: list[int]) -> torch.Tensor:
    key_mask = torch.zeros(batch, n, dtype=torch.bool)
    for row, length in enumerate(lengths):
        key_mask[row, :length] = True
    return key_mask


def causal_torch_mask(n: int) -> torch.Tensor:
    """torch's boolean convention: True = may NOT attend (the keys after the query)."""
    return torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_pre_ln_layer_matches_torch_with_padding(gen, activation):
    layer = torch_layer(gen, activation=activation)
    x = randn(gen, 3, 6, 16)
    key_mask = padding(3, 6, [6, 4, 1])
    ours = attnref.pre_ln_layer(x, weights=attnref.EncoderLayer.from_torch(layer), key_mask=key_mask)
    expected = layer(x, src_key_padding_mask=~key_mask)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_encoder_layer_runs_the_placement_of_its_flag(gen):
    for norm_first in (True, False):
        layer = torch_layer(gen, norm_first=norm_first)
        ours = attnref.EncoderLayer.from_torch(layer)
        assert ours.norm_first is norm_first
        x = randn(gen, 2, 5, 16)
        assert (attnref.encoder_layer(x, weights=ours).output - layer(x)).abs().max() < PARITY_ATOL


def test_pre_and_post_ln_differ_on_the_same_weights(gen):
    """The flag is not ignored: one set of weights, two placements, two functions."""
    weights = attnref.EncoderLayer.from_torch(torch_layer(gen))
    x = randn(gen, 5, 16)
    pre = attnref.pre_ln_layer(x, weights=weights).output
    post = attnref.post_ln_layer(x, weights=weights).output
    assert (pre - post).abs().max() > 1e-3
    assert torch.equal(post, attnref.encoder_layer(x, weights=dataclasses.replace(weights, norm_first=False)).output)


@pytest.mark.parametrize("with_padding", [False, True])
def test_causal_pre_ln_layer_matches_torch_with_a_causal_mask(gen, with_padding):
    """The decoder-only (GPT) layer is pre_ln_layer(causal=True)."""
    layer = torch_layer(gen)
    x = randn(gen, 2, 7, 16)
    key_mask = padding(2, 7, [7, 5]) if with_padding else None
    ours = attnref.pre_ln_layer(x, weights=attnref.EncoderLayer.from_torch(layer), key_mask=key_mask, causal=True)
    expected = layer(x, src_mask=causal_torch_mask(7), is_causal=True,
                     src_key_padding_mask=None if key_mask is None else ~key_mask)
    assert (ours.output - expected).abs().max() < PARITY_ATOL
    assert (ours.weights.triu(diagonal=1) == 0).all()


def test_causal_layer_output_depends_on_earlier_tokens_only(gen):
    weights = attnref.EncoderLayer.from_torch(torch_layer(gen))
    x = randn(gen, 6, 16)
    changed = x.clone()
    changed[4:] = randn(gen, 2, 16)
    a = attnref.pre_ln_layer(x, weights=weights, causal=True).output
    b = attnref.pre_ln_layer(changed, weights=weights, causal=True).output
    assert torch.equal(a[:4], b[:4]) and (a[4:] - b[4:]).abs().max() > 1e-3


def test_post_ln_layer_with_per_head_mask_matches_torch(gen):
    """A (b·h, n, m) boolean attn_mask in torch is attnref's per-head mask (b, h, n, m)."""
    layer = torch_layer(gen, norm_first=False)
    x = randn(gen, 2, 5, 16)
    keep = torch.rand(2, 4, 5, 5, generator=gen) > 0.3
    keep[..., 0] = True
    ours = attnref.post_ln_layer(x, weights=attnref.EncoderLayer.from_torch(layer), mask=keep)
    expected = layer(x, src_mask=~keep.reshape(8, 5, 5))
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_stack_applies_the_layers_in_turn(gen):
    layers = [attnref.EncoderLayer.random(8, 2, 16, generator=gen) for _ in range(3)]
    x = randn(gen, 4, 8)
    result = attnref.stack_layers(x, weights=layers, variant="pre-LN")
    expected = x
    for layer in layers:
        expected = attnref.pre_ln_layer(expected, weights=layer).output
    assert len(result.trace.hidden) == 4 and len(result.trace.layers) == 3
    assert torch.equal(result.trace.hidden[0], x) and torch.equal(result.output, expected)
    assert torch.equal(result.weights, result.trace.layers[-1].weights)
    default = attnref.stack_layers(x, weights=layers)   # each layer's own flag: post-LN here
    y = x
    for layer in layers:
        y = attnref.post_ln_layer(y, weights=layer).output
    assert torch.equal(default.output, y)
    final = attnref.stack_layers(x, weights=layers, final_norm=attnref.LayerNormParams())
    assert torch.equal(final.output, attnref.layer_norm(default.output))


def test_encoder_layer_round_trips_through_torch(gen):
    for norm_first in (True, False):
        ours = attnref.EncoderLayer.random(8, 2, 16, norm_first=norm_first, activation="gelu", generator=gen)
        module = ours.to_torch()
        assert module.norm_first is norm_first
        x = randn(gen, 2, 5, 8)
        assert (attnref.encoder_layer(x, weights=ours).output - module(x)).abs().max() < PARITY_ATOL


def test_random_layer_states_its_initialisation(gen):
    layer = attnref.EncoderLayer.random(64, 4, 256, generator=gen)
    assert torch.equal(layer.norm_1.gain, torch.ones(64, dtype=torch.float64))
    assert torch.equal(layer.ffn.b_1, torch.zeros(256, dtype=torch.float64))
    # N(0, 1/d) and N(0, 1/d_ff): the sample variances are within a few percent (4096+ draws)
    assert abs(layer.ffn.w_1.var().item() * 64 - 1) < 0.1
    assert abs(layer.ffn.w_2.var().item() * 256 - 1) < 0.1


def test_blocks_reject_what_is_not_a_layer(gen):
    with pytest.raises(ValueError, match="weights must be an attnref.EncoderLayer, got dict"):
        attnref.pre_ln_layer(randn(gen, 3, 8), weights={})
    with pytest.raises(TypeError):      # the weights are keyword-only (the package's call shape)
        attnref.pre_ln_layer(randn(gen, 3, 8), attnref.EncoderLayer.random(8, 2, 16, generator=gen))
    with pytest.raises(ValueError, match="unknown variant 'pre'"):
        attnref.encoder_layer(randn(gen, 3, 8), weights=attnref.EncoderLayer.random(8, 2, 16, generator=gen),
                              variant="pre")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_trainable_layer_takes_torch_s_sgd_step(gen, norm_first):
    """One SGD step on attnref's module and on torch's layer, from the same weights and loss,
    lands on the same weights: the forward pass, the gradients and the parameter set all agree."""
    module = torch_layer(gen, d=8, h=2, d_ff=16, norm_first=norm_first)
    ours = attnref.TrainableLayer(attnref.EncoderLayer.from_torch(module))
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in module.parameters())
    x, target = randn(gen, 2, 5, 8), randn(gen, 2, 5, 8)
    key_mask = padding(2, 5, [5, 3])
    for net, kwargs in ((ours, {"key_mask": key_mask}), (module, {"src_key_padding_mask": ~key_mask})):
        optimiser = torch.optim.SGD(net.parameters(), lr=0.1)
        optimiser.zero_grad()
        output = net(x, **kwargs)
        ((getattr(output, "output", output) - target) ** 2).mean().backward()
        optimiser.step()
    after = attnref.EncoderLayer.from_torch(module)
    stepped = ours.weights()
    for name, tensor in attnref.layers.named_tensors(after).items():
        assert (attnref.layers.named_tensors(stepped)[name] - tensor).abs().max() < 1e-12, name


# --- the variants: one place, every layer the formula it names ----------------------------------
def test_every_variant_computes_its_formula(gen):
    """Each named variant against its formula written out with attnref's parts (a variant that
    dropped a skip, normalised in the other place or forgot its ReLU differs by O(1))."""
    layer = attnref.EncoderLayer.random(8, 2, 16, generator=gen)
    x = randn(gen, 2, 5, 8)

    def sa(t):
        return attnref.multi_head_attention(t, weights=layer.attention).output

    def ln(t, norm):
        return attnref.layer_norm(t, norm)

    def ffn(t):
        return attnref.feed_forward(t, layer.ffn)

    n1, n2 = layer.norm_1, layer.norm_2
    relu = torch.relu
    y_pre = x + sa(ln(x, n1))
    y_post = ln(x + sa(x), n1)
    expected = {
        "post-LN": ln(y_post + ffn(y_post), n2),
        "pre-LN": y_pre + ffn(ln(y_pre, n2)),
        "pre-LN, ReLU after the sums": relu(relu(y_pre) + ffn(ln(relu(y_pre), n2))),
        "post-LN, ReLU after the sums": relu(ln(relu(y_post) + ffn(relu(y_post)), n2)),
        "post-LN, ReLU inside the branches": ln(ln(x + sa(relu(x)), n1) + ffn(relu(ln(x + sa(relu(x)), n1))), n2),
        "attention": sa(x),
        "attention + skip": x + sa(x),
        "attention + FFN": ffn(sa(x)),
        "attention + LayerNorm": ln(sa(x), n1),
    }
    assert set(expected) == set(attnref.blocks.VARIANTS)
    for name, value in expected.items():
        got = attnref.encoder_layer(x, weights=layer, variant=name)
        assert (got.output - value).abs().max() < 1e-12, name
        assert got.weights.shape == (2, 2, 5, 5)


def test_trace_holds_the_intermediates(gen):
    layer = attnref.EncoderLayer.random(8, 2, 16, norm_first=True, generator=gen)
    x = randn(gen, 5, 8)
    result = attnref.pre_ln_layer(x, weights=layer)
    trace = result.trace
    assert torch.equal(trace.hidden, x + trace.attention_update)
    assert torch.equal(result.output, trace.hidden + trace.ffn_update)
    assert torch.equal(trace.attention.weights, result.weights)


def test_a_variant_s_attention_hook_replaces_the_attention(gen):
    """The extension point for other attentions (the training models'): Variant(attention=...)."""
    layer = attnref.EncoderLayer.random(8, 2, 16, generator=gen)
    x = randn(gen, 5, 8)
    calls = []

    def packed(t, *, weights, mask, key_mask, causal):
        calls.append(causal)
        return attnref.multi_head_attention_packed(t, weights=weights, mask=mask, key_mask=key_mask, causal=causal)

    hooked = attnref.Variant(norm="post", attention=packed)
    result = attnref.encoder_layer(x, weights=layer, variant=hooked, causal=True)
    reference = attnref.post_ln_layer(x, weights=layer, causal=True)
    assert calls == [True] and (result.output - reference.output).abs().max() < 1e-12
    module = attnref.TrainableLayer(layer, variant=hooked)
    assert (module(x, causal=True).output - result.output).abs().max() == 0
    with pytest.raises(ValueError, match="norm must be 'pre', 'post' or None"):
        attnref.Variant(norm="middle")
    with pytest.raises(ValueError, match="activation must be 'identity' or 'relu'"):
        attnref.Variant(activation="gelu")


# --- batches of layers ----------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["post-LN", "pre-LN", "pre-LN, ReLU after the sums", "attention + FFN"])
def test_a_batch_of_layers_is_each_layer_on_its_own_draw(gen, variant):
    """B layers stacked into batched weights and applied to x (B, n, d): draw b equals layer b
    applied to x[b] (a batch axis broadcast the wrong way, or a bias shared across draws, fails)."""
    layers = [attnref.EncoderLayer.random(8, 2, 16, generator=gen) for _ in range(4)]
    layers = [attnref.EncoderLayer(attention=l.attention, ffn=l.ffn, norm_first=False,
                                   norm_1=attnref.LayerNormParams(randn(gen, 8) + 1, randn(gen, 8)),
                                   norm_2=attnref.LayerNormParams(randn(gen, 8) + 1, randn(gen, 8))) for l in layers]
    batch = attnref.layers.stack_weights(layers)
    assert batch.batch_shape == (4,) and batch.attention.batch_shape == (4,)
    x = randn(gen, 4, 5, 8)
    together = attnref.encoder_layer(x, weights=batch, variant=variant)
    for b, layer in enumerate(layers):
        alone = attnref.encoder_layer(x[b], weights=layer, variant=variant)
        assert (together.output[b] - alone.output).abs().max() < 1e-12
        assert (together.weights[b] - alone.weights).abs().max() < 1e-12
        picked = attnref.layers.select(batch, b)
        assert torch.equal(picked.attention.w_q, layer.attention.w_q) and picked.batch_shape == ()


def test_batched_weights_are_validated(gen):
    layers = [attnref.EncoderLayer.random(8, 2, 16, generator=gen) for _ in range(3)]
    batch = attnref.layers.stack_weights(layers)
    with pytest.raises(ValueError, match="do not broadcast with"):
        attnref.encoder_layer(randn(gen, 2, 5, 8), weights=batch)          # 2 inputs, 3 layers
    with pytest.raises(ValueError, match="share one batch shape"):
        attnref.FeedForward(w_1=batch.ffn.w_1, b_1=None, w_2=batch.ffn.w_2[0], b_2=None)
    with pytest.raises(ValueError, match="expected"):
        attnref.MultiHeadWeights(w_q=batch.attention.w_q, w_k=batch.attention.w_k[:2], w_v=batch.attention.w_v,
                                 w_o=batch.attention.w_o)
    with pytest.raises(ValueError, match="one batch shape W"):
        attnref.EncoderLayer(attention=batch.attention, ffn=attnref.layers.stack_weights([l.ffn for l in layers[:2]]),
                             norm_1=layers[0].norm_1, norm_2=layers[0].norm_2)
    with pytest.raises(ValueError, match="to_torch converts one layer"):
        batch.to_torch()
    with pytest.raises(ValueError, match="differs from layers"):
        attnref.layers.stack_weights([layers[0], dataclasses.replace(layers[1], norm_first=True)])
    shared_norms = attnref.EncoderLayer(attention=batch.attention, ffn=batch.ffn, norm_1=attnref.LayerNormParams(),
                                        norm_2=attnref.LayerNormParams())   # unbatched parts are shared
    assert shared_norms.batch_shape == (3,)
    moved = batch.to(dtype=torch.float32)
    assert moved.attention.w_q.dtype == torch.float32 and moved.batch_shape == (3,)
