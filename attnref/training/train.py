r"""The training loop: deterministic on CPU with one thread, in float32.

float32, not the float64 of the book's parity checks: training is a measurement of what a variant
learns in a fixed budget, not a comparison to round-off, and float32 halves the memory of every
tensor; at these small sizes, where Python overhead dominates, a step is only 1.2–1.4 times
faster than in float64 on the 2-core build machine, which still shortens ``make experiments``.

Adam with a constant learning rate (no warm-up, no clipping, no weight decay), cross-entropy on the
answer; a run is a function of (spec, task, n, steps, lr, batch, seed) only: the model's initial
weights come from ``seed``, the data order from ``DATA_SEED_OFFSET + seed`` (the same for every
variant: runs are paired by seed), the held-out set from ``EVAL_SEED_OFFSET + seed``.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import attnref
from attnref.training.models import RecallModel, Spec
from attnref.training.tasks import RecallTask, generator

DATA_SEED_OFFSET = 1_000_003
EVAL_SEED_OFFSET = 2_000_003
FIRST_STEPS = 10          # losses stored exactly (the drift test re-runs these)
CURVE_EVERY = 10          # the learning curve: mean training loss over each block of this many steps

_HERE = Path(__file__).resolve().parent
TRAINING_FILES = ("tasks.py", "models.py", "train.py", "experiments.py")


def _digest(paths) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def training_code_hash() -> str:
    """sha256 (16 hex digits) of the training code: tasks, models, loop."""
    return _digest(_HERE / name for name in TRAINING_FILES)


def attnref_source_hash() -> str:
    """sha256 (16 hex digits) of every attnref source file except the book's plumbing."""
    root = _HERE.parent
    files = sorted(p for p in root.rglob("*.py") if "book" not in p.relative_to(root).parts)
    return _digest(files)


@dataclass(frozen=True)
class Run:
    """One training run."""

    spec: Spec
    task: RecallTask = field(default_factory=RecallTask)
    n: int = 8                            # pairs per training sequence
    steps: int = 300
    lr: float = 3e-3
    batch: int = 64
    seed: int = 0
    eval_ns: tuple[int, ...] = (8,)       # pair counts of the held-out sets
    eval_size: int = 1024
    checkpoints: tuple[int, ...] = ()     # steps with a held-out accuracy on the way (the pilot's)
    attention_stats: bool = False         # measure the attention logits and entropy (E6)

    def config(self) -> dict:
        out = asdict(self)
        out["eval_ns"] = list(self.eval_ns)
        out["checkpoints"] = list(self.checkpoints)
        return out


def resolve_device(device: str | None) -> torch.device:
    """``"cpu"`` (default) or ``"cuda"``; a clear error when CUDA is asked for and absent."""
    name = "cpu" if device in (None, "", "cpu") else str(device)
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"--device {name}: torch {torch.__version__} sees no CUDA device "
                           f"(torch.cuda.is_available() is False); run on the CPU or install a CUDA build")
    if not (name == "cpu" or name.startswith("cuda")):
        raise ValueError(f"device must be 'cpu' or 'cuda[:i]', got {device!r}")
    return torch.device(name)


def _on(data, device):
    return type(data)(*(t.to(device) for t in (data.keys, data.values, data.query, data.answer)))


def evaluate(model: RecallModel, run: Run, n: int, device=None) -> dict:
    """Accuracy and mean cross-entropy on ``eval_size`` held-out sequences of ``n`` pairs."""
    data = _on(run.task.batch(run.eval_size, n, generator(EVAL_SEED_OFFSET + 1000 * run.seed + n)), device)
    with torch.no_grad():
        logits = model(data.keys, data.values, data.query)
        loss = torch.nn.functional.cross_entropy(logits, data.answer).item()
        accuracy = (logits.argmax(-1) == data.answer).double().mean().item()
    return {"accuracy": accuracy, "loss": loss}


def attention_statistics(model: RecallModel, run: Run, device=None) -> dict:
    """E6: on the held-out set at the training length, the largest |logit| of the first layer's
    attention (every head, query and key), the mean largest |logit| per query, and the mean
    entropy (nats) of the query position's attention rows (log(n + 1) for uniform weights)."""
    layer = model.layers[0]
    data = _on(run.task.batch(run.eval_size, run.n, generator(EVAL_SEED_OFFSET + 1000 * run.seed + run.n)), device)
    layer.record_scores = True
    try:
        with torch.no_grad():
            model(data.keys, data.values, data.query)
            logits = layer.last_scores.double()                     # (B, h, n + 1, n + 1)
    finally:
        layer.record_scores, layer.last_scores = False, None
    p = torch.softmax(logits[..., -1, :], -1)                      # the query position's rows
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    return {"max_logit": logits.abs().max().item(),
            "mean_row_max_logit": logits.abs().amax(-1).mean().item(),
            "query_entropy": entropy.mean().item(), "uniform_entropy": math.log(logits.shape[-1])}


def train(run: Run, steps: int | None = None, progress=None, device: str | None = None) -> dict:
    """Train ``run`` (its first ``steps`` only, if given) and return the record: configuration,
    losses of the first steps, the learning curve, held-out metrics at each of ``eval_ns``,
    parameter counts, and the score matrices' spectra."""
    torch.set_num_threads(1)
    torch.manual_seed(run.seed)
    where = resolve_device(device)
    model = RecallModel(run.spec, run.task.keys, run.task.values, run.seed, classes=run.task.classes).to(where)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=run.lr)
    data_gen = generator(DATA_SEED_OFFSET + run.seed)
    total = run.steps if steps is None else min(steps, run.steps)
    losses, on_the_way, along = [], {}, {}
    start, cpu_start = time.perf_counter(), time.process_time()
    # the loop does not pay attnref's per-call value checks (NaN scans, mask values: host
    # synchronisations); shapes, dtypes and devices are still checked, and a diverged run shows in
    # its losses (record["diverged"])
    with attnref.checks(False):
        for step in range(total):
            data = _on(run.task.batch(run.batch, run.n, data_gen), where)
            logits = model(data.keys, data.values, data.query)
            loss = torch.nn.functional.cross_entropy(logits, data.answer)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step + 1 in run.checkpoints and steps is None:
                # every held-out length (and E6's attention statistics) at this step: the budgets of the
                # robustness grid (a constant learning rate: the first k steps of a longer run are the k-step run)
                point = {str(n): evaluate(model, run, n, where) for n in run.eval_ns}
                on_the_way[str(step + 1)] = point[str(run.n)]["accuracy"]
                if run.attention_stats:
                    point["attention"] = attention_statistics(model, run, where)
                along[str(step + 1)] = point
            if progress is not None:
                progress(step + 1, total)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    curve = [sum(losses[i:i + CURVE_EVERY]) / len(losses[i:i + CURVE_EVERY])
             for i in range(0, len(losses), CURVE_EVERY)]
    record = {"config": run.config(), "first_losses": losses[:FIRST_STEPS],
              "curve": [round(v, 5) if math.isfinite(v) else str(v) for v in curve],
              "curve_every": CURVE_EVERY, "diverged": not all(math.isfinite(v) for v in losses),
              "parameters": model.parameter_count(),
              "score_parameters": model.attention_parameter_count() if run.spec.body == "attention" else 0,
              "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2), "device": where.type}
    if on_the_way:
        record["checkpoints"] = on_the_way
        record["checkpoint_eval"] = along
    if steps is None:
        record["eval"] = {str(n): evaluate(model, run, n, where) for n in run.eval_ns}
        if run.attention_stats:
            record["attention"] = attention_statistics(model, run, where)
        if run.spec.body == "attention" and run.spec.scores in ("dot", "fused", "factored"):
            record["spectra"] = [[round(s, 6) for s in head] for head in model.fused_spectra()]
    return record
