"""attnref.blocks (post-LN, pre-LN, causal decoder-only layers) against torch.nn.TransformerEncoderLayer.

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
    ours = attnref.pre_ln_layer(x, attnref.EncoderLayer.from_torch(layer), key_mask=key_mask)
    expected = layer(x, src_key_padding_mask=~key_mask)
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_encoder_layer_runs_the_placement_of_its_flag(gen):
    for norm_first in (True, False):
        layer = torch_layer(gen, norm_first=norm_first)
        ours = attnref.EncoderLayer.from_torch(layer)
        assert ours.norm_first is norm_first
        x = randn(gen, 2, 5, 16)
        assert (attnref.encoder_layer(x, ours) - layer(x)).abs().max() < PARITY_ATOL


def test_pre_and_post_ln_differ_on_the_same_weights(gen):
    """The flag is not ignored: one set of weights, two placements, two functions."""
    weights = attnref.EncoderLayer.from_torch(torch_layer(gen))
    x = randn(gen, 5, 16)
    pre = attnref.pre_ln_layer(x, weights).output
    post = attnref.post_ln_layer(x, weights).output
    assert (pre - post).abs().max() > 1e-3
    assert torch.equal(post, attnref.encoder_layer(x, dataclasses.replace(weights, norm_first=False)))


@pytest.mark.parametrize("with_padding", [False, True])
def test_decoder_layer_matches_torch_with_a_causal_mask(gen, with_padding):
    layer = torch_layer(gen)
    x = randn(gen, 2, 7, 16)
    key_mask = padding(2, 7, [7, 5]) if with_padding else None
    ours = attnref.decoder_layer(x, attnref.EncoderLayer.from_torch(layer), key_mask=key_mask)
    expected = layer(x, src_mask=causal_torch_mask(7), is_causal=True,
                     src_key_padding_mask=None if key_mask is None else ~key_mask)
    assert (ours.output - expected).abs().max() < PARITY_ATOL
    assert (ours.weights.triu(diagonal=1) == 0).all()


def test_decoder_output_depends_on_earlier_tokens_only(gen):
    weights = attnref.EncoderLayer.from_torch(torch_layer(gen))
    x = randn(gen, 6, 16)
    changed = x.clone()
    changed[4:] = randn(gen, 2, 16)
    a = attnref.decoder_layer(x, weights).output
    b = attnref.decoder_layer(changed, weights).output
    assert torch.equal(a[:4], b[:4]) and (a[4:] - b[4:]).abs().max() > 1e-3


def test_post_ln_layer_with_per_head_mask_matches_torch(gen):
    """A (b·h, n, m) boolean attn_mask in torch is attnref's per-head mask (b, h, n, m)."""
    layer = torch_layer(gen, norm_first=False)
    x = randn(gen, 2, 5, 16)
    keep = torch.rand(2, 4, 5, 5, generator=gen) > 0.3
    keep[..., 0] = True
    ours = attnref.post_ln_layer(x, attnref.EncoderLayer.from_torch(layer), mask=keep)
    expected = layer(x, src_mask=~keep.reshape(8, 5, 5))
    assert (ours.output - expected).abs().max() < PARITY_ATOL


def test_stack_applies_the_layers_in_turn(gen):
    layers = [attnref.EncoderLayer.random(8, 2, 16, generator=gen) for _ in range(3)]
    x = randn(gen, 4, 8)
    result = attnref.stack_layers(x, layers, norm_first=True)
    expected = x
    for layer in layers:
        expected = attnref.pre_ln_layer(expected, layer).output
    assert len(result.hidden) == 4 and len(result.weights) == 3
    assert torch.equal(result.hidden[0], x) and torch.equal(result.output, expected)
    default = attnref.stack_layers(x, layers)   # each layer's own flag: post-LN here
    assert torch.equal(default.output, attnref.post_ln_layer(attnref.post_ln_layer(attnref.post_ln_layer(
        x, layers[0]).output, layers[1]).output, layers[2]).output)


def test_encoder_layer_round_trips_through_torch(gen):
    for norm_first in (True, False):
        ours = attnref.EncoderLayer.random(8, 2, 16, norm_first=norm_first, activation="gelu", generator=gen)
        module = ours.to_torch()
        assert module.norm_first is norm_first
        x = randn(gen, 2, 5, 8)
        assert (attnref.encoder_layer(x, ours) - module(x)).abs().max() < PARITY_ATOL


def test_random_layer_states_its_initialisation(gen):
    layer = attnref.EncoderLayer.random(64, 4, 256, generator=gen)
    assert torch.equal(layer.norm_1.gain, torch.ones(64, dtype=torch.float64))
    assert torch.equal(layer.ffn.b_1, torch.zeros(256, dtype=torch.float64))
    # N(0, 1/d) and N(0, 1/d_ff): the sample variances are within a few percent (4096+ draws)
    assert abs(layer.ffn.w_1.var().item() * 64 - 1) < 0.1
    assert abs(layer.ffn.w_2.var().item() * 256 - 1) < 0.1


def test_blocks_reject_what_is_not_a_layer(gen):
    with pytest.raises(ValueError, match="layer must be an attnref.EncoderLayer, got dict"):
        attnref.pre_ln_layer(randn(gen, 3, 8), {})


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
        ((net(x, **kwargs) - target) ** 2).mean().backward()
        optimiser.step()
    after = attnref.EncoderLayer.from_torch(module)
    stepped = ours.weights()
    for name, tensor in attnref.layers.named_tensors(after).items():
        assert (attnref.layers.named_tensors(stepped)[name] - tensor).abs().max() < 1e-12, name
