"""attnref.analysis.depth: the measurements of chapter 7 against explicit computations and
attnref's own layers (one draw at a time), on small sizes."""

from __future__ import annotations

import math

import pytest
import torch

import attnref
from attnref.analysis import depth
from attnref.layers import named_tensors, replace_tensors


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


def stack(gen, depth_=3, draws=3, d=8, h=2, d_ff=16, bias=True):
    return depth.Stack.random(depth_, draws, d, h, d_ff, bias=bias, generator=gen)


def test_relative_residual_is_zero_for_identical_tokens_and_scale_free(gen):
    x = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    same = x[:1].expand(5, 6)
    assert depth.relative_residual(same).item() == pytest.approx(0, abs=1e-15)
    centred = x - x.mean(0)
    expected = centred.norm() / x.norm()
    assert depth.relative_residual(x).item() == pytest.approx(expected.item(), rel=1e-14)
    assert depth.relative_residual(3.5 * x).item() == pytest.approx(expected.item(), rel=1e-14)
    assert depth.relative_residual(torch.stack([x, same[:4]])).shape == (2,)


def test_mean_pairwise_cosine_and_mean_share():
    eye = torch.eye(4, dtype=torch.float64)
    assert depth.mean_pairwise_cosine(eye).item() == pytest.approx(0, abs=1e-15)
    ones = torch.ones(3, 5, dtype=torch.float64)
    assert depth.mean_pairwise_cosine(ones).item() == pytest.approx(1)
    assert depth.mean_token_share(ones).item() == pytest.approx(1)
    pair = torch.tensor([[1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    assert depth.mean_pairwise_cosine(pair).item() == pytest.approx(-1)
    assert depth.mean_token_share(pair).item() == pytest.approx(0)


def test_random_stack_states_its_initialisation():
    big = depth.Stack.random(1, 400, 16, 2, 64, generator=torch.Generator().manual_seed(0))
    layer = big.layers[0]
    assert layer.batch_shape == (400,) and layer.attention.w_q.shape == (400, 2, 16, 8)
    assert layer.attention.w_o.shape == (400, 16, 16)
    for name, variance in (("attention.w_q", 1 / 16), ("attention.w_o", 1 / 16), ("attention.b_v", 1 / 16),
                           ("ffn.w_1", 1 / 16), ("ffn.w_2", 1 / 64)):
        assert named_tensors(layer)[name].var().item() == pytest.approx(variance, rel=0.05), name
    assert layer.ffn.b_1 is None and layer.norm_1.gain is None and layer.norm_1.eps == 1e-5
    assert not depth.Stack.random(2, 3, 8, 2, 16, bias=False).bias
    with pytest.raises(ValueError):
        depth.Stack.random(2, 3, 9, 2, 16)
    with pytest.raises(ValueError, match="one batch axis"):
        depth.Stack((attnref.EncoderLayer.random(8, 2, 16),))


def test_random_stack_draws_the_numbers_it_always_drew():
    """The draws keep their order (w_q, w_k, w_v, w_o, biases, w_1, w_2, each for every layer and
    draw at once): chapter 7's stored numbers depend on it."""
    g = torch.Generator().manual_seed(3)
    s = depth.Stack.random(2, 3, 8, 2, 16, generator=g)
    g = torch.Generator().manual_seed(3)
    draws = [torch.randn(2, 3, *shape, generator=g, dtype=torch.float64) * fan_in ** -0.5
             for shape, fan_in in (((2, 8, 4), 8), ((2, 8, 4), 8), ((2, 8, 4), 8), ((8, 8), 8), ((2, 4), 8),
                                   ((2, 4), 8), ((2, 4), 8), ((8,), 8), ((8, 16), 8), ((16, 8), 16))]
    names = ("attention.w_q", "attention.w_k", "attention.w_v", "attention.w_o", "attention.b_q",
             "attention.b_k", "attention.b_v", "attention.b_o", "ffn.w_1", "ffn.w_2")
    for l in range(2):
        tensors = named_tensors(s.layers[l])
        assert all(torch.equal(tensors[name], drawn[l]) for name, drawn in zip(names, draws))


@pytest.mark.parametrize("bias", [True, False])
def test_a_batched_stack_is_attnref_s_layers_draw_by_draw(gen, bias):
    """Every variant, run on the batch, equals attnref's layer run on one draw at a time (a
    draw paired with another draw's weights, or a bias shared across draws, fails)."""
    s = stack(gen, bias=bias)
    x = torch.randn(3, 5, 8, generator=gen, dtype=torch.float64)
    for variant in attnref.blocks.VARIANTS:
        hidden = depth.run(x, s, variant)
        assert len(hidden) == 4
        for b in (0, 2):
            reference = attnref.stack_layers(x[b], weights=[s.layer(i, b) for i in range(3)], variant=variant)
            for ours, theirs in zip(hidden, reference.trace.hidden):
                torch.testing.assert_close(ours[b], theirs, rtol=0, atol=1e-12)


def test_relu_after_the_sums_and_final_norm(gen):
    s = stack(gen, depth_=2)
    x = torch.randn(3, 4, 8, generator=gen, dtype=torch.float64)
    out = depth.run(x, s, "pre-LN, ReLU after the sums")[-1]
    assert (out >= 0).all()
    layer = s.layers[0]

    def sa(t):
        return attnref.multi_head_attention(t, weights=layer.attention).output
    y = torch.relu(x + sa(attnref.layer_norm(x)))
    z = torch.relu(y + attnref.feed_forward(attnref.layer_norm(y), layer.ffn))
    torch.testing.assert_close(depth.run(x, s.first(1), "pre-LN, ReLU after the sums")[-1], z, rtol=0, atol=1e-12)
    normed = depth.run(x, s, "pre-LN", final_norm=True)
    assert len(normed) == 4
    torch.testing.assert_close(normed[-1], attnref.layer_norm(normed[-2]))
    with pytest.raises(ValueError, match="unknown variant"):
        depth.run(x, s, "attention + magic")


def test_first_keeps_the_draws(gen):
    s = stack(gen, depth_=4)
    cut = s.first(2)
    assert cut.depth == 2 and cut.draws == 3
    assert cut.layers == s.layers[:2]


def test_collapse_recursion_follows_the_direct_residual_and_goes_past_round_off(gen):
    s = stack(gen, depth_=10, draws=4, d=8, h=2, bias=False)
    x = torch.randn(4, 6, 8, generator=gen, dtype=torch.float64)
    logs = depth.collapse_recursion(x, s)
    assert logs.shape == (11, 4)
    direct = torch.stack([depth.relative_residual(h) for h in depth.run(x, s, "attention")])
    resolved = direct > 1e-6
    assert resolved[:2].all()
    torch.testing.assert_close(logs.exp()[resolved], direct[resolved], rtol=1e-8, atol=0)
    assert (logs[-1] < -1000).all()                     # far below float64's floor
    growth = (-logs[-3:]).log()
    torch.testing.assert_close(growth[1:] - growth[:-1],
                               torch.full((2, 4), math.log(3), dtype=torch.float64),
                               rtol=0, atol=1e-3)
    with pytest.raises(ValueError, match="without biases"):
        depth.collapse_recursion(x, stack(gen, bias=True))


def test_layer_gradient_norms_match_autograd_through_attnref(gen):
    s = stack(gen, depth_=2, draws=2)
    x = torch.randn(2, 4, 8, generator=gen, dtype=torch.float64)
    target = torch.randn(2, 4, 8, generator=gen, dtype=torch.float64)
    norms = depth.layer_gradient_norms(x, s, "pre-LN", target, final_norm=True)
    assert norms.shape == (2, 2)
    for b in range(2):
        layers = [s.layer(i, b) for i in range(2)]
        leaves = [{k: t.clone().requires_grad_() for k, t in named_tensors(w).items()
                   if k.startswith("attention") or k in ("ffn.w_1", "ffn.w_2")}
                  for w in layers]
        h = x[b]
        for w, p in zip(layers, leaves):
            h = attnref.pre_ln_layer(h, weights=replace_tensors(w, p)).output
        out = attnref.layer_norm(h)
        grads = torch.autograd.grad(0.5 * ((out - target[b]) ** 2).sum(),
                                    [t for p in leaves for t in p.values()])
        per_layer = len(leaves[0])
        for i in range(2):
            square = sum(g.pow(2).sum() for g in grads[i * per_layer:(i + 1) * per_layer])
            assert norms[i, b].item() == pytest.approx(square.sqrt().item(), rel=1e-10)


def test_jacobian_is_the_per_draw_jacobian(gen):
    s = stack(gen, depth_=2, draws=2, d=4, h=2, d_ff=8)
    x = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    J = depth.jacobian(lambda z: depth.run(z, s, "pre-LN")[-1], x)
    assert J.shape == (2, 12, 12)
    for b in range(2):
        one = depth.Stack(tuple(attnref.layers.select(layer, (slice(b, b + 1),)) for layer in s.layers))
        single = torch.autograd.functional.jacobian(lambda z: depth.run(z[None], one, "pre-LN")[-1][0], x[b])
        torch.testing.assert_close(J[b], single.reshape(12, 12), rtol=0, atol=1e-12)


@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_skip_recursion_follows_the_direct_skip_stack(gen, scale):
    s = stack(gen, depth_=6, bias=False)
    x = torch.randn(3, 5, 8, generator=gen, dtype=torch.float64)
    hidden = [x]
    for index in range(6):
        attended = attnref.multi_head_attention(hidden[-1], weights=s.layers[index].attention).output
        hidden.append(hidden[-1] + scale * attended)
    direct = torch.stack([depth.relative_residual(h) for h in hidden])
    torch.testing.assert_close(depth.skip_recursion(x, s, scale).exp(), direct, rtol=1e-10, atol=0)
    with pytest.raises(ValueError):
        depth.skip_recursion(x, stack(gen, bias=True))


def test_layer_gradient_norms_of_named_tensors(gen):
    s = stack(gen, bias=False)
    x = torch.randn(3, 5, 8, generator=gen, dtype=torch.float64)
    t = torch.randn(3, 5, 8, generator=gen, dtype=torch.float64)
    every = depth.layer_gradient_norms(x, s, "attention + skip", t)
    qk = depth.layer_gradient_norms(x, s, "attention + skip", t, names=("attention.w_q", "attention.w_k"))
    vo = depth.layer_gradient_norms(x, s, "attention + skip", t, names=("attention.w_v", "attention.w_o"))
    torch.testing.assert_close(qk ** 2 + vo ** 2, every ** 2, rtol=1e-12, atol=0)
    assert (qk > 0).all() and (qk < every).all()
    with pytest.raises(ValueError, match="names must be among"):
        depth.layer_gradient_norms(x, s, "attention + skip", t, names=("w_q",))
