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

    def config(self) -> dict:
        out = asdict(self)
        out["eval_ns"] = list(self.eval_ns)
        return out


def evaluate(model: RecallModel, run: Run, n: int) -> dict:
    """Accuracy and mean cross-entropy on ``eval_size`` held-out sequences of ``n`` pairs."""
    data = run.task.batch(run.eval_size, n, generator(EVAL_SEED_OFFSET + 1000 * run.seed + n))
    with torch.no_grad():
        logits = model(data.keys, data.values, data.query)
        loss = torch.nn.functional.cross_entropy(logits, data.answer).item()
        accuracy = (logits.argmax(-1) == data.answer).double().mean().item()
    return {"accuracy": accuracy, "loss": loss}


def train(run: Run, steps: int | None = None, progress=None) -> dict:
    """Train ``run`` (its first ``steps`` only, if given) and return the record: configuration,
    losses of the first steps, the learning curve, held-out metrics at each of ``eval_ns``,
    parameter counts, and the score matrices' spectra."""
    torch.set_num_threads(1)
    torch.manual_seed(run.seed)
    model = RecallModel(run.spec, run.task.keys, run.task.values, run.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=run.lr)
    data_gen = generator(DATA_SEED_OFFSET + run.seed)
    total = run.steps if steps is None else min(steps, run.steps)
    losses = []
    start = time.perf_counter()
    for step in range(total):
        data = run.task.batch(run.batch, run.n, data_gen)
        logits = model(data.keys, data.values, data.query)
        loss = torch.nn.functional.cross_entropy(logits, data.answer)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, total)
    seconds = time.perf_counter() - start
    curve = [sum(losses[i:i + CURVE_EVERY]) / len(losses[i:i + CURVE_EVERY])
             for i in range(0, len(losses), CURVE_EVERY)]
    record = {"config": run.config(), "first_losses": losses[:FIRST_STEPS],
              "curve": [round(v, 5) if math.isfinite(v) else str(v) for v in curve],
              "curve_every": CURVE_EVERY, "diverged": not all(math.isfinite(v) for v in losses),
              "parameters": model.parameter_count(),
              "score_parameters": model.attention_parameter_count() if run.spec.body == "attention" else 0,
              "seconds": round(seconds, 2)}
    if steps is None:
        record["eval"] = {str(n): evaluate(model, run, n) for n in run.eval_ns}
        if run.spec.body == "attention" and run.spec.scores in ("dot", "fused"):
            record["spectra"] = [[round(s, 6) for s in head] for head in model.fused_spectra()]
    return record
