r"""The five experiments of chapter 8: which variants, on which settings, with which budget.

Every variant of an experiment gets the same step budget, batch and data; its learning rate is
chosen on :data:`LR_GRID` by held-out accuracy on :data:`TUNING_SEED` (not a comparison seed);
the comparison runs use :data:`SEEDS`, paired by seed (same data order, same initial weights where
the shapes agree).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnref.training.models import Spec
from attnref.training.tasks import RecallTask
from attnref.training.train import Run

SEEDS = (0, 1, 2, 3, 4)
TUNING_SEED = 1000
LR_GRID = (3e-3, 1e-2)
STEPS = 250
BATCH = 64
TASK = RecallTask(keys=64, values=16)
BASE = Spec(d=32, h=2, layers=1, d_ff=64)


@dataclass(frozen=True)
class Setting:
    """One variant in one setting (e.g. ReLU after Add & Norm at depth 4)."""

    experiment: str     # "E1" …
    variant: str        # the name the notebook uses
    group: str          # the setting shared by the variants compared ("n = 16", "depth 4", …)
    spec: Spec
    n: int = 8
    eval_ns: tuple[int, ...] = (8,)

    def run(self, seed: int, lr: float) -> Run:
        return Run(self.spec, TASK, n=self.n, steps=STEPS, lr=lr, batch=BATCH, seed=seed, eval_ns=self.eval_ns)


def settings() -> dict[str, list[Setting]]:
    """Every experiment's settings, by experiment ID."""
    e1 = [Setting("E1", s, "n = 8", replace(BASE, qkv_activation=s)) for s in ("identity", "relu", "gelu")]
    e2 = [Setting("E2", p, f"depth {L}", replace(BASE, layers=L, placement=p))
          for L in (2, 4) for p in ("post", "pre", "post_relu")]
    e3 = [Setting("E3", b, "n = 8", replace(BASE, body=b), eval_ns=(8, 16, 32))
          for b in ("attention", "token_mlp", "flat_mlp")]
    e4 = [Setting("E4", s, f"n = {n}", replace(BASE, scores=s, n=n), n=n, eval_ns=(n,))
          for n in (4, 16, 32) for s in ("dot", "cosine", "cosine_learned")]
    e5 = [Setting("E5", s, "n = 8", replace(BASE, h=4, scores=s)) for s in ("dot", "fused")]
    return {"E1": e1, "E2": e2, "E3": e3, "E4": e4, "E5": e5}
