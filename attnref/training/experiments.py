r"""The seven experiments of chapter 8, read from the committed plan ``data/experiments/plan.toml``.

The plan fixes, per claim, the task, the step budget (calibrated on pilot seeds so that the
baseline sits off the ceiling and off chance), the primary metric, the smallest effect that counts,
the baseline and the variants. Every variant of an experiment gets the same budget, batch and
data; its learning rate is chosen on the plan's grid by held-out accuracy on the tuning seed (not a
comparison seed; an edge choice widens the grid once); the comparison runs use the plan's
comparison seeds, paired by seed (same data order, same initial weights where the shapes agree).
Every result file stores :func:`plan_hash`, the sha256 of the plan file.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from attnref.training.models import Spec
from attnref.training.tasks import RecallTask
from attnref.training.train import Run

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "data" / "experiments" / "plan.toml"
IDS = ("E1", "E2", "E3", "E4", "E5", "E6", "E7")
_SPEC_FIELDS = {f.name for f in fields(Spec)}


def plan_path() -> Path:
    """The plan file (``data/experiments/plan.toml``; for the download bundle's notebooks, under
    the working directory or its parent)."""
    for candidate in (PLAN, Path.cwd() / "data" / "experiments" / "plan.toml",
                      Path.cwd().parent / "data" / "experiments" / "plan.toml"):
        if candidate.is_file():
            return candidate
    return PLAN


def plan_hash(path: Path | str | None = None) -> str:
    """sha256 (hex) of the plan file's bytes."""
    return hashlib.sha256(Path(path or plan_path()).read_bytes()).hexdigest()


def load_plan(path: Path | str | None = None) -> dict:
    """The plan as a dictionary (``ValueError`` naming the file if it is not valid TOML)."""
    path = Path(path or plan_path())
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path.name} is not valid TOML: {error}") from None


def amendment_paths(directory: Path | str | None = None) -> list[Path]:
    """The plan's amendments, ``amendment-<k>.toml`` beside the plan, in the order of k."""
    directory = Path(directory) if directory is not None else plan_path().parent
    found = [p for p in directory.glob("amendment-*.toml") if p.stem.split("-", 1)[1].isdigit()]
    return sorted(found, key=lambda p: int(p.stem.split("-", 1)[1]))


def amendments_hash(directory: Path | str | None = None) -> str:
    """sha256 of the amendments' names and bytes, in order ("" without amendments)."""
    paths = amendment_paths(directory)
    if not paths:
        return ""
    h = hashlib.sha256()
    for path in paths:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def load_amended_plan(path: Path | str | None = None) -> dict:
    """The plan with its amendments applied in order: an amendment's table named like an
    experiment (``[E2]``) replaces those keys of the plan's table; every other table (``decides``,
    ``robustness`` …) is collected under ``plan["amendments"]``."""
    path = Path(path or plan_path())
    plan = load_plan(path)
    extra: dict = {}
    for amendment in amendment_paths(path.parent):
        for table, values in load_plan(amendment).items():
            if table in IDS and isinstance(values, dict):
                plan[table] = {**plan[table], **values}
            elif isinstance(values, dict):
                extra.setdefault(table, {}).update(values)
            else:
                extra[table] = values
    plan["amendments"] = extra
    return plan


@dataclass(frozen=True)
class Setting:
    """One variant in one setting (e.g. ReLU after Add & Norm at depth 4)."""

    experiment: str     # "E1" …
    variant: str        # the name the plan and the notebook use
    group: str          # the setting shared by the variants compared ("n = 8", "depth 4", …)
    spec: Spec
    task: RecallTask
    steps: int
    batch: int = 64
    n: int = 8
    eval_ns: tuple[int, ...] = (8,)
    eval_size: int = 1024
    lr: float | None = None          # fixed by the plan (E6), else tuned
    attention_stats: bool = False
    checkpoints: tuple[int, ...] = field(default=())

    def run(self, seed: int, lr: float) -> Run:
        return Run(self.spec, self.task, n=self.n, steps=self.steps, lr=lr, batch=self.batch, seed=seed,
                   eval_ns=self.eval_ns, eval_size=self.eval_size, checkpoints=self.checkpoints,
                   attention_stats=self.attention_stats)


def _spec(d: int, d_ff: int, *overrides: dict) -> Spec:
    values = {"d": d, "d_ff": d_ff}
    for o in overrides:
        values.update({k: v for k, v in o.items() if k in _SPEC_FIELDS})
    return Spec(**values)


def settings(plan: dict | None = None, steps: int | None = None) -> dict[str, list[Setting]]:
    """Every experiment's settings, by experiment ID (``steps`` overrides every budget: a smoke
    test or the pilot)."""
    plan = load_amended_plan() if plan is None else plan
    design, model = plan["design"], plan["model"]
    out = {}
    for e in IDS:
        if e not in plan:
            continue
        p = plan[e]
        task = RecallTask(**{k: v for k, v in p["task"].items() if k != "n"})
        n = p["task"]["n"]
        budget = steps if steps is not None else p["steps"]
        eval_ns = tuple(p.get("eval_ns", [n]))
        found = []
        for g in p["groups"]:
            for v in p["variants"]:
                spec = _spec(model["d"], model["d_ff"], p["base"], g, v)
                spec = replace(spec, n=n)
                mlp = spec.body != "attention"
                group_budget = budget if steps is not None else g.get("steps", budget)
                found.append(Setting(
                    e, v["name"], g["name"], spec, task,
                    group_budget * (p.get("mlp_steps_factor", 1) if mlp else 1),
                    design["batch"], n, eval_ns, design["eval_size"], g.get("lr"),
                    attention_stats=e == "E6",
                    # the MLPs' accuracy at 1 and 2 × the attention budget: the plateau check
                    checkpoints=(group_budget, 2 * group_budget) if mlp and p.get("mlp_steps_factor", 1) > 2
                    else tuple(g.get("checkpoints", ()))))
        out[e] = found
    return out


def lr_grid(plan: dict | None = None) -> tuple[float, ...]:
    plan = load_amended_plan() if plan is None else plan
    return tuple(plan["design"]["lr_grid"])
