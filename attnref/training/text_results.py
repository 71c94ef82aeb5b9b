"""Chapter 8 on text: the stored results of the text comparisons and the readings of their plan.

``make experiments-text`` (``tools/run_experiments.py --text-pilot`` then ``--text``) writes
``data/experiments/text/pilot.json`` and ``comparisons.json`` under the text plan's amendment 1
(``data/experiments/text/amendment-1.toml``). This module loads them — refusing a file made under
another amendment, by other text code or on another corpus — and gives the paired quantities
each claim's comparison names: validation-loss differences **baseline − treatment** (positive:
the treatment predicts the text better), per comparison seed, at the budget or at a checkpoint.
The decision rule itself is the notebook's (the claims engine records it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from attnref.training import experiments as ex
from attnref.training.results import StaleData, _data_directory

TEXT = "text"
AMENDMENT = "amendment-1.toml"
GRID_AMENDMENT = "amendment-2.toml"      # the learning-rate neighbours of the text decisions


def directory(root: Path | str | None = None) -> Path:
    return Path(root) / TEXT if root is not None else _data_directory() / TEXT


def amendment(root: Path | str | None = None) -> dict:
    return ex.load_plan(directory(root) / AMENDMENT)


def load(root: Path | str | None = None) -> tuple[dict, dict]:
    """``(pilot, comparisons)``, each checked against the committed amendment and the text code."""
    from attnref.training import text

    where = directory(root)
    want = ex.plan_hash(where / AMENDMENT)
    out = []
    for name in ("pilot.json", "comparisons.json"):
        path = where / name
        if not path.exists():
            raise StaleData(f"{path} is missing: run `make experiments-text`")
        data = json.loads(path.read_text())
        if data.get("amendment_sha256") != want:
            raise StaleData(f"{path} was made under another text amendment than {AMENDMENT}: run `make experiments-text`")
        if data.get("text_code_hash") != text.code_hash():
            raise StaleData(f"{path} was made by other text-experiment code: run `make experiments-text`")
        out.append(data)
    pilot, comparisons = out
    if pilot["corpus_sha256"] != comparisons["corpus_sha256"]:
        raise StaleData("the text pilot and comparisons were trained on different corpora")
    return pilot, comparisons


def grid_name(setting: str, factor: float) -> str:
    """The key of ``setting`` trained at amendment 1's learning rate times ``factor`` in grid.json."""
    return f"{setting} @ lr x {factor:g}"


def grid_amendment(root: Path | str | None = None) -> dict:
    return ex.load_plan(directory(root) / GRID_AMENDMENT)["grid"]


def load_grid(root: Path | str | None = None) -> dict | None:
    """The learning-rate grid of amendment 2 (``grid.json``), checked like :func:`load`; None if it
    was not run (the page then says so and the decisions' grid checks fail)."""
    from attnref.training import text

    where = directory(root)
    path = where / "grid.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("grid_amendment_sha256") != ex.plan_hash(where / GRID_AMENDMENT):
        raise StaleData(f"{path} was made under another grid amendment than {GRID_AMENDMENT}: run `make experiments-text`")
    if data.get("amendment_sha256") != ex.plan_hash(where / AMENDMENT):
        raise StaleData(f"{path} was made under another text amendment than {AMENDMENT}: run `make experiments-text`")
    if data.get("text_code_hash") != text.code_hash():
        raise StaleData(f"{path} was made by other text-experiment code: run `make experiments-text`")
    comparisons = where / "comparisons.json"
    if comparisons.exists() and json.loads(comparisons.read_text())["corpus_sha256"] != data["corpus_sha256"]:
        raise StaleData("the text grid and comparisons were trained on different corpora")
    return data


def losses(data: dict, setting: str, step: int | None = None, seeds=None) -> list[float]:
    """Validation loss (nats per character) of ``setting`` per comparison seed, at the budget or at
    checkpoint ``step``; a diverged run reads as NaN (it can never pass a check)."""
    runs = data["runs"][setting]
    seeds = [str(s) for s in (seeds if seeds is not None else sorted(runs, key=int))]
    out = []
    for s in seeds:
        record = runs[s]
        value = record["val_loss"] if step is None else record["checkpoints"][str(step)]["val_loss"]
        out.append(value if not record.get("diverged") and math.isfinite(value) else math.nan)
    return out


def differences(data: dict, baseline: str, treatment: str, step: int | None = None) -> list[float]:
    """``loss(baseline) − loss(treatment)`` per seed, paired by seed (positive: the treatment better)."""
    seeds = sorted(set(data["runs"][baseline]) & set(data["runs"][treatment]), key=int)
    if len(seeds) != len(data["runs"][baseline]) or len(seeds) != len(data["runs"][treatment]):
        raise ValueError(f"{baseline!r} and {treatment!r} were not trained on the same seeds")
    return [b - t for b, t in zip(losses(data, baseline, step, seeds), losses(data, treatment, step, seeds))]


def attention(data: dict, setting: str, name: str, step: int | None = None) -> list[float]:
    """E6's attention statistic ``name`` (``max_logit``, ``last_row_entropy``) per seed."""
    out = []
    for s in sorted(data["runs"][setting], key=int):
        record = data["runs"][setting][s]
        where = record if step is None else record["checkpoints"][str(step)]
        out.append(math.nan if record.get("diverged") else where["attention"][name])
    return out
