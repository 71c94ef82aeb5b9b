r"""Every seed of a setting trained at once: one batched model per setting.

A lone training step at chapter 8's sizes pays per-call overhead (Python, dispatch, small kernels)
on top of its arithmetic, so ten seeds trained one after another cost ten times one. Here the ``S``
seeds of one setting are a single model whose parameters carry a leading seed axis
(:func:`torch.func.stack_module_state`), run by :func:`torch.func.vmap` over
:func:`torch.func.functional_call` of attnref's own models (:class:`~attnref.training.models.RecallModel`,
:class:`~attnref.training.text.TextModel`): one call per step instead of ``S``.

Each seed keeps everything its lone run has:

* **its initialisation** — seed ``s``'s model is built by the lone run's constructor with seed ``s``,
  then stacked;
* **its data stream** — seed ``s``'s batch at every step comes from the lone run's generator for
  ``s`` (:data:`~attnref.training.train.DATA_SEED_OFFSET` ``+ s``; text:
  :data:`~attnref.training.text.DATA_SEED_OFFSET` ``+ s``), drawn by the lone run's own batch
  function, then stacked;
* **its optimiser state** — the loss is the *sum* of the seeds' mean losses, so the gradient of
  seed ``s``'s parameters is the gradient of its own loss (the other seeds' terms do not depend
  on them), and Adam is elementwise (its moments and its step are per coordinate; the bias
  corrections depend on the step count only), so one :class:`torch.optim.Adam` over the stacked
  tensors is ``S`` independent Adams.

So seed ``s``'s trajectory is its lone run's, up to round-off: a batched matrix product may sum in
another order than the lone one (``tests/test_batched_training.py`` measures the agreement).
Held-out evaluations, attention statistics and spectra are computed by the lone run's own
functions on a lone model holding seed ``s``'s parameters at that step, and every seed gets a
record of the lone run's form (plus the batch's provenance under ``"batched"``).

The batch removes the overhead, not the arithmetic: where a step is mostly arithmetic (long
sequences, the text model) the gain is small. ``python tools/run_experiments.py --measure-batching``
measures CPU-seconds per run, lone against batched (data/experiments/batching.json).

A learning-rate :class:`Schedule` (linear warm-up, then constant or cosine decay, nanoGPT's
``get_lr``) is optional; the default is the chapter's constant rate. Members may also differ in
their learning rate (``lrs``): a learning-rate grid on one tuning seed is one batch
(:class:`_MemberAdam`, torch's Adam step with a rate per member).
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

import attnref
from attnref.training import text as text_module
from attnref.training import train as train_module
from attnref.training.models import RecallModel
from attnref.training.tasks import generator

Tensor = torch.Tensor
CURVE_EVERY = train_module.CURVE_EVERY
FIRST_STEPS = train_module.FIRST_STEPS
DECAYS = ("constant", "cosine")


def code_hash() -> str:
    """sha256 (16 hex digits) of this module (the batched loop), for the result files' provenance."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class Schedule:
    """The learning rate at step ``i`` (0-based) of a run of ``steps`` steps at peak rate ``lr``:
    nanoGPT's ``get_lr``. Warm-up: ``lr · (i + 1) / (warmup + 1)`` for ``i < warmup``; then
    ``"constant"``: ``lr``; or ``"cosine"``: from ``lr`` down to ``min_lr_ratio · lr`` at step
    ``decay_steps`` (default: the run's ``steps``) along half a cosine, and ``min_lr_ratio · lr``
    after it. ``Schedule()`` is the chapter's constant rate."""

    warmup: int = 0
    decay: str = "constant"
    min_lr_ratio: float = 0.1
    decay_steps: int | None = None

    def __post_init__(self) -> None:
        if self.decay not in DECAYS:
            raise ValueError(f"Schedule.decay must be one of {DECAYS}, got {self.decay!r}")
        if self.warmup < 0:
            raise ValueError(f"Schedule.warmup must be ≥ 0, got {self.warmup}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"Schedule.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.decay_steps is not None and self.decay_steps <= self.warmup:
            raise ValueError(f"Schedule.decay_steps = {self.decay_steps} must exceed warmup = {self.warmup}")

    @property
    def constant(self) -> bool:
        """True for the chapter's constant rate (the optimiser's rate is never touched)."""
        return self.warmup == 0 and self.decay == "constant"

    def lr(self, step: int, lr: float, steps: int) -> float:
        """The rate of step ``step`` (0-based) in a run of ``steps`` steps at peak ``lr``."""
        if step < self.warmup:
            return lr * (step + 1) / (self.warmup + 1)
        if self.decay == "constant":
            return lr
        end = self.decay_steps if self.decay_steps is not None else steps
        low = self.min_lr_ratio * lr
        if step > end:
            return low
        ratio = (step - self.warmup) / max(1, end - self.warmup)
        return low + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - low)

    def config(self) -> dict:
        return asdict(self)


class _MemberAdam:
    """Adam with one learning rate per member (the leading axis of every tensor): torch's own
    single-tensor Adam step (``torch.optim.adam._single_tensor_adam``, no weight decay, no amsgrad)
    written out, with the step size ``lr_s / (1 − β₁ᵗ)`` of member ``s`` in place of the scalar one.
    ``param.addcdiv_(m, denom, value=−step)`` computes ``param + (−step · m) / denom`` elementwise;
    here ``−step`` is a tensor over the members, in the parameters' dtype, in the same order."""

    def __init__(self, params: list[Tensor], lrs: list[float], betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lrs, self.betas, self.eps = params, list(lrs), betas, eps
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        self.steps = 0

    def step(self) -> None:
        beta1, beta2 = self.betas
        self.steps += 1
        bias_correction1 = 1 - beta1 ** self.steps
        bias_correction2_sqrt = (1 - beta2 ** self.steps) ** 0.5
        with torch.no_grad():
            for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq):
                if p.grad is None:
                    continue
                grad = p.grad
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (v.sqrt() / bias_correction2_sqrt).add_(self.eps)
                neg = torch.tensor([-lr / bias_correction1 for lr in self.lrs], dtype=p.dtype, device=p.device)
                p.add_(neg.view(-1, *([1] * (p.dim() - 1))) * m / denom)


class _Batch:
    """``S`` lone models stacked on a leading seed axis, one Adam over the stacked tensors.

    The gradient is :func:`torch.func.grad` of each seed's loss, vmapped over the seeds (not
    ``backward`` through a vmapped forward: inside ``vmap`` alone a tensor does not report
    ``requires_grad``, and attnref's softmax would then reuse its temporaries in place)."""

    def __init__(self, models: list[torch.nn.Module], lrs: Sequence[float], loss: Callable[..., Tensor]):
        self.models = models
        self.base = models[0]          # the structure functional_call runs (its own tensors swapped out)
        params, buffers = stack_module_state(models)
        self.trained = {k: p for k, p in params.items() if p.requires_grad}
        self.frozen = {**{k: p for k, p in params.items() if not p.requires_grad}, **buffers}
        self.lrs = [float(lr) for lr in lrs]
        # one rate for every member: torch's Adam itself; a rate per member: _MemberAdam (the same formula)
        self.optimizer = (torch.optim.Adam(list(self.trained.values()), lr=self.lrs[0]) if len(set(self.lrs)) == 1
                          else _MemberAdam(list(self.trained.values()), self.lrs))

        def one(trained, frozen, inputs, target):
            out = functional_call(self.base, ({**trained, **frozen},), inputs)
            return loss(out, target)

        self._grad = vmap(grad_and_value(one))

    def step(self, inputs: tuple, target: Tensor, lrs: list[float] | None) -> Tensor:
        """One Adam step of every member on its own batch (``inputs``, ``target``: leading member axis)
        at the members' rates ``lrs`` (None: unchanged); returns the members' losses ``(S,)`` before the step."""
        if lrs is not None:
            if isinstance(self.optimizer, _MemberAdam):
                self.optimizer.lrs = list(lrs)
            else:
                for group in self.optimizer.param_groups:
                    group["lr"] = lrs[0]
        trained = {k: p.detach() for k, p in self.trained.items()}
        grads, losses = self._grad(trained, self.frozen, inputs, target)
        for k, p in self.trained.items():
            p.grad = grads[k]
        self.optimizer.step()
        return losses

    def lone(self, s: int) -> torch.nn.Module:
        """Seed ``s``'s lone model holding its current parameters."""
        model = self.models[s]
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_((self.trained.get(name) if name in self.trained else self.frozen[name])[s])
            for name, b in model.named_buffers():
                b.copy_(self.frozen[name][s])
        return model


def _curve(losses: list[float]) -> list:
    curve = [sum(losses[i:i + CURVE_EVERY]) / len(losses[i:i + CURVE_EVERY])
             for i in range(0, len(losses), CURVE_EVERY)]
    return [round(v, 5) if math.isfinite(v) else str(v) for v in curve]


def _members(seeds: Sequence[int], lrs: Sequence[float] | None, lr: float) -> tuple[list[int], list[float]]:
    """The batch's members: (seed, learning rate) pairs, each once."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds is empty: give at least one seed")
    lrs = [float(lr)] * len(seeds) if lrs is None else [float(x) for x in lrs]
    if len(lrs) != len(seeds):
        raise ValueError(f"lrs has {len(lrs)} learning rates for {len(seeds)} seeds: give one per seed")
    if not all(math.isfinite(x) and x > 0 for x in lrs):
        raise ValueError(f"lrs must be positive and finite, got {lrs}")
    pairs = list(zip(seeds, lrs))
    if len(set(pairs)) != len(pairs):
        raise ValueError(f"seeds has repeats at one learning rate: {pairs} (each member is one (seed, lr) pair)")
    return seeds, lrs


def _provenance(seeds, lrs, schedule, seconds, cpu_seconds, where) -> dict:
    return {"seeds": list(seeds), "lrs": list(lrs), "size": len(seeds), "seconds": round(seconds, 2),
            "cpu_seconds": round(cpu_seconds, 2), "code_hash": code_hash(), "device": where.type,
            "schedule": schedule.config()}


def train_recall(run: train_module.Run, seeds: Sequence[int], *, schedule: Schedule | None = None,
                 steps: int | None = None, device: str | None = None,
                 progress: Callable[[int, int], None] | None = None, keep_losses: bool = False,
                 lrs: Sequence[float] | None = None) -> list[dict]:
    """Train ``run`` (a :class:`~attnref.training.train.Run`; its ``seed`` is ignored) on every seed
    of ``seeds`` as one batched model; returns one record per seed, in the order of ``seeds``, of
    :func:`attnref.training.train.train`'s form (its ``config`` names that seed) with the batch's
    provenance under ``"batched"`` (the seeds, the batch's wall and CPU seconds, this module's
    hash, the schedule); ``seconds`` and ``cpu_seconds`` are the batch's divided by ``S``.
    ``steps``: the first steps only (no evaluations), as ``train``'s; ``keep_losses``: every
    step's training loss under ``"losses"`` (the tests'; the files keep the curve); ``lrs``: one
    learning rate per seed (default ``run.lr`` for all) — a seed may then appear once per rate, so
    a learning-rate grid on one tuning seed is one batch; each member's ``config`` names its rate."""
    seeds, lrs = _members(seeds, lrs, run.lr)
    schedule = schedule or Schedule()
    torch.set_num_threads(1)
    where = train_module.resolve_device(device)
    runs = [replace(run, seed=s, lr=lr) for s, lr in zip(seeds, lrs)]
    models = [RecallModel(r.spec, r.task.keys, r.task.values, r.seed, classes=r.task.classes).to(where)
              for r in runs]
    batch = _Batch(models, lrs, torch.nn.functional.cross_entropy)
    gens = [generator(train_module.DATA_SEED_OFFSET + s) for s in seeds]
    total = run.steps if steps is None else min(steps, run.steps)
    losses: list[list[float]] = [[] for _ in seeds]
    along: list[dict] = [{} for _ in seeds]
    start, cpu_start = time.perf_counter(), time.process_time()
    with attnref.checks(False):
        for step in range(total):
            data = [train_module._on(run.task.batch(run.batch, run.n, g), where) for g in gens]
            keys, values, query, answer = (torch.stack(t) for t in zip(*((d.keys, d.values, d.query, d.answer)
                                                                          for d in data)))
            loss = batch.step((keys, values, query), answer,
                              None if schedule.constant else [schedule.lr(step, lr, total) for lr in lrs])   # (S,)
            for s, v in enumerate(loss.tolist()):
                losses[s].append(v)
            if step + 1 in run.checkpoints and steps is None:
                for s, r in enumerate(runs):
                    model = batch.lone(s)
                    point = {str(n): train_module.evaluate(model, r, n, where) for n in r.eval_ns}
                    if r.attention_stats:
                        point["attention"] = train_module.attention_statistics(model, r, where)
                    along[s][str(step + 1)] = point
            if progress is not None:
                progress(step + 1, total)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    records = []
    for s, r in enumerate(runs):
        model = batch.lone(s)
        record = {"config": r.config(), "first_losses": losses[s][:FIRST_STEPS], "curve": _curve(losses[s]),
                  "curve_every": CURVE_EVERY, "diverged": not all(math.isfinite(v) for v in losses[s]),
                  "parameters": model.parameter_count(),
                  "score_parameters": model.attention_parameter_count() if r.spec.body == "attention" else 0,
                  "seconds": round(seconds / len(seeds), 2), "cpu_seconds": round(cpu_seconds / len(seeds), 2),
                  "device": where.type}
        if along[s]:
            record["checkpoints"] = {k: v[str(r.n)]["accuracy"] for k, v in along[s].items()}
            record["checkpoint_eval"] = along[s]
        if steps is None:
            record["eval"] = {str(n): train_module.evaluate(model, r, n, where) for n in r.eval_ns}
            if r.attention_stats:
                record["attention"] = train_module.attention_statistics(model, r, where)
            if r.spec.body == "attention" and r.spec.scores in ("dot", "fused", "factored"):
                record["spectra"] = [[round(v, 6) for v in head] for head in model.fused_spectra()]
        if not schedule.constant:
            record["schedule"] = schedule.config()
        if keep_losses:
            record["losses"] = losses[s]
        record["batched"] = _provenance(seeds, lrs, schedule, seconds, cpu_seconds, where)
        records.append(record)
    return records


def train_text(run: text_module.TextRun, corpus: text_module.Corpus, seeds: Sequence[int], *,
               schedule: Schedule | None = None, steps: int | None = None, device: str | None = None,
               progress: Callable[[int, int], None] | None = None, keep_losses: bool = False,
                 lrs: Sequence[float] | None = None) -> list[dict]:
    """Train the text run ``run`` (a :class:`~attnref.training.text.TextRun`; its ``seed`` is
    ignored) on every seed of ``seeds`` as one batched model; one record per seed of
    :func:`attnref.training.text.train`'s form — ``val_loss`` at the end, ``checkpoints``
    ``{step: {"val_loss": …, "attention": …}}`` at each of ``run.checkpoints`` — with the batch's
    provenance under ``"batched"``."""
    seeds, lrs = _members(seeds, lrs, run.lr)
    schedule = schedule or Schedule()
    torch.set_num_threads(1)
    where = train_module.resolve_device(device)
    runs = [replace(run, seed=s, lr=lr) for s, lr in zip(seeds, lrs)]
    models = [text_module.TextModel(r.spec, corpus.vocab, r.context, r.seed).to(where) for r in runs]
    def loss_of(logits, y):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

    batch = _Batch(models, lrs, loss_of)
    gens = [torch.Generator().manual_seed(text_module.DATA_SEED_OFFSET + s) for s in seeds]
    total = run.steps if steps is None else min(steps, run.steps)
    losses: list[list[float]] = [[] for _ in seeds]
    along: list[dict] = [{} for _ in seeds]

    start, cpu_start = time.perf_counter(), time.process_time()
    with attnref.checks(False):
        for step in range(total):
            pairs = [text_module.windows(corpus.train, run.batch, run.context, g) for g in gens]
            x = torch.stack([p[0] for p in pairs]).to(where)
            y = torch.stack([p[1] for p in pairs]).to(where)
            loss = batch.step((x,), y, None if schedule.constant else [schedule.lr(step, lr, total) for lr in lrs])   # (S,)
            for s, v in enumerate(loss.tolist()):
                losses[s].append(v)
            if step + 1 in run.checkpoints and steps is None:
                for s, r in enumerate(runs):
                    model = batch.lone(s)
                    point = {"val_loss": text_module.validation_loss(model, corpus, r, where)}
                    if r.attention_stats:
                        point["attention"] = text_module.attention_statistics(model, corpus, r, where)
                    along[s][str(step + 1)] = point
            if progress is not None:
                progress(step + 1, total)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    records = []
    for s, r in enumerate(runs):
        model = batch.lone(s)
        record = {"config": r.config(), "first_losses": losses[s][:10], "curve": _curve(losses[s]),
                  "curve_every": CURVE_EVERY, "diverged": not all(math.isfinite(v) for v in losses[s]),
                  "parameters": model.parameter_count(), "score_parameters": model.score_parameter_count(),
                  "seconds": round(seconds / len(seeds), 2), "cpu_seconds": round(cpu_seconds / len(seeds), 2),
                  "ms_per_step": round(1000 * cpu_seconds / len(seeds) / max(1, total), 2), "device": where.type}
        if steps is None:
            record["val_loss"] = text_module.validation_loss(model, corpus, r, where)
            if along[s]:
                record["checkpoints"] = along[s]
            if r.attention_stats:
                record["attention"] = text_module.attention_statistics(model, corpus, r, where)
        if not schedule.constant:
            record["schedule"] = schedule.config()
        if keep_losses:
            record["losses"] = losses[s]
        record["batched"] = _provenance(seeds, lrs, schedule, seconds, cpu_seconds, where)
        records.append(record)
    return records


# Running many batches: a local process pool or a Ray cluster --------------------------------------

@dataclass(frozen=True)
class Task:
    """One unit of work: ``run`` (a recall :class:`~attnref.training.train.Run` or a text
    :class:`~attnref.training.text.TextRun`) on every seed of ``seeds`` — one batched model, or
    the lone loop seed after seed when ``lone`` (the loop that made the exploratory rounds).
    ``key``: the caller's name for the result. Text tasks name the corpus by its ``plays`` (the
    validation plays of :meth:`~attnref.training.text.Corpus.load`); each worker loads it once."""

    key: object
    run: object
    seeds: tuple[int, ...]
    schedule: Schedule = Schedule()
    plays: tuple[str, ...] = ()
    steps: int | None = None
    lone: bool = False
    lrs: tuple[float, ...] | None = None      # one learning rate per seed (None: run.lr for every seed)

    @property
    def is_text(self) -> bool:
        return isinstance(self.run, text_module.TextRun)

    def cost(self) -> float:
        """A rough cost for the progress bar's estimate of the time left (seed-steps × depth)."""
        steps = self.run.steps if self.steps is None else min(self.steps, self.run.steps)
        width = self.run.spec.layers + 1 if self.run.spec.body == "attention" else 1
        return float(steps * width * len(self.seeds) * (4 if self.is_text else 1))


_CORPORA: dict = {}


def corpus_of(plays: Sequence[str]) -> text_module.Corpus:
    """The text corpus with ``plays`` held out, loaded once per process."""
    key = tuple(plays)
    if key not in _CORPORA:
        _CORPORA[key] = text_module.Corpus.load(key)
    return _CORPORA[key]


def run_task(task: Task, device: str | None = None) -> tuple[object, list[dict]]:
    """``(task.key, records)``: one record per seed of ``task.seeds``, in their order."""
    if task.lone and not task.schedule.constant:
        raise ValueError(f"task {task.key!r}: the lone loops have a constant learning rate; "
                         f"a Schedule needs the batched trainer (lone=False)")
    lrs = task.lrs if task.lrs is not None else (task.run.lr,) * len(task.seeds)
    if task.is_text:
        corpus = corpus_of(task.plays)
        if task.lone:
            return task.key, [text_module.train(replace(task.run, seed=s, lr=lr), corpus, steps=task.steps, device=device)
                              for s, lr in zip(task.seeds, lrs)]
        return task.key, train_text(task.run, corpus, task.seeds, schedule=task.schedule, steps=task.steps,
                                    device=device, lrs=task.lrs)
    if task.lone:
        return task.key, [train_module.train(replace(task.run, seed=s, lr=lr), steps=task.steps, device=device)
                          for s, lr in zip(task.seeds, lrs)]
    return task.key, train_recall(task.run, task.seeds, schedule=task.schedule, steps=task.steps, device=device,
                                  lrs=task.lrs)


def _run_task_on(args):
    task, device = args
    return run_task(task, device)


def ray_module():
    """``ray``, or an error that names the optional extra that installs it."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("--ray needs the Ray package: pip install '.[experiments]' (or pip install ray); "
                           "without --ray the runner trains in a local process pool") from None
    return ray


def run_tasks(tasks: Sequence[Task], *, workers: int = 1, ray_address: str | None = None,
              device: str | None = None, desc: str = "training", progress=True) -> dict:
    """Every task, on ``workers`` local processes (fork; 1: in this process) or, with
    ``ray_address`` (``"auto"``, ``"local"`` for a fresh local instance, or a cluster's address), one
    Ray task per :class:`Task`; returns ``{task.key: records}``. ``progress``: ``True`` for a bar on
    stderr weighted by :meth:`Task.cost`, with tqdm's estimate of the time left; a caller's tqdm bar
    (advanced by each task's cost, not closed: its ``total`` is the caller's); ``False`` for none."""
    import multiprocessing as mp
    import sys

    tasks = sorted(tasks, key=lambda t: -t.cost())           # the longest first: the pool ends together
    keys = [t.key for t in tasks]
    if len(set(map(repr, keys))) != len(keys):
        raise ValueError("run_tasks: two tasks share a key")
    cost = {repr(t.key): t.cost() for t in tasks}
    bar, own = None, False
    if progress is not None and not isinstance(progress, bool):
        bar = progress
    elif progress:
        own = True
        from tqdm import tqdm
        bar = tqdm(total=round(sum(cost.values())), desc=desc, unit="seed-step", unit_scale=True,
                   file=sys.stderr, mininterval=2.0, dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| {percentage:3.0f}% [{elapsed}<{remaining} left]")
    out: dict = {}

    def done(key, records):
        out[key] = records
        if bar is not None:
            bar.update(round(cost[repr(key)]))

    try:
        if ray_address:
            ray = ray_module()
            if not ray.is_initialized():
                if ray_address == "local":
                    ray.init(include_dashboard=False, num_cpus=max(1, workers), log_to_driver=False)
                else:
                    ray.init(address=ray_address, log_to_driver=False)
            remote = ray.remote(num_cpus=1)(run_task)
            pending = [remote.remote(t, device) for t in tasks]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                done(*ray.get(ready[0]))
        elif workers <= 1 or len(tasks) <= 1:
            for t in tasks:
                done(*run_task(t, device))
        else:
            with mp.get_context("fork").Pool(min(workers, len(tasks))) as pool:
                for key, records in pool.imap_unordered(_run_task_on, [(t, device) for t in tasks]):
                    done(key, records)
    finally:
        if own:
            bar.close()
    return out
