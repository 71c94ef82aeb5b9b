"""One hook for a new attention: every per-head attention (SDPA, QK-norm, sigmoid, cosine, …) goes
through multi-head attention, the layers, the decoder block and a training step by one argument,
``attention=``, with the call shape of attnref's SDPA. Each variant is compared with an
independent formula (written out here, or transformers' Gemma3RMSNorm), not with itself.
"""

from __future__ import annotations

import math

import pytest
import torch

import attnref
from attnref import qknorm


def _gemma_rms_norm(x, w, eps):
    """Gemma 3's RMSNorm as transformers writes it: float32 statistic, gain (1 + w) in float32."""
    work = x.float()
    normalised = work * torch.rsqrt(work.pow(2).mean(-1, keepdim=True) + eps)
    return (normalised * (1.0 + w.float())).to(x.dtype)


def _qk_norm_formula(q, k, v, wq, wk, eps=1e-6):
    """softmax(norm(q) norm(k)ᵀ / √d_k) v, by the formula in float64 with explicit loops over rows."""
    def norm(x, w):
        rms = torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
        return x / rms * (1 + w)
    qn, kn = norm(q.double(), wq.double()), norm(k.double(), wk.double())
    scores = qn @ kn.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v.double(), weights


def test_qk_rms_norm_equals_gemma3_rmsnorm():
    """fails_if: the gain is w instead of 1 + w, ε outside the square root, or the mean is a sum."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, generator=g) * 3
    w = torch.randn(8, generator=g)
    assert torch.equal(qknorm.qk_rms_norm(x, w, eps=1e-6), _gemma_rms_norm(x, w, 1e-6))
    for dtype in (torch.bfloat16, torch.float16):
        assert torch.equal(qknorm.qk_rms_norm(x.to(dtype), w.to(dtype)), _gemma_rms_norm(x.to(dtype), w.to(dtype), 1e-6))
    # ε matters where the row is small: the two conventions (inside / outside the root) differ there
    small = torch.full((1, 4), 1e-3)
    assert torch.allclose(qknorm.qk_rms_norm(small, eps=1e-6), small / math.sqrt(1e-6 + 1e-6), rtol=1e-6)
    assert torch.allclose(qknorm.qk_rms_norm(x, w, unit_offset=False), _gemma_rms_norm(x, w - 1, 1e-6), rtol=1e-6)


def test_qk_rms_norm_of_huge_rows_does_not_overflow():
    """fails_if: x² is summed directly (1e20² overflows float32: the row would become zeros)."""
    x = torch.tensor([[1e20, -2e20, 3e20, 5e19]])
    exact = x.double() / x.double().pow(2).mean(-1, keepdim=True).sqrt()
    assert torch.allclose(qknorm.qk_rms_norm(x).double(), exact, rtol=1e-6)


def test_qk_norm_attention_matches_its_formula():
    """fails_if: the keys are not normalised, the scale is dropped, or the gains are swapped."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 5, 8, generator=g, dtype=torch.float64) * 4 for _ in range(3))
    wq, wk = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    ours = qknorm.qk_norm_attention(q, k, v, query_weight=wq, key_weight=wk)
    output, weights = _qk_norm_formula(q, k, v, wq, wk)
    assert torch.allclose(ours.output, output, atol=1e-12) and torch.allclose(ours.weights, weights, atol=1e-12)
    bound = qknorm.qk_norm(wq, wk)
    assert torch.equal(bound(q, k, v).output, ours.output)


# --- the hook: one argument, through multi-head attention, a layer, the decoder and a training step ----

def _sigmoid_formula(q, k, v):
    """σ(q·k/√d_k − log m) v in float64 (Ramapuram et al. 2024), rows not normalised."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1]) - math.log(k.shape[-2])
    weights = torch.sigmoid(scores)
    return weights @ v.double(), weights


def _variants():
    g = torch.Generator().manual_seed(3)
    wq, wk = torch.randn(4, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)
    return {
        "qk_norm": (qknorm.qk_norm(wq, wk), lambda q, k, v: _qk_norm_formula(q, k, v, wq, wk)),
        "sigmoid": (attnref.sigmoid.sigmoid_attention, _sigmoid_formula),
    }


def _mha_formula(x, w, head_formula):
    """Concat_i head_formula(x W_i^Q + b_i^Q, x W_i^K + b_i^K, x W_i^V + b_i^V) W^O + b^O, head by head."""
    heads = []
    for i in range(w.h):
        q = x @ w.w_q[i] + w.b_q[i]
        k = x @ w.w_k[i] + w.b_k[i]
        v = x @ w.w_v[i] + w.b_v[i]
        heads.append(head_formula(q, k, v)[0])
    return torch.cat(heads, -1) @ w.w_o + w.b_o


@pytest.mark.parametrize("name", ["qk_norm", "sigmoid"])
def test_a_new_attention_runs_through_multi_head_attention(name):
    """fails_if: multi-head attention ignores attention= (its own SDPA would differ from the formula),
    passes the heads in the wrong order, or the packed form splits the heads otherwise."""
    attention, formula = _variants()[name]
    g = torch.Generator().manual_seed(4)
    w = attnref.MultiHeadWeights.random(8, 2, generator=g)
    x = torch.randn(3, 5, 8, generator=g, dtype=torch.float64)
    expected = _mha_formula(x, w, formula)
    per_head = attnref.multi_head_attention(x, weights=w, attention=attention)
    packed = attnref.multi_head_attention_packed(x, weights=w, attention=attention)
    assert torch.allclose(per_head.output, expected, atol=1e-12)
    assert torch.allclose(packed.output, expected, atol=1e-12)
    assert per_head.weights.shape == packed.weights.shape == (3, 2, 5, 5)
    default = attnref.multi_head_attention(x, weights=w).output
    assert not torch.allclose(default, expected, atol=1e-3)          # the hook changed the computation


@pytest.mark.parametrize("name", ["qk_norm", "sigmoid"])
def test_a_new_attention_runs_through_a_layer(name):
    """Pre-LN layer with the hook against torch's layer_norm, the FFN and the MHA formula.
    fails_if: encoder_layer (or pre_ln_layer, stack_layers, TrainableLayer) drops attention=."""
    attention, formula = _variants()[name]
    g = torch.Generator().manual_seed(5)
    layer = attnref.EncoderLayer.random(8, 2, 16, norm_first=True, generator=g)
    x = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    ln = lambda t, p: torch.nn.functional.layer_norm(t, (8,), p.gain, p.bias, p.eps)
    y = x + _mha_formula(ln(x, layer.norm_1), layer.attention, formula)
    f = layer.ffn
    z = y + torch.relu(ln(y, layer.norm_2) @ f.w_1 + f.b_1) @ f.w_2 + f.b_2
    for output in (attnref.encoder_layer(x, weights=layer, attention=attention).output,
                   attnref.pre_ln_layer(x, weights=layer, attention=attention).output,
                   attnref.stack_layers(x, weights=[layer], attention=attention).output,
                   attnref.TrainableLayer(layer, attention=attention)(x).output):
        assert torch.allclose(output, z, atol=1e-12)


def test_the_decoder_block_takes_the_hook():
    """Grouped-query attention calls the per-head attention once with the rotated heads; SDPA given
    explicitly equals the default, and a masked key stays masked. fails_if: decoder_block drops it."""
    from attnref import decoder
    g = torch.Generator().manual_seed(6)
    config = decoder.DecoderConfig(d=8, h=2, h_kv=1, d_k=4)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) * 0.5
    w = decoder.DecoderLayerWeights(attention_norm=torch.ones(8, dtype=torch.float64), w_q=r(8, 8), w_k=r(8, 4),
                                    w_v=r(8, 4), w_o=r(8, 8), ffn_norm=torch.ones(8, dtype=torch.float64),
                                    w_gate=r(8, 16), w_up=r(8, 16), w_down=r(16, 8))
    x = r(2, 5, 8)
    key_mask = torch.ones(2, 5, dtype=torch.bool)
    key_mask[0, 1] = False
    seen = []

    def spy(q, k, v, **kwargs):
        seen.append((tuple(q.shape), sorted(kwargs)))
        return attnref.scaled_dot_product_attention(q, k, v, **kwargs)

    ours = decoder.decoder_block(x, weights=w, config=config, causal=True, key_mask=key_mask, attention=spy)
    default = decoder.decoder_block(x, weights=w, config=config, causal=True, key_mask=key_mask)
    assert torch.equal(ours.output, default.output)
    assert seen == [((2, 2, 5, 4), ["causal", "mask"])]
    assert (ours.weights[0, :, :, 1] == 0).all()
    sig = decoder.decoder_block(x, weights=w, config=config, causal=True, attention=attnref.sigmoid.sigmoid_attention)
    assert not torch.allclose(sig.output, default.output, atol=1e-3)


def test_a_bad_hook_is_named():
    x = torch.ones(2, 4, 8, dtype=torch.float64)
    w = attnref.MultiHeadWeights.random(8, 2)
    with pytest.raises(ValueError, match="attention must be a function f\\(q, k, v"):
        attnref.multi_head_attention(x, weights=w, attention="sigmoid")
    with pytest.raises(ValueError, match="returned Tensor; it must return an attnref.AttentionResult"):
        attnref.multi_head_attention(x, weights=w, attention=lambda q, k, v, **kw: q)


@pytest.mark.parametrize("scores", ["qk_norm", "sigmoid", "custom"])
def test_a_training_step_runs_through_the_new_attention(scores):
    """One Adam step of the recall model with the attention as its per-head attention: the model's
    attention sublayer equals the formula on its own parameters (before the step), the loss is finite
    and the step moves the parameters the attention reads. fails_if: the training models keep their
    own attention (the formula differs), or QK-norm's gains are not trained."""
    from attnref.training.models import RecallModel, Spec
    from attnref.training.tasks import RecallTask, generator
    torch.set_num_threads(1)
    spec = Spec(d=16, h=2, scores="dot" if scores == "custom" else scores)
    custom = attnref.sigmoid.sigmoid_attention if scores == "custom" else None
    model = RecallModel(spec, 8, 8, seed=0, attention=custom).double()
    layer = model.layers[0]
    data = RecallTask(keys=8, values=8).batch(4, 6, generator(0))
    x = model.embed(data.keys, data.values, data.query)                    # (B, n + 1, d)
    a = layer.weights().attention
    if scores == "qk_norm":
        formula = lambda q, k, v: _qk_norm_formula(q, k, v, layer.q_norm, layer.k_norm)
    else:
        formula = _sigmoid_formula
    normed = torch.nn.functional.layer_norm(x, (16,), a.w_q.new_ones(16), a.w_q.new_zeros(16), 1e-5)
    with torch.no_grad():
        ours = layer.attention(normed, weights=a).output
        assert torch.allclose(ours, _mha_formula(normed, a, formula), atol=1e-10)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss = torch.nn.functional.cross_entropy(model(data.keys, data.values, data.query), data.answer)
    loss.backward()
    optimizer.step()
    assert math.isfinite(loss.item())
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert "layers.0.attention__w_k" in moved
    if scores == "qk_norm":
        assert {"layers.0.q_norm", "layers.0.k_norm"} <= moved
