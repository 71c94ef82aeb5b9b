r"""Chapter 8's decision rule, read as a design: its operating characteristic, the margin and
false-failure probability of each decision, the seed count it needs, and a robustness-grid rule
under which a grid can only remove a decision (issue 43 item 2).

**The rule.** ``S`` paired seed differences :math:`D_1 … D_S` (baseline − treatment of a loss, or
treatment − baseline of an accuracy: positive favours the treatment), their mean :math:`\bar D`,
sample sd :math:`s` and the two-sided ``level`` t interval
:math:`\bar D \pm t_c\, s/\sqrt S` with :math:`t_c = t_{(1+\text{level})/2,\,S-1}`. Against the
smallest effect that counts :math:`\delta > 0` the interval reads

* **better** when its lower end lies above :math:`+\delta`, **no gain** when its upper end lies
  below :math:`+\delta`, otherwise undecided (a claim of a gain);
* **as good** (non-inferior) when its lower end lies above :math:`-\delta`, **worse** when its
  upper end lies below :math:`-\delta`, otherwise undecided (a claim of equivalence, E4).

**Its operating characteristic** (:func:`outcome_probabilities`, :func:`operating_characteristic`)
is exact for i.i.d. normal differences with mean Δ and sd σ: the lower end exceeds a bound b
exactly when :math:`T' = (\bar D - b)\sqrt S / s > t_c`, and :math:`T'` is noncentral t with
:math:`S-1` degrees of freedom and noncentrality :math:`(\Delta - b)\sqrt S/\sigma`; the upper end lies
below b exactly when :math:`T' < -t_c`. This is **not** the power of a t test against 0
(:func:`attnref.training.results.detectable_effect`), which the plan's ``power`` strings quote:
the rule tests against ±δ, and at the pilot's δ = 0.015 and a realised sd of 0.020 a true null
reads "no gain" with probability 0.56 at 10 seeds.

**Margins** (:func:`decision_margin`): a decision is an exclusion (an interval end beyond a bound),
so a re-run can fail it though the claim holds; its margin is the distance from the bound to the
interval's near end in standard errors :math:`s/\sqrt S`, and its false-failure probability the
same noncentral t event with the estimate and sd plugged in as the true values (nominal).

**Seeds** (:func:`seeds_for`): from a pilot's paired differences, the upper ``confidence`` limit of
the sd (chi-square) and the smallest S with P(better | 2δ) ≥ 0.8 and P(no gain | 0) ≥ 0.8.

**Grids** (:func:`grid_rule`): the decision is the main reading; a grid point can only remove
it (it reads the opposite side), and a condition is named only where a point reads the claim's
side at the Bonferroni level :math:`1 - (1-\text{level})/m` over all ``m`` readings of the
comparison. :func:`exploratory_grid_rule` is the exploratory rounds' rule (one grid point on the
claim's side names a condition at the ordinary level), kept to show what it did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: The basis the claims engine shows beside a decision's false-failure probability.
NCT_BASIS = ("noncentral t, the estimate and sd plugged in as the true mean and sd "
             "(normal seed differences; nominal)")

CLAIM, OPPOSITE, UNDECIDED, REMOVED = "claim", "opposite", "undecided", "removed"


def _check_design(sd: float, seeds: int, level: float) -> None:
    if not (isinstance(seeds, int) and seeds >= 2):
        raise ValueError(f"seeds must be an integer ≥ 2 (the t interval needs S − 1 ≥ 1 df), got {seeds!r}")
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"sd must be a finite number > 0, got {sd!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")


def t_critical(seeds: int, level: float = 0.95) -> float:
    """``t_{(1 + level)/2, S − 1}``: the half-width of the rule's interval in standard errors."""
    from scipy.stats import t

    return float(t.isf((1 - level) / 2, seeds - 1))


def outcome_probabilities(gain: float, sd: float, seeds: int, bound: float, level: float = 0.95) -> dict:
    r"""Exact probabilities that the rule's ``level`` t interval over ``seeds`` normal paired
    differences (mean ``gain``, sd ``sd``) lies **above** ``bound`` (lower end > bound), **below**
    it (upper end < bound) or contains it (**undecided**): noncentral t
    (``scipy.stats.nct``) with ``seeds − 1`` df and noncentrality ``(gain − bound)√S/sd``."""
    from scipy.stats import nct

    _check_design(sd, seeds, level)
    df, crit = seeds - 1, t_critical(seeds, level)
    ncp = (gain - bound) * math.sqrt(seeds) / sd
    above = float(nct.sf(crit, df, ncp))
    below = float(nct.cdf(-crit, df, ncp))
    return {"above": above, "below": below, "undecided": max(0.0, 1.0 - above - below)}


@dataclass(frozen=True)
class OperatingCharacteristic:
    """The probabilities of each reading of the rule at one true gain, sd and seed count."""

    gain: float
    sd: float
    seeds: int
    delta: float
    level: float
    better: float                 # lower end > +δ
    no_gain: float                # upper end < +δ
    undecided: float              # the interval contains +δ
    as_good: float                # lower end > −δ
    worse: float                  # upper end < −δ
    undecided_non_inferiority: float   # the interval contains −δ


def operating_characteristic(gain: float, sd: float, seeds: int, delta: float,
                             level: float = 0.95) -> OperatingCharacteristic:
    """Every reading's probability under the chapter's rule (see the module docstring)."""
    if not (math.isfinite(delta) and delta > 0):
        raise ValueError(f"delta must be a finite number > 0, got {delta!r}")
    up = outcome_probabilities(gain, sd, seeds, delta, level)
    down = outcome_probabilities(gain, sd, seeds, -delta, level)
    return OperatingCharacteristic(gain, sd, seeds, delta, level, up["above"], up["below"], up["undecided"],
                                   down["above"], down["below"], down["undecided"])


def rule_detectable_gain(sd: float, seeds: int, delta: float, power: float = 0.8, level: float = 0.95) -> float:
    """The smallest true mean gain the rule reads **better** (lower end above +δ) with probability
    ``power``: the rule's own counterpart of :func:`results.detectable_effect` (which answers for
    a t test against 0)."""
    from scipy.optimize import brentq

    _check_design(sd, seeds, level)
    reach = lambda g: outcome_probabilities(g, sd, seeds, delta, level)["above"] - power
    return float(brentq(reach, delta, delta + 50 * sd, xtol=1e-12 * max(sd, delta)))


def simulate_readings(gain: float, sd: float, seeds: int, bound: float, samples: int, rng,
                      level: float = 0.95) -> dict:
    """Monte Carlo counterpart of :func:`outcome_probabilities` (numpy ``rng``): the share of
    ``samples`` simulated designs whose interval lies above, below or around ``bound``."""
    import numpy as np

    d = rng.normal(gain, sd, size=(samples, seeds))
    m, s = d.mean(1), d.std(1, ddof=1)
    half = t_critical(seeds, level) * s / math.sqrt(seeds)
    above = int(np.sum(m - half > bound))
    below = int(np.sum(m + half < bound))
    return {"above": above, "below": below, "undecided": samples - above - below, "samples": samples}


# Margins ---------------------------------------------------------------------------------------

def decision_margin(differences, bound: float, relation: str = ">", level: float = 0.95) -> dict:
    r"""The margin of the rule's reading ``relation`` (``">"``: the lower end above ``bound``;
    ``"<"``: the upper end below it) in standard errors :math:`s/\sqrt S`, and the probability
    that a re-run on ``S`` fresh seeds fails it if the true mean and sd are the observed ones
    (noncentral t, :data:`NCT_BASIS`). Returns the keyword arguments the claims engine takes
    (``margin_se``, ``false_failure``, ``false_failure_basis``) and ``interval``. A NaN difference
    gives a NaN margin and no false-failure rate (the check fails on its NaN interval)."""
    from scipy.stats import nct

    from attnref.training.results import paired_t

    if relation not in (">", "<"):
        raise ValueError(f"relation must be '>' or '<', got {relation!r}")
    interval = paired_t(differences, level)
    seeds = interval.samples
    se = interval.standard_error
    if not (se is not None and math.isfinite(se) and math.isfinite(interval.estimate)):
        return {"interval": interval, "margin_se": math.nan, "false_failure": None, "false_failure_basis": None}
    if se == 0:
        cleared = interval.low > bound if relation == ">" else interval.high < bound
        return {"interval": interval, "margin_se": math.inf if cleared else -math.inf,
                "false_failure": 0.0 if cleared else 1.0, "false_failure_basis": NCT_BASIS}
    margin = (interval.low - bound) / se if relation == ">" else (bound - interval.high) / se
    crit = t_critical(seeds, level)
    ncp = (interval.estimate - bound) / se
    fail = nct.cdf(crit, seeds - 1, ncp) if relation == ">" else nct.sf(-crit, seeds - 1, ncp)
    return {"interval": interval, "margin_se": float(margin), "false_failure": float(fail),
            "false_failure_basis": NCT_BASIS}


def record_reading(recorder, name: str, differences, bound: float, relation: str = ">", *,
                   level: float = 0.95, fails_if: str | None = None) -> bool:
    """Record one reading of the rule (``relation`` ``">"``: the interval's lower end above
    ``bound``; ``"<"``: its upper end below) as a training check of the claims engine with its
    interval's level, its margin in standard errors and its false-failure probability, so that
    the verdict box's levels line states them. Returns whether it passed."""
    from attnref.book import claims

    m = decision_margin(differences, bound, relation, level)
    i = m["interval"]
    which = "lower" if relation == ">" else "upper"
    check = recorder.at_least if relation == ">" else recorder.at_most
    extra = {} if m["false_failure"] is None else {"false_failure": m["false_failure"],
                                                   "false_failure_basis": m["false_failure_basis"]}
    margin = m["margin_se"] if math.isfinite(m["margin_se"]) else None
    return check(f"{name}: {100 * level:g} % t {which} end", i.low if relation == ">" else i.high, bound,
                 kind=claims.TRAINING, bound="t (normal theory)", failure_probability=round(1 - level, 9),
                 fails_if=fails_if, excludes=True, margin_se=margin, **extra)


def record_rule(evidence, name: str, differences, bound: float, relation: str = ">", *, level: float = 0.95,
                fails_if: str | None = None, fails_if_counter: str | None = None) -> str:
    """The rule as checks (chapter 8's ``rule``, with margins): the claim's side is recorded as a
    check of the claim; only when it fails is the opposite side recorded, as a counterexample
    (if neither side is reached the verdict is not established). Returns the reading."""
    if record_reading(evidence, name, differences, bound, relation, level=level, fails_if=fails_if):
        return CLAIM
    flip = "<" if relation == ">" else ">"
    if record_reading(evidence.counterexample, name, differences, bound, flip, level=level, fails_if=fails_if_counter):
        return OPPOSITE
    return UNDECIDED


# Seeds from the operating characteristic -------------------------------------------------------

def sd_upper_limit(sd: float, df: int, confidence: float = 0.8) -> float:
    r"""One-sided upper ``confidence`` limit of a normal sd from a sample sd ``sd`` on ``df``
    degrees of freedom: :math:`s\sqrt{\nu / \chi^2_{1-c,\nu}}` (``scipy.stats.chi2``)."""
    from scipy.stats import chi2

    if not (isinstance(df, int) and df >= 1) or not (math.isfinite(sd) and sd > 0) or not 0 < confidence < 1:
        raise ValueError(f"need sd > 0, df ≥ 1 and 0 < confidence < 1; got sd = {sd!r}, df = {df!r}, "
                         f"confidence = {confidence!r}")
    return float(sd * math.sqrt(df / chi2.ppf(1 - confidence, df)))


@dataclass(frozen=True)
class SeedChoice:
    """The design the pilot fixes: seeds S for the stated δ, and the characteristic it meets."""

    seeds: int
    delta: float
    pilot_sd: float
    pilot_df: int
    sd_upper: float                  # the upper `confidence` limit of the pilot's sd, designed for
    confidence: float
    p_better_at_2delta: float        # at sd_upper
    p_no_gain_at_0: float            # at sd_upper
    target: float
    capped: bool = False             # True: max_seeds reached without meeting the target

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def seeds_needed(sd: float, delta: float, target: float = 0.8, level: float = 0.95, max_seeds: int = 200) -> tuple[int, bool]:
    """The smallest S (2 … ``max_seeds``) at which P(better | 2δ) ≥ target and P(no gain | 0) ≥
    target for normal differences of sd ``sd``; ``(max_seeds, True)`` when none does."""
    for s in range(2, max_seeds + 1):
        if (outcome_probabilities(2 * delta, sd, s, delta, level)["above"] >= target
                and outcome_probabilities(0.0, sd, s, delta, level)["below"] >= target):
            return s, False
    return max_seeds, True


def seeds_for(pilot_differences, delta: float, target: float = 0.8, confidence: float = 0.8,
              level: float = 0.95, max_seeds: int = 200) -> SeedChoice:
    """The plan's seed rule: from the pilot's paired differences (its own seeds), the upper
    ``confidence`` limit of their sd, and the smallest S whose characteristic at that sd reads a
    true gain of 2δ "better" and a true null "no gain" each with probability ≥ ``target``."""
    values = [float(v) for v in pilot_differences]
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"pilot_differences must be ≥ 2 finite numbers, got {values!r}")
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    upper = sd_upper_limit(sd, len(values) - 1, confidence)
    seeds, capped = seeds_needed(upper, delta, target, level, max_seeds)
    return SeedChoice(seeds, delta, sd, len(values) - 1, upper, confidence,
                      outcome_probabilities(2 * delta, upper, seeds, delta, level)["above"],
                      outcome_probabilities(0.0, upper, seeds, delta, level)["below"], target, capped)


def delta_for(sd: float, seeds: int, target: float = 0.8, level: float = 0.95, step: float = 0.0) -> float:
    """The other side of the trade-off: the smallest δ (rounded up to a multiple of ``step`` if
    ``step`` > 0) at which ``seeds`` seeds meet the target at sd ``sd`` (the two conditions are the
    same event by the symmetry of the noncentral t, so one root)."""
    from scipy.optimize import brentq

    _check_design(sd, seeds, level)
    reach = lambda d: outcome_probabilities(2 * d, sd, seeds, d, level)["above"] - target
    found = brentq(reach, 1e-9 * sd, 100 * sd, xtol=1e-12 * sd)
    return math.ceil(found / step - 1e-9) * step if step > 0 else float(found)


# Robustness grids -------------------------------------------------------------------------------

def reading(interval, bound: float, relation: str = ">") -> str:
    """The rule's reading of one interval: CLAIM (the claim's side of ``bound``), OPPOSITE or UNDECIDED."""
    if relation == ">":
        return CLAIM if interval.low > bound else OPPOSITE if interval.high < bound else UNDECIDED
    return CLAIM if interval.high < bound else OPPOSITE if interval.low > bound else UNDECIDED


def bonferroni_level(level: float, readings: int) -> float:
    """The per-reading level of a family of ``readings`` intervals whose union misses with
    probability at most ``1 − level``."""
    return 1 - (1 - level) / readings


@dataclass
class GridDecision:
    """A comparison's reading under :func:`grid_rule`."""

    outcome: str                         # CLAIM, OPPOSITE, UNDECIDED or REMOVED
    main: str                            # the main run's reading at `level`
    points: dict = field(default_factory=dict)      # each grid point's reading at `level`
    conditions: list = field(default_factory=list)  # points read on the claim's side at the Bonferroni level
    readings: int = 1                    # m: the main run and every grid point
    bonferroni: float = 0.95             # the level each condition is read at
    removed_by: list = field(default_factory=list)  # the points that removed the decision


def grid_rule(main_differences, points: dict, bound: float, relation: str = ">",
              level: float = 0.95) -> GridDecision:
    """The confirmatory grid rule (a grid can only remove a decision).

    The decision is the main run's reading at ``level``. Each grid point (``points``: name →
    paired differences) is read at ``level`` too and is a supporting check: the decision is
    REMOVED (not established) when a point reads the opposite side of the main reading. A
    condition is named only when the main run reads OPPOSITE and a point reads the claim's side
    at the Bonferroni level over all ``m = 1 + len(points)`` readings; a point on the claim's side
    at ``level`` but not at the Bonferroni level removes the OPPOSITE decision without naming
    anything. An undecided main reading stays undecided whatever the grid reads."""
    from attnref.training.results import paired_t

    m = 1 + len(points)
    strict = bonferroni_level(level, m)
    main = reading(paired_t(main_differences, level), bound, relation)
    at_level = {p: reading(paired_t(d, level), bound, relation) for p, d in points.items()}
    out = GridDecision(main, main, at_level, [], m, strict)
    if main == CLAIM:
        out.removed_by = [p for p, r in at_level.items() if r == OPPOSITE]
    elif main == OPPOSITE:
        out.conditions = [p for p, d in points.items()
                          if reading(paired_t(d, strict), bound, relation) == CLAIM]
        if not out.conditions:
            out.removed_by = [p for p, r in at_level.items() if r == CLAIM]
    if out.removed_by:
        out.outcome = REMOVED
    return out


def exploratory_grid_rule(main_differences, points: dict, bound: float, relation: str = ">",
                          level: float = 0.95) -> GridDecision:
    """EXPLORATORY: the rule of the exploratory rounds (chapter 8's ``robust_rule``, amendment 2),
    kept to measure what it did: every point, the main run included, is read at ``level``; all on
    the claim's side → CLAIM; some on the opposite side → a counterexample, and the points on the
    claim's side (if any) name a condition at the ordinary level; undecided points are shown only.
    A single grid point can thus turn "does not hold" into "holds under conditions"."""
    from attnref.training.results import paired_t

    every = {"main": main_differences, **points}
    status = {p: reading(paired_t(d, level), bound, relation) for p, d in every.items()}
    out = GridDecision(UNDECIDED, status["main"], {p: s for p, s in status.items() if p != "main"}, [],
                       len(every), level)
    claim = [p for p, s in status.items() if s == CLAIM]
    opposite = [p for p, s in status.items() if s == OPPOSITE]
    if len(claim) == len(status):
        out.outcome = CLAIM
    elif opposite:
        out.outcome = OPPOSITE
        out.conditions = claim
    return out


def false_verdict(decision: GridDecision) -> bool:
    """Whether a comparison whose claim is false (true gain on the opposite side of the bound at
    every point) was read as holding: the claim's side decided, or a condition named."""
    return decision.outcome == CLAIM or (decision.outcome == OPPOSITE and bool(decision.conditions))


# The plans' expected cost ------------------------------------------------------------------------

def _sides(key: str) -> list[str]:
    """The settings a comparison key "a - b" names (a checkpoint or length suffix "@…" dropped)."""
    return [side.strip().partition("@")[0].strip() if "@ " not in side else side.strip()
            for side in key.split(" - ")]


def plan_cost(plan: dict, seeds: int) -> dict:
    """The expected CPU-seconds of a confirmatory plan at ``seeds`` comparison seeds, stage by stage,
    from the per-run costs in its ``[cost]`` table (lone runs on an idle core) and the measured
    speed-up of training a setting's seeds as one batched model: ``{stage: {"runs", "cpu_seconds"}}``
    and ``"total"``. Stages: tuning (every tuned setting at every rate of ``lr_grid`` on the tuning
    seed, lone), pilot (both settings of every pilot pair on the pilot seeds, batched), comparisons
    (every setting on ``seeds`` seeds, batched; synthetic runs continue to the largest budget
    factor), the shared-rate grid (every setting of a voting comparison at each other rate of
    ``shared_lr_grid``, batched) and, where the plan has one, the portable-kernel recheck of the
    voting comparisons' runs (batched)."""
    design, cost = plan["design"], plan["cost"]
    speedup = float(cost["batch_speedup"])
    rates = len(design["lr_grid"])
    other_rates = len(design["shared_lr_grid"]) - 1
    pilots = len(design["pilot_seeds"])
    out: dict = {}

    def add(stage: str, runs: float, seconds: float) -> None:
        entry = out.setdefault(stage, {"runs": 0, "cpu_seconds": 0.0})
        entry["runs"] += runs
        entry["cpu_seconds"] += seconds

    if "settings" in plan:                                        # text
        per_step = cost["ms_per_step_by_layers"]
        layers = lambda s: int(plan["settings"][s].get("layers", design["layers"]))
        run = lambda s: per_step[str(layers(s))] / 1000 * design["steps"]
        fixed = {s for s, f in plan["settings"].items() if "lr" in f}
        voting = {side for e in plan if e.startswith("E") for c in plan[e].get("compare", []) if c["votes"]
                  for side in _sides(c["key"])}
        for s in plan["settings"]:
            if s not in fixed:
                add("tuning", rates, rates * run(s))
            add("comparisons", seeds, seeds * run(s) / speedup)
            if s in voting and s not in fixed and layers(s) == design["layers"]:
                add("shared-rate grid", other_rates * seeds, other_rates * seeds * run(s) / speedup)
        for pair in plan["pilot"]["pairs"]:
            for s in _sides(pair["key"]):
                add("pilot", pilots, pilots * run(s) / speedup)
    else:                                                         # synthetic
        from attnref.training import experiments

        idle = float(cost["idle_factor"])
        per_run = cost["per_run_cpu_seconds_shared"]
        factor = max(design.get("budget_factors", [1]))
        found = experiments.settings(plan)
        price = lambda e, g: float(per_run.get(f"{e} {g}", per_run.get(e))) / idle
        for e, items in found.items():
            tuned = plan[e].get("tuned", True)
            voting = set()
            for c in plan[e].get("compare", []):
                if c["votes"]:
                    for g in c.get("groups", [x["name"] for x in plan[e]["groups"]]):
                        voting |= {(side, g) for side in _sides(c["key"])}
            for s in items:
                p = price(e, s.group)
                if tuned:
                    add("tuning", rates, rates * p)
                add("comparisons", seeds, seeds * factor * p / speedup)
                if (s.variant, s.group) in voting:
                    if tuned:
                        add("shared-rate grid", other_rates * seeds, other_rates * seeds * p / speedup)
                    add("portable recheck", seeds, seeds * p / speedup)
        for pair in plan["pilot"]["pairs"]:
            for _ in _sides(pair["key"]):
                add("pilot", pilots, pilots * price(pair["experiment"], pair["group"]) / speedup)
    out["total"] = {"runs": sum(v["runs"] for v in out.values()),
                    "cpu_seconds": sum(v["cpu_seconds"] for v in out.values())}
    return out


# The characteristic beside a table ---------------------------------------------------------------------

def realised_characteristic(differences, delta: float, level: float = 0.95, target: float = 0.8) -> dict:
    """The rule's operating characteristic at the realised sd of one comparison's paired
    differences (NaN ignored): S, sd, P(no gain | true gain 0), P(better | true gain 2δ), the
    gain the rule reads "better" with probability ``target`` (:func:`rule_detectable_gain`) and,
    labelled as such, the t test's detectable effect against 0 that the exploratory tables quote."""
    from attnref.training.results import detectable_effect

    values = [float(v) for v in differences if math.isfinite(float(v))]
    if len(values) < 2:
        raise ValueError(f"differences must hold at least 2 finite values, got {len(values)}")
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    S = len(values)
    if sd == 0:
        return {"seeds": S, "sd": 0.0, "p_no_gain_at_0": 1.0, "p_better_at_2delta": 1.0,
                "rule_gain_at_target": delta, "t_test_effect_at_target": 0.0}
    return {"seeds": S, "sd": sd,
            "p_no_gain_at_0": outcome_probabilities(0.0, sd, S, delta, level)["below"],
            "p_better_at_2delta": outcome_probabilities(2 * delta, sd, S, delta, level)["above"],
            "rule_gain_at_target": rule_detectable_gain(sd, S, delta, target, level),
            "t_test_effect_at_target": detectable_effect(sd, S, level, target)}


def characteristic_table(rows, delta: float, level: float = 0.95) -> str:
    """A Markdown table of :func:`realised_characteristic` for ``rows`` of (name, differences)."""
    head = ("| comparison | S | realised sd | P(no gain \\| 0) | P(better \\| 2δ) | gain read better w.p. 0.8 "
            "(t test against 0: not the rule) |\n|---|---|---|---|---|---|\n")
    lines = []
    for name, diffs in rows:
        c = realised_characteristic(diffs, delta, level)
        lines.append(f"| {name} | {c['seeds']} | {c['sd']:.4f} | {c['p_no_gain_at_0']:.2f} | "
                     f"{c['p_better_at_2delta']:.2f} | {c['rule_gain_at_target']:.4f} ({c['t_test_effect_at_target']:.4f}) |")
    return head + "\n".join(lines)
