r"""Reading ``data/experiments/*.json`` and the paired comparisons of chapter 8.

:func:`load` gives a one-line error naming ``make experiments`` when a file is missing, unreadable
or was written by other training code or under another plan than the present ones (stale).
:func:`paired_t` is the interval of the decision rule: a two-sided t interval for the mean of
paired seed differences; :func:`sign_flip_p` the exact paired sign-flip (permutation) test shown
beside it; :func:`detectable_effect` the power of a t test against 0 — which the exploratory plans'
``power`` strings quote, and which is NOT the power of the chapter's rule (that tests against ±δ:
its operating characteristic is :mod:`attnref.training.confirm`).
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

from attnref._data import missing
from attnref.analysis.stats import Interval
from attnref.training import experiments
from attnref.training.train import training_code_hash

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "experiments"


def _data_directory() -> Path:
    """``data/experiments``: in the repository, or — for the notebooks of the download bundle, run
    from its ``notebooks/`` folder — under the working directory or its parent."""
    for candidate in (DATA, Path.cwd() / "data" / "experiments", Path.cwd().parent / "data" / "experiments"):
        if candidate.is_dir():
            return candidate
    return DATA


class StaleData(RuntimeError):
    """A data file that is missing, unreadable or older than the training code."""


def load(experiment: str, directory: Path | str | None = None, check_hash: bool = True) -> dict:
    """The stored results of one experiment (``"E1"`` …)."""
    # ATTNREF_EXPERIMENTS points the notebook at another directory (a smoke test's output)
    path = Path(directory or os.environ.get("ATTNREF_EXPERIMENTS") or _data_directory()) / f"{experiment.lower()}.json"
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.exists():
        raise StaleData(missing(path, "experiments", "about 7 minutes on 2 cores", "ATTNREF_EXPERIMENTS"))
    try:
        data = json.loads(path.read_text())
        stored = data["training_code_hash"]
        data["settings"]
    except (ValueError, KeyError, TypeError) as error:
        raise StaleData(f"{shown} is unreadable ({type(error).__name__}): run `make experiments` "
                        f"to write it again") from None
    if check_hash and stored != training_code_hash():
        raise StaleData(f"{shown} is stale: written by training code {stored}, the code is now "
                        f"{training_code_hash()}: run `make experiments`")
    if check_hash and data.get("plan_sha256") != plan_hash():
        raise StaleData(f"{shown} was made under plan {str(data.get('plan_sha256'))[:12]}…, the plan is now "
                        f"{plan_hash()[:12]}…: run `make experiments`")
    if check_hash and data.get("amendments_sha256", "") != amendments_hash():
        raise StaleData(f"{shown} was made under other plan amendments "
                        f"({str(data.get('amendments_sha256'))[:12]}…, now {amendments_hash()[:12]}…): run `make experiments`")
    return data


#: Where `make experiments` writes the robustness grid (plan amendment 2).
ROBUST = "robust"


def load_robust(experiment: str, directory: Path | str | None = None) -> dict:
    """The robustness grid of ``experiment`` (``data/experiments/robust/``), checked against the
    main file: same training code, plan, amendments and seeds, and the learning rates it chose."""
    base = Path(directory or os.environ.get("ATTNREF_EXPERIMENTS") or _data_directory())
    main = load(experiment, base)
    grid = load(experiment, base / ROBUST)
    for s in grid["settings"]:
        if grid["seeds"] != main["seeds"] or setting(main, s["variant"], s["group"])["lr"] != s["lr"]:
            raise StaleData(f"{ROBUST}/{experiment.lower()}.json is not the grid of the stored choices: "
                            "run `make experiments`")
    return grid


def grid_point(grid: dict, variant: str, group: str, point: str) -> dict:
    """One point of the robustness grid of ``variant`` in ``group``."""
    found = [p for s in grid["settings"] if s["variant"] == variant and s["group"] == group
             for p in s["points"] if p["point"] == point]
    if len(found) != 1:
        raise KeyError(f"{grid['experiment']}: {len(found)} grid points {point!r} of {variant!r} in {group!r}")
    return found[0]


def plan_file() -> Path:
    """The plan the results are checked against: ``data/experiments/plan.toml``, or the file named
    by ``ATTNREF_PLAN`` (with ``ATTNREF_EXPERIMENTS``: a smoke test's plan and output)."""
    return Path(os.environ.get("ATTNREF_PLAN") or experiments.plan_path())


def plan_hash() -> str:
    """sha256 of :func:`plan_file`."""
    return experiments.plan_hash(plan_file())


def plan() -> dict:
    """The plan of :func:`plan_file` with its amendments applied, as a dictionary."""
    return experiments.load_amended_plan(plan_file())


def amendments() -> dict:
    """The plan's amendments (``amendment-*.toml`` beside :func:`plan_file`, in their order), merged
    table by table: ``decides`` (per claim, the comparisons that vote), ``robustness`` …"""
    return experiments.load_amended_plan(plan_file())["amendments"]


def amendments_hash() -> str:
    """sha256 of the amendments beside :func:`plan_file` ("" without amendments)."""
    return experiments.amendments_hash(plan_file().parent)


def decides(experiment: str) -> list[str]:
    """The comparisons that vote for ``experiment``'s verdict, as the amendments name them."""
    return list(amendments().get("decides", {}).get(experiment, []))


#: Where `make experiments-recheck` writes the comparison runs re-trained on torch's portable kernels.
PORTABLE = "portable"


def load_recheck(experiment: str, directory: Path | str | None = None) -> dict:
    """The decisions' runs of ``experiment`` (the variants of the comparisons that vote) re-trained on
    torch's portable CPU kernels (``data/experiments/portable/``), checked against the main file: same
    training code, seeds and learning rates of the settings it holds, and really run on another kernel
    path than the main file's."""
    base = Path(directory or os.environ.get("ATTNREF_EXPERIMENTS") or _data_directory())
    main = load(experiment, base)
    again = load(experiment, base / PORTABLE)
    stored = {(s["variant"], s["group"]): s["lr"] for s in main["settings"]}
    if again["seeds"] != main["seeds"] or again.get("plan_sha256") != main.get("plan_sha256") or \
            not again["settings"] or \
            any(stored.get((s["variant"], s["group"])) != s["lr"] for s in again["settings"]):
        raise StaleData(f"{PORTABLE}/{experiment.lower()}.json does not re-run the stored settings: "
                        "run `make experiments-recheck`")
    if (again.get("machine") or {}).get("cpu_capability") == (main.get("machine") or {}).get("cpu_capability"):
        raise StaleData(f"{PORTABLE}/{experiment.lower()}.json ran on the same CPU kernel path as the main "
                        "file: run `make experiments-recheck` (it sets ATEN_CPU_CAPABILITY=default)")
    return again


def setting(data: dict, variant: str, group: str | None = None) -> dict:
    """The stored setting of ``variant`` (in ``group``, when the experiment has several)."""
    found = [s for s in data["settings"] if s["variant"] == variant and (group is None or s["group"] == group)]
    if len(found) != 1:
        raise KeyError(f"{data['experiment']}: {len(found)} settings named {variant!r} in group {group!r}")
    return found[0]


def accuracies(entry: dict, n: int | None = None) -> list[float]:
    """Held-out accuracy of every seed's run, in seed order (at ``n`` pairs; default: training n)."""
    key = str(entry["n"] if n is None else n)
    return [run["eval"][key]["accuracy"] for run in entry["runs"]]


def checkpoint_accuracies(entry: dict, step: int) -> list[float]:
    """Held-out accuracy of every seed's run at ``step`` (the flattened MLP's plateau check)."""
    return [run["checkpoints"][str(step)] for run in entry["runs"]]


def attention_statistic(entry: dict, name: str) -> list[float]:
    """E6: ``name`` (``"max_logit"``, ``"query_entropy"`` …) of every seed's run, NaN for a run
    that diverged (its statistics are not finite)."""
    out = []
    for run in entry["runs"]:
        value = (run.get("attention") or {}).get(name, math.nan)
        out.append(math.nan if run.get("diverged") or value is None else float(value))
    return out


def sign_flip_p(differences) -> float:
    r"""Exact two-sided paired sign-flip (permutation) test of a zero mean difference: under the
    null hypothesis that each seed's difference is symmetric about 0, the :math:`2^k` sign
    assignments are equally likely; the p-value is the share of them whose mean is at least as far
    from 0 as the observed one (the observed assignment included, so the smallest p is
    :math:`2/2^k` when no difference is 0). Distribution-free; exact for any :math:`k \le 20`."""
    values = [float(v) for v in differences]
    k = len(values)
    if not 1 <= k <= 20:
        raise ValueError(f"the exact sign-flip test takes 1 to 20 differences, got {k}")
    if any(math.isnan(v) for v in values):
        return math.nan
    observed = abs(sum(values)) * (1 - 1e-12)
    hits = 0
    for mask in range(2 ** k):
        total = sum(-v if mask >> i & 1 else v for i, v in enumerate(values))
        hits += abs(total) >= observed
    return hits / 2 ** k


def detectable_effect(sd: float, k: int, level: float = 0.95, power: float = 0.8) -> float:
    r"""The smallest true mean difference that the two-sided ``level`` paired t test **of a zero
    mean** on ``k`` pairs detects with probability ``power``, if the differences are normal with
    standard deviation ``sd`` (noncentral t, ``scipy.stats.nct``).

    This is what the exploratory plans' ``power`` strings and chapter 8's "detected with 80 %
    power" columns state, and it is **not** the power of the chapter's decision rule, which
    compares the interval with ±δ, not with 0: a true gain of this size is read "better" (lower end
    above δ) with probability well below ``power`` (E1's 0.095 at sd 0.096, δ = 0.03, 10 pairs:
    0.48). For the rule use :func:`attnref.training.confirm.rule_detectable_gain` and
    :func:`attnref.training.confirm.operating_characteristic`."""
    from scipy.optimize import brentq
    from scipy.stats import nct, t

    if not (sd > 0 and k >= 2):
        raise ValueError(f"need sd > 0 and k ≥ 2 pairs, got sd = {sd}, k = {k}")
    crit = t.isf((1 - level) / 2, k - 1)
    reach = lambda effect: nct.sf(crit, k - 1, effect * math.sqrt(k) / sd) - power
    return float(brentq(reach, 1e-12 * sd, 20 * sd))


@functools.lru_cache(maxsize=4096)
def t_quantile(level: float, df: int) -> float:
    """The two-sided Student t quantile ``t_{(1 + level)/2, df}`` (``scipy.stats.t``, from the upper
    tail ``(1 − level)/2`` so that a level near 1 keeps its precision)."""
    from scipy.stats import t   # here, not at the top: importing scipy.stats costs about a second

    return float(t.isf((1 - level) / 2, df))


def paired_t(differences, level: float = 0.95) -> Interval:
    r"""Two-sided ``level`` t interval for the mean of paired differences,
    :math:`\bar D \pm t_{(1 + \text{level})/2,\, k-1}\, s / \sqrt k` with :math:`s` the sample standard
    deviation (denominator :math:`k - 1`) of the :math:`k` differences. Exact if the seed differences
    are i.i.d. normal; named "t (normal theory)": exact under normality, which is assumed, not
    shown, so its level is nominal."""
    values = [float(v) for v in differences]
    k = len(values)
    if k < 2:
        raise ValueError(f"a paired t interval needs at least 2 differences, got {k}")
    mean = sum(values) / k
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    half = t_quantile(level, k - 1) * sd / math.sqrt(k)
    return Interval(mean, mean - half, mean + half, "t (normal theory)", 1 - level, k,
                    standard_error=sd / math.sqrt(k))
