"""The batched seed trainer (attnref.training.batched): seed s of a batched run is the lone run of seed s.

Every family of setting chapter 8 trains — the recall model's score variants, σ placements, the
value gate, cosine at a fixed and a learned scale, QK-norm, fused/factored, sigmoid, multi-head,
the four LayerNorm placements at depth 8, the two MLP bodies, and the text model's variants — is
trained for 200 steps by the lone loop (``train.train`` / ``text.train``, the loops that made
every stored result) on two seeds, and as one batched model holding both seeds (the lone run's
seed listed second, so that a bug that gives every member the first member's data or weights
shows). Sizes are tiny: the equality is an identity of the computation, not a property of size.

Tolerance. The batched step computes the same operations as the lone one, but a batched matrix
product or a vmapped mean may sum in another order: a few units in the last place per operation,
and training carries such a difference on and can amplify it (a deep network is a long chain).
Measured on the build machine: at depth 1–2 the parameters after 200 steps are identical bit for
bit in float32 (the held-out losses, a function of the parameters only, agree exactly; the
training losses differ by at most 4 ulps, the vmapped mean's order); pre-LN at depth 8 amplifies
the first ulp to 2e-3 in float32 (1.7e4 × 2⁻²³) and to 5.6e-9 in float64 (2.5e7 × 2⁻⁵²) by
step 200. So the family sweep runs in float64 (``DTYPE`` patched), where round-off stays below
``TOL64 = 1e-6`` at every family — 180 times the largest gap measured, 10⁴ times below what a
member trained on another seed's data or initial weights is off by (≥ 1e-2, the plausible-bug
tests below measure it); the float32 checks (depth 1, the dtype of the experiments) allow
``TOL32 = 1e-4`` (about a thousand ulps at a loss of 1).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from attnref.training import batched, models, text, train
from attnref.training.models import Spec
from attnref.training.tasks import RecallTask
from attnref.training.train import Run

TOL32 = 1e-4
TOL64 = 1e-6
STEPS = 200
SEEDS = (11, 5)                     # the batch; the lone runs are of each
TASK = RecallTask(keys=16, values=4)
SMALL = dict(d=8, h=2, d_ff=16, layers=1)

RECALL_FAMILIES = {
    "dot": {},
    "relu_q": dict(qkv_activation="relu", sigma_on="q"),
    "relu_k": dict(qkv_activation="relu", sigma_on="k"),
    "relu_v": dict(qkv_activation="relu", sigma_on="v"),
    "relu_qkv": dict(qkv_activation="relu"),
    "gelu_qkv": dict(qkv_activation="gelu"),
    "gate": dict(gate=True),
    "cosine_fixed": dict(scores="cosine", cos_scale=4.0),
    "cosine_learned": dict(scores="cosine_learned"),
    "qk_norm": dict(scores="qk_norm"),
    "fused": dict(scores="fused"),
    "factored": dict(scores="factored", score_rank=2),
    "sigmoid": dict(scores="sigmoid"),
    "multi_head": dict(h=4),
    "pre_depth8": dict(placement="pre", layers=8),
    "post_depth8": dict(placement="post", layers=8),
    "post_relu_depth8": dict(placement="post_relu", layers=8),
    "post_branch_relu_depth8": dict(placement="post_branch_relu", layers=8),
    "token_mlp": dict(body="token_mlp"),
    "flat_mlp": dict(body="flat_mlp", n=4),
}
TEXT_FAMILIES = {
    "dot": {},
    "relu_qkv": dict(qkv_activation="relu"),
    "gelu_q": dict(qkv_activation="gelu", sigma_on="q"),
    "cosine_fixed": dict(scores="cosine", cos_scale=1.0),
    "cosine_learned": dict(scores="cosine_learned"),
    "qk_norm": dict(scores="qk_norm"),
    "fused": dict(scores="fused"),
    "factored": dict(scores="factored", score_rank=2),
    "one_head": dict(h=1),
    "multi_head": dict(h=4),
    "pre_depth8": dict(placement="pre", layers=8),
    "post_depth8": dict(placement="post", layers=8),
    "post_relu_depth8": dict(placement="post_relu", layers=8),
    "post_branch_relu_depth8": dict(placement="post_branch_relu", layers=8),
}


def _recall_run(family: dict, steps: int = STEPS, **fields) -> Run:
    return Run(Spec(**{**SMALL, **family}), TASK, n=4, steps=steps, lr=1e-2, batch=8, eval_ns=(4,),
               eval_size=32, **fields)


def _corpus() -> text.Corpus:
    """A small synthetic corpus (the equality does not depend on the text): 20 characters."""
    g = torch.Generator().manual_seed(0)
    source = torch.randint(20, (4000,), generator=g)
    train_ids = torch.where(torch.rand(4000, generator=g) < 0.5, source, source.roll(1))   # some structure
    return text.Corpus(train_ids, source[:600], "abcdefghijklmnopqrs", ("a",), ("b",), "0" * 64)


def _text_run(family: dict, steps: int = STEPS, **fields) -> text.TextRun:
    return text.TextRun(Spec(**{**SMALL, **family}), context=8, batch=4, steps=steps, lr=1e-2,
                        eval_windows=16, **fields)


def _gap_recall(lone: dict, member: dict) -> float:
    """Largest |difference| over every loss two records hold: the first losses, the learning curve
    (means of 10 steps, rounded to 5 decimals by the lone loop: + 1e-5), the held-out loss."""
    first = max(abs(a - b) for a, b in zip(lone["first_losses"], member["first_losses"], strict=True))
    curve = max(abs(a - b) for a, b in zip(lone["curve"], member["curve"], strict=True)) - 1e-5
    held = max(abs(lone["eval"][n]["loss"] - member["eval"][n]["loss"]) for n in lone["eval"])
    return max(first, curve, held)


def _gap_text(lone: dict, member: dict) -> float:
    first = max(abs(a - b) for a, b in zip(lone["first_losses"], member["first_losses"], strict=True))
    curve = max(abs(a - b) for a, b in zip(lone["curve"], member["curve"], strict=True)) - 1e-5
    return max(first, curve, abs(lone["val_loss"] - member["val_loss"]))


@pytest.fixture
def float64(monkeypatch):
    """Every parameter in float64 (the models' DTYPE patched), for the lone and the batched run alike."""
    monkeypatch.setattr(models, "DTYPE", torch.float64)
    monkeypatch.setattr(text, "DTYPE", torch.float64)


@pytest.mark.parametrize("name", list(RECALL_FAMILIES))
def test_each_seed_of_a_batched_recall_run_is_its_lone_run_float64(name, float64):
    run = _recall_run(RECALL_FAMILIES[name])
    members = batched.train_recall(run, SEEDS)
    lone = train.train(replace(run, seed=SEEDS[1]))
    member = members[1]
    assert member["config"] == lone["config"] and member["parameters"] == lone["parameters"]
    gap = _gap_recall(lone, member)
    assert gap <= TOL64, f"{name}: batched and lone losses of seed {SEEDS[1]} differ by {gap:.3g} > {TOL64}"
    assert ("spectra" in member) == ("spectra" in lone)
    for a, b in zip(member.get("spectra", []), lone.get("spectra", []), strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= 1e-5     # rounded to 6 decimals
    # the two members are different runs (a batch that trained one seed twice fails here)
    assert members[0]["first_losses"] != members[1]["first_losses"]


@pytest.mark.parametrize("name", list(TEXT_FAMILIES))
def test_each_seed_of_a_batched_text_run_is_its_lone_run_float64(name, float64):
    corpus = _corpus()
    run = _text_run(TEXT_FAMILIES[name])
    members = batched.train_text(run, corpus, SEEDS)
    lone = text.train(replace(run, seed=SEEDS[1]), corpus)
    member = members[1]
    assert member["config"] == lone["config"] and member["parameters"] == lone["parameters"]
    gap = _gap_text(lone, member)
    assert gap <= TOL64, f"{name}: batched and lone losses of seed {SEEDS[1]} differ by {gap:.3g} > {TOL64}"
    assert members[0]["first_losses"] != members[1]["first_losses"]


def test_float32_every_member_is_its_lone_run():
    # the dtype the experiments train in; both members (the first member too)
    run = _recall_run({})
    for seed, member in zip(SEEDS, batched.train_recall(run, SEEDS), strict=True):
        gap = _gap_recall(train.train(replace(run, seed=seed)), member)
        assert gap <= TOL32, f"recall seed {seed}: {gap:.3g} > {TOL32}"
    corpus, run = _corpus(), _text_run({})
    for seed, member in zip(SEEDS, batched.train_text(run, corpus, SEEDS), strict=True):
        gap = _gap_text(text.train(replace(run, seed=seed), corpus), member)
        assert gap <= TOL32, f"text seed {seed}: {gap:.3g} > {TOL32}"


def test_a_member_does_not_depend_on_the_batch_it_is_in():
    # seed 5 alone, second of two, first of three: the same trajectory (its own init and data only)
    run = _recall_run(dict(placement="post", layers=2), steps=60)
    a = batched.train_recall(run, [11, 5], keep_losses=True)[1]
    b = batched.train_recall(run, [5], keep_losses=True)[0]
    c = batched.train_recall(run, [5, 7, 9], keep_losses=True)[0]
    for other in (b, c):
        assert max(abs(x - y) for x, y in zip(a["losses"], other["losses"], strict=True)) <= TOL32
        assert abs(a["eval"]["4"]["loss"] - other["eval"]["4"]["loss"]) <= TOL32
    assert len(a["losses"]) == 60 and a["config"]["seed"] == 5


# The key bias b_K shifts every score of a query's row by the same q·b_K: the softmax ignores it, so its
# gradient is zero up to round-off (2.9e-9 at step 1 here), and Adam, which divides by the gradient's
# own scale, turns that round-off into steps of size lr. b_K therefore walks by round-off in the lone
# runs too, and the largest |logit| (which includes q·b_K) follows the walk: lone and batched differ by
# 0.2 % after 10 steps although the loss and the attention weights agree. The statistics compared
# here are the ones the softmax sees (the entropies), not the raw logit level.
INVARIANT = ("query_entropy", "last_row_entropy", "uniform_entropy")


def test_checkpoints_and_attention_statistics_are_the_lone_runs():
    # E6's records (held-out accuracy and attention statistics on the way) and text read at steps
    run = _recall_run({}, steps=40, checkpoints=(10, 30), attention_stats=True)
    lone = train.train(replace(run, seed=SEEDS[1]))
    member = batched.train_recall(run, SEEDS)[1]
    assert set(member["checkpoint_eval"]) == set(lone["checkpoint_eval"]) == {"10", "30"}
    for step, point in lone["checkpoint_eval"].items():
        got = member["checkpoint_eval"][step]
        assert abs(got["4"]["loss"] - point["4"]["loss"]) <= TOL32
        for key, value in point["attention"].items():
            if key in INVARIANT:
                assert abs(got["attention"][key] - value) <= TOL32, (step, key)
    assert member["checkpoints"].keys() == lone["checkpoints"].keys()
    corpus = _corpus()
    trun = _text_run({}, steps=40, checkpoints=(10, 30), attention_stats=True)
    lone = text.train(replace(trun, seed=SEEDS[1]), corpus)
    member = batched.train_text(trun, corpus, SEEDS)[1]
    assert set(member["checkpoints"]) == {"10", "30"}
    for step, point in lone["checkpoints"].items():
        assert abs(member["checkpoints"][step]["val_loss"] - point["val_loss"]) <= TOL32
        assert member["checkpoints"][step]["attention"].keys() == point["attention"].keys()
        for key in INVARIANT:
            if key in point["attention"]:
                assert abs(member["checkpoints"][step]["attention"][key] - point["attention"][key]) <= TOL32


# --- the plausible bugs: members sharing data or initial weights --------------------------------------

def test_a_batch_whose_members_share_one_data_stream_fails_the_comparison(monkeypatch):
    run = _recall_run({}, steps=30)
    lone = train.train(replace(run, seed=SEEDS[1]))
    real = batched.generator
    monkeypatch.setattr(batched, "generator", lambda seed: real(train.DATA_SEED_OFFSET + SEEDS[0]))
    member = batched.train_recall(run, SEEDS)[1]
    assert _gap_recall(lone, member) > 100 * TOL32


def test_a_batch_whose_members_share_one_initialisation_fails_the_comparison(monkeypatch):
    run = _recall_run({}, steps=30)
    lone = train.train(replace(run, seed=SEEDS[1]))
    real = batched.RecallModel
    monkeypatch.setattr(batched, "RecallModel", lambda spec, keys, values, seed, classes=None:
                        real(spec, keys, values, SEEDS[0], classes=classes))
    member = batched.train_recall(run, SEEDS)[1]
    assert _gap_recall(lone, member) > 100 * TOL32


# --- the learning-rate schedule ------------------------------------------------------------------------

def test_schedule_is_nanogpts_get_lr():
    constant = batched.Schedule()
    assert constant.constant and all(constant.lr(i, 1e-3, 100) == 1e-3 for i in range(100))
    s = batched.Schedule(warmup=10, decay="cosine", min_lr_ratio=0.1)
    lr, steps = 1e-3, 110
    assert [s.lr(i, lr, steps) for i in range(3)] == pytest.approx([lr / 11, 2 * lr / 11, 3 * lr / 11])
    assert s.lr(10, lr, steps) == pytest.approx(lr)                          # the peak after warm-up
    assert s.lr(60, lr, steps) == pytest.approx(0.55 * lr)                   # half way: (lr + min) / 2
    assert s.lr(110, lr, steps) == pytest.approx(0.1 * lr) and s.lr(500, lr, steps) == pytest.approx(0.1 * lr)
    rates = [s.lr(i, lr, steps) for i in range(steps)]
    assert all(a < b for a, b in zip(rates[:10], rates[1:11])) and all(a >= b for a, b in zip(rates[10:], rates[11:]))
    warm = batched.Schedule(warmup=5)
    assert warm.lr(4, lr, 50) == pytest.approx(5 * lr / 6) and warm.lr(5, lr, 50) == lr == warm.lr(49, lr, 50)


def _lone_text_with_schedule(run, corpus, schedule):
    """The lone text loop (text.train's) with the learning rate set before each step."""
    model = text.TextModel(run.spec, corpus.vocab, run.context, run.seed)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=run.lr)
    gen = torch.Generator().manual_seed(text.DATA_SEED_OFFSET + run.seed)
    losses = []
    for step in range(run.steps):
        x, y = text.windows(corpus.train, run.batch, run.context, gen)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        for group in optimizer.param_groups:
            group["lr"] = schedule.lr(step, run.lr, run.steps)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, text.validation_loss(model, corpus, run)


def test_a_scheduled_batched_run_is_the_lone_scheduled_run(float64):
    corpus = _corpus()
    run = _text_run(dict(placement="post", layers=2), steps=60)
    schedule = batched.Schedule(warmup=20, decay="cosine", min_lr_ratio=0.1)
    losses, val = _lone_text_with_schedule(replace(run, seed=SEEDS[1]), corpus, schedule)
    member = batched.train_text(run, corpus, SEEDS, schedule=schedule, keep_losses=True)[1]
    assert max(abs(a - b) for a, b in zip(losses, member["losses"], strict=True)) <= TOL64
    assert abs(val - member["val_loss"]) <= TOL64
    assert member["schedule"] == schedule.config()
    plain = batched.train_text(run, corpus, SEEDS, keep_losses=True)[1]       # without warm-up: another run
    assert "schedule" not in plain and abs(plain["losses"][-1] - member["losses"][-1]) > 100 * TOL64


# --- bad input --------------------------------------------------------------------------------------------

def test_bad_input_is_named():
    run = _recall_run({}, steps=2)
    with pytest.raises(ValueError, match="seeds is empty"):
        batched.train_recall(run, [])
    with pytest.raises(ValueError, match="seeds has repeats"):
        batched.train_recall(run, [1, 1])
    with pytest.raises(ValueError, match="Schedule.decay"):
        batched.Schedule(decay="linear")
    with pytest.raises(ValueError, match="Schedule.warmup"):
        batched.Schedule(warmup=-1)
    with pytest.raises(ValueError, match="decay_steps"):
        batched.Schedule(warmup=10, decay_steps=5)


# --- a learning-rate grid as one batch --------------------------------------------------------------------

def test_a_learning_rate_grid_on_one_seed_is_the_lone_runs_at_each_rate(float64):
    # members (seed 5, lr) for three rates: each is the lone run at its rate (Adam with a rate per member,
    # batched._MemberAdam, is torch's Adam step written out: at one rate it gives the torch path's losses)
    run = _recall_run(dict(placement="post", layers=2))
    rates = [1e-3, 3e-3, 1e-2]
    members = batched.train_recall(run, [5, 5, 5], lrs=rates, keep_losses=True)
    for lr, member in zip(rates, members, strict=True):
        assert member["config"]["lr"] == lr and member["batched"]["lrs"] == rates
        gap = _gap_recall(train.train(replace(run, seed=5, lr=lr)), member)
        assert gap <= TOL64, f"lr {lr}: {gap:.3g} > {TOL64}"
    alone = batched.train_recall(replace(run, lr=1e-2), [5], keep_losses=True)[0]
    assert max(abs(a - b) for a, b in zip(alone["losses"], members[2]["losses"], strict=True)) <= TOL64
    corpus, trun = _corpus(), _text_run({}, steps=60)
    texts = batched.train_text(trun, corpus, [5, 5], lrs=[3e-3, 1e-2])
    for lr, member in zip([3e-3, 1e-2], texts, strict=True):
        assert _gap_text(text.train(replace(trun, seed=5, lr=lr), corpus), member) <= TOL64
    with pytest.raises(ValueError, match="lrs has 2 learning rates for 3 seeds"):
        batched.train_recall(run, [1, 2, 3], lrs=[1e-3, 1e-2])
    with pytest.raises(ValueError, match="repeats at one learning rate"):
        batched.train_recall(run, [5, 5], lrs=[1e-3, 1e-3])
