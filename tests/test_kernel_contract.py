"""The kernel contract of attnref.multihead (issue 44 items 8 and 9), for every kernel attnref ships.

Item 9: ``need_weights=False`` broke the project's own kernels — ``qk_norm()`` and cosine attention
raised a raw ``TypeError`` for the keyword the hook passes, and ``vmap`` over ``need_weights=False``
a raw ``RuntimeError``. Every kernel of :func:`attnref.multihead.kernels` (a list that a test below
checks against the kernels found in the package by their call shape) goes through per-head and
packed multi-head attention, grouped-query attention and ``vmap``, with and without weights,
against the kernel called directly on each head (the hook is not its own oracle).

Item 8: the hook must give a kernel one layout and its head index. Per-head MHA (the default in
``encoder_layer`` and ``TrainableLayer``) used to pass ``(..., n, d_k)`` and packed MHA / GQA
``(..., h, n, d_k)``: an ALiBi kernel written once ran in the per-head loop with the heads taken
for a batch and was off by 0.39. Now the head axis is always −3 and a kernel that names ``heads``
gets the indices. An ALiBi kernel (slopes per head) is checked against a float64 formula written
out head by head through per-head MHA, packed MHA, GQA, a layer, and a training step's gradients.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil

import pytest
import torch

import attnref
from attnref import decoder, multihead

KERNELS = multihead.kernels()
TOLERANCE = 1e-12


def _generator(seed):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# The list of kernels is complete
# ------------------------------------------------------------------------------------------

def _looks_like_a_kernel(function) -> bool:
    """A public function with SDPA's call shape: (query, key, value) positional, mask and causal by keyword."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    names = list(parameters)
    rest = list(parameters.values())[3:]
    return (names[:3] == ["query", "key", "value"] and "mask" in parameters and "causal" in parameters
            and parameters["mask"].kind is inspect.Parameter.KEYWORD_ONLY
            and all(p.default is not inspect.Parameter.empty for p in rest))   # callable as f(q, k, v)


def test_every_kernel_in_the_package_is_listed():
    """fails_if: a new attention with SDPA's call shape is added to attnref without joining kernels()
    (and so without these tests)."""
    found = {}
    for info in pkgutil.walk_packages(attnref.__path__, "attnref."):
        if any(part in info.name for part in (".book", ".audit", ".models", ".training", ".analysis")):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isfunction(value) and not name.startswith("_") and value.__module__ == info.name
                    and _looks_like_a_kernel(value)):
                found[f"{info.name}.{name}"] = value
    listed = {id(f) for f in KERNELS.values()}
    missing = sorted(name for name, f in found.items() if id(f) not in listed)
    assert not missing, f"kernels not in attnref.multihead.kernels(): {missing}"
    assert len(found) >= 5


# ------------------------------------------------------------------------------------------
# Every shipped kernel through the hook, with and without weights (item 9)
# ------------------------------------------------------------------------------------------

def _heads_by_hand(x, w):
    """Per-head q_i, k_i, v_i = x W_i + b_i, written out (2-D per batch element: (B, n, d_k))."""
    return [(x @ w.w_q[i] + w.b_q[i], x @ w.w_k[i] + w.b_k[i], x @ w.w_v[i] + w.b_v[i]) for i in range(w.h)]


def _mha_by_hand(kernel, x, w, **masks):
    """Concat_i kernel(q_i, k_i, v_i).output W^O + b^O with the kernel called directly on each head."""
    outputs = [kernel(q, k, v, **masks).output for q, k, v in _heads_by_hand(x, w)]
    return torch.cat(outputs, -1) @ w.w_o + w.b_o


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("masks", ["none", "causal + key_mask"])
def test_each_kernel_through_per_head_and_packed_mha(name, need_weights, masks):
    """fails_if: a shipped kernel refuses need_weights (raw TypeError), the hook passes the heads in
    another layout than the kernel computes with, or drops the masks."""
    kernel = KERNELS[name]
    g = _generator(1)
    w = attnref.MultiHeadWeights.random(8, 2, generator=g)
    x = torch.randn(3, 5, 8, generator=g, dtype=torch.float64)
    kwargs = {}
    if masks != "none":
        key_mask = torch.ones(3, 5, dtype=torch.bool)
        key_mask[0, 3] = key_mask[2, 0] = False
        kwargs = {"causal": True, "key_mask": key_mask}
    by_hand_masks = {} if masks == "none" else {"causal": True, "key_mask": kwargs["key_mask"]}
    expected = _mha_by_hand(kernel, x, w, **by_hand_masks)
    for attend in (attnref.multi_head_attention, attnref.multi_head_attention_packed):
        result = attend(x, weights=w, attention=kernel, need_weights=need_weights, **kwargs)
        assert float((result.output - expected).abs().max()) < TOLERANCE, attend.__name__
        if not need_weights or name == "linear_attention":
            assert result.weights is None
        else:
            assert result.weights.shape == (3, 2, 5, 5)
            direct = torch.stack([kernel(q, k, v, **by_hand_masks).weights for q, k, v in _heads_by_hand(x, w)], 1)
            assert float((result.weights - direct).abs().max()) < TOLERANCE


@pytest.mark.parametrize("name", list(KERNELS))
def test_each_kernel_accepts_need_weights_false_directly(name):
    """The contract's keyword on the kernel itself. fails_if: TypeError (qk_norm(), cosine_attention before)."""
    kernel = KERNELS[name]
    q, k, v = (torch.randn(2, 4, 6, 4, generator=_generator(2), dtype=torch.float64) for _ in range(3))
    lean = kernel(q, k, v, causal=True, need_weights=False)
    full = kernel(q, k, v, causal=True)
    assert lean.weights is None
    assert float((lean.output - full.output).abs().max()) < TOLERANCE


def _gqa_setup(seed):
    g = _generator(seed)
    config = decoder.DecoderConfig(d=8, h=4, h_kv=2, d_k=4)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) * 0.5
    w = decoder.DecoderLayerWeights(attention_norm=torch.ones(8, dtype=torch.float64), w_q=r(8, 16), w_k=r(8, 8),
                                    w_v=r(8, 8), w_o=r(16, 8), ffn_norm=torch.ones(8, dtype=torch.float64),
                                    w_gate=r(8, 16), w_up=r(8, 16), w_down=r(16, 8))
    return config, w, r(2, 5, 8)


def _gqa_by_hand(head_formula, x, w, config, trace):
    """Concat_i head_formula(i, rotated q_i, rotated k_{i // group}, v_{i // group}) W_O, head by head."""
    group = config.h // config.h_kv
    v = (x @ w.w_v).unflatten(-1, (config.h_kv, config.d_k)).transpose(-3, -2)      # (B, h_kv, n, d_k)
    outputs = [head_formula(i, trace.rotated_query[:, i], trace.rotated_key[:, i // group], v[:, i // group])
               for i in range(config.h)]
    return torch.cat(outputs, -1) @ w.w_o


@pytest.mark.parametrize("name", list(KERNELS))
def test_each_kernel_through_grouped_query_attention(name):
    """fails_if: GQA hands a kernel keys of another group, or the kernel cannot take (..., h, n, d_k)."""
    kernel = KERNELS[name]
    config, w, x = _gqa_setup(3)
    result = decoder.grouped_query_attention(x, weights=w, config=config, causal=True, attention=kernel)
    expected = _gqa_by_hand(lambda i, q, k, v: kernel(q, k, v, causal=True).output, x, w, config, result.trace)
    assert float((result.output - expected).abs().max()) < TOLERANCE


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("checked", [True, False])
def test_each_kernel_under_vmap_without_weights(name, checked):
    """torch.func.vmap over multi-head attention with need_weights=False, value checks on and off.
    fails_if: a raw RuntimeError (the blockwise loop's bmm.out, a value check's data-dependent branch)."""
    kernel = KERNELS[name]
    g = _generator(4)
    w = attnref.MultiHeadWeights.random(8, 2, generator=g, dtype=torch.float32)
    x = torch.randn(3, 5, 8, generator=g)

    def one(x_b):
        return attnref.multi_head_attention(x_b, weights=w, attention=kernel, causal=True, need_weights=False).output

    with attnref.checks(checked):
        mapped = torch.func.vmap(one)(x)
    assert torch.allclose(mapped, torch.stack([one(x_b) for x_b in x]), atol=1e-5)


def test_a_kernel_without_the_optional_keywords_still_works():
    """need_weights and heads are passed only to a kernel that declares them (or **kwargs, need_weights)."""
    seen = []

    def plain(q, k, v, *, mask=None, causal=False):
        seen.append(tuple(q.shape))
        return attnref.scaled_dot_product_attention(q, k, v, mask=mask, causal=causal)

    g = _generator(5)
    w = attnref.MultiHeadWeights.random(8, 2, generator=g)
    x = torch.randn(5, 8, generator=g, dtype=torch.float64)
    result = attnref.multi_head_attention(x, weights=w, attention=plain, need_weights=False)
    assert result.weights is None and seen == [(1, 5, 4), (1, 5, 4)]      # the head axis, of size 1
    default = attnref.multi_head_attention(x, weights=w)
    assert float((result.output - default.output).abs().max()) < TOLERANCE


# ------------------------------------------------------------------------------------------
# A head-dependent kernel: ALiBi (item 8)
# ------------------------------------------------------------------------------------------

def alibi_slopes(h):
    """Press et al. (2022): head i (0-based) has slope 2^(−8(i + 1)/h)."""
    return torch.tensor([2.0 ** (-8 * (i + 1) / h) for i in range(h)], dtype=torch.float64)


def alibi(h):
    """An ALiBi kernel written once for the contract: scores q·k/√d_k − s_head |i − j|, the slopes picked
    by ``heads`` along the head axis −3."""
    slopes = alibi_slopes(h)

    def attention(q, k, v, *, mask=None, causal=False, need_weights=True, heads=None):
        heads = range(q.shape[-3]) if heads is None else heads
        n, m = q.shape[-2], k.shape[-2]
        distance = (torch.arange(n)[:, None] - torch.arange(m)[None, :]).abs().to(q.dtype)   # (n, m)
        bias = -slopes[list(heads)].to(q.dtype)[:, None, None] * distance                      # (h', n, m)
        if mask is not None:
            bias = bias + (torch.where(mask, 0.0, -math.inf).to(q.dtype) if mask.dtype == torch.bool else mask)
        return attnref.scaled_dot_product_attention(q, k, v, mask=bias, causal=causal, need_weights=need_weights)

    return attention


def alibi_head_by_hand(i, q, k, v, h, causal=False):
    """softmax(q kᵀ/√d_k − s_i |a − b|) v for head i, float64, with explicit loops over the pairs."""
    slope = 2.0 ** (-8 * (i + 1) / h)
    n, m = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    bias = torch.zeros(n, m, dtype=torch.float64)
    for a in range(n):
        for b in range(m):
            bias[a, b] = -slope * abs(a - b) if not (causal and b > a) else -math.inf
    weights = torch.softmax(scores + bias, dim=-1)
    return weights @ v


def _alibi_mha_by_hand(x, w, causal=False):
    return torch.cat([alibi_head_by_hand(i, q, k, v, w.h, causal) for i, (q, k, v) in enumerate(_heads_by_hand(x, w))],
                     -1) @ w.w_o + w.b_o


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_alibi_through_per_head_and_packed_mha(need_weights, causal):
    """fails_if: the per-head loop hands the kernel (..., n, d_k) (the kernel takes the batch for the
    heads: off by 0.39 in the issue's case) or no head index (every head gets head 0's slope)."""
    g = _generator(6)
    w = attnref.MultiHeadWeights.random(8, 4, generator=g)
    x = torch.randn(4, 6, 8, generator=g, dtype=torch.float64)          # batch 4 = h: the layouts cannot be told apart by size
    expected = _alibi_mha_by_hand(x, w, causal)
    for attend in (attnref.multi_head_attention, attnref.multi_head_attention_packed):
        got = attend(x, weights=w, attention=alibi(4), causal=causal, need_weights=need_weights).output
        assert float((got - expected).abs().max()) < TOLERANCE, attend.__name__
    # the slopes matter: without them (plain SDPA) the answer is far from the formula
    plain = attnref.multi_head_attention(x, weights=w, causal=causal).output
    assert float((plain - expected).abs().max()) > 1e-3


def test_alibi_through_grouped_query_attention():
    config, w, x = _gqa_setup(7)
    result = decoder.grouped_query_attention(x, weights=w, config=config, causal=True, attention=alibi(config.h))
    expected = _gqa_by_hand(lambda i, q, k, v: alibi_head_by_hand(i, q, k, v, config.h, causal=True),
                            x, w, config, result.trace)
    assert float((result.output - expected).abs().max()) < TOLERANCE


def _layer_by_hand(x, layer, causal=False):
    """Pre-LN layer with ALiBi heads, written out: x + MHA(LN(x)), then + FFN(LN(·))."""
    ln = lambda t, p: torch.nn.functional.layer_norm(t, (t.shape[-1],), p.gain, p.bias, p.eps)
    y = x + _alibi_mha_by_hand(ln(x, layer.norm_1), layer.attention, causal)
    f = layer.ffn
    return y + torch.relu(ln(y, layer.norm_2) @ f.w_1 + f.b_1) @ f.w_2 + f.b_2


def test_alibi_through_a_layer_and_a_training_step():
    """encoder_layer and TrainableLayer (per-head MHA by default) with the ALiBi kernel: the output and
    every parameter's gradient equal those of the float64 formula written head by head.
    fails_if: the layer's per-head loop misplaces the heads, or the gradient does not reach a head's
    projections through the kernel."""
    g = _generator(8)
    layer = attnref.EncoderLayer.random(8, 4, 16, norm_first=True, generator=g)
    x = torch.randn(4, 6, 8, generator=g, dtype=torch.float64)
    expected = _layer_by_hand(x, layer, causal=True)
    got = attnref.encoder_layer(x, weights=layer, attention=alibi(4), causal=True).output
    assert float((got - expected).abs().max()) < TOLERANCE

    module = attnref.TrainableLayer(layer, attention=alibi(4))
    target = torch.randn(4, 6, 8, generator=g, dtype=torch.float64)
    loss = ((module(x, causal=True).output - target) ** 2).mean()
    loss.backward()
    reference = {name: p.detach().clone().requires_grad_(True) for name, p in module.named_parameters()}
    by_hand = attnref.layers.replace_tensors(layer, {n: reference[n.replace(".", "__")] for n in module._names})
    ((_layer_by_hand(x, by_hand, causal=True) - target) ** 2).mean().backward()
    for name, p in module.named_parameters():
        assert p.grad is not None and float(p.grad.abs().max()) > 0, name
        assert float((p.grad - reference[name].grad).abs().max()) < 1e-10, name
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    before = module.attention__w_q.detach().clone()
    optimizer.step()
    assert not torch.equal(before, module.attention__w_q)


def test_a_kernel_that_broadcasts_its_table_over_every_head_is_refused():
    """The silent failure made loud: a kernel that adds an (h, n, m) table whatever heads it is given
    returns h outputs for one head in the per-head loop; the hook names the shape.
    fails_if: the per-head loop accepts (..., h, n, d_v) for one head (or squeezes it away)."""
    slopes = alibi_slopes(4)

    def careless(q, k, v, *, mask=None, causal=False):
        n = q.shape[-2]
        distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().double()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - slopes[:, None, None] * distance   # (..., 4, n, n)
        return attnref.attention_from_scores(scores, v, mask=mask, causal=causal)

    g = _generator(9)
    w = attnref.MultiHeadWeights.random(8, 4, generator=g)
    x = torch.randn(2, 6, 8, generator=g, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"careless returned an output of shape .*expected \(2, 1, 6, 2\)"):
        attnref.multi_head_attention(x, weights=w, attention=careless)
    # packed gives all four heads at once: there the table is right (and equals the formula)
    packed = attnref.multi_head_attention_packed(x, weights=w, attention=careless).output
    assert float((packed - _alibi_mha_by_hand(x, w)).abs().max()) < TOLERANCE
