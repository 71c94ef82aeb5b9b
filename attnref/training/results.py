r"""Reading ``data/experiments/*.json`` and the paired comparisons of chapter 8.

:func:`load` gives a one-line error naming ``make experiments`` when a file is missing, unreadable
or was written by other training code than the present one (stale). :func:`paired_t` is the
interval of the decision rule: a two-sided t interval for the mean of paired seed differences.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from attnref.analysis.stats import Interval
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
        raise StaleData(f"{shown} is missing: run `make experiments` (about 7 minutes on 2 cores) to train and write it")
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
    return data


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


def _betacf(a: float, b: float, x: float) -> float:
    # continued fraction of the incomplete beta function (modified Lentz), Numerical Recipes §6.4
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    """Student t distribution function with ``df`` degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(level: float, df: int) -> float:
    """The two-sided Student t quantile ``t_{(1 + level)/2, df}`` (bisection on :func:`t_cdf`;
    no scipy import: it costs the notebook more than a second)."""
    target, low, high = 0.5 + level / 2, 0.0, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < target else (low, mid)
    return (low + high) / 2


def paired_t(differences, level: float = 0.95) -> Interval:
    """Two-sided ``level`` t interval for the mean of paired differences (exact if the seed
    differences are i.i.d. normal; named "t (asymptotic)" because that is assumed, not shown)."""
    values = [float(v) for v in differences]
    k = len(values)
    if k < 2:
        raise ValueError(f"a paired t interval needs at least 2 differences, got {k}")
    mean = sum(values) / k
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    half = t_quantile(level, k - 1) * sd / math.sqrt(k)
    return Interval(mean, mean - half, mean + half, "t (asymptotic)", 1 - level, k)
