"""Exclusion, ordering and union checks of the claims engine (issue 38, items 1–3).

* ``beyond`` passes only when the interval lies on the stated side of the value: a value inside
  the interval fails for every side, a value on the wrong side fails (each side tested both ways,
  so a ``beyond`` that tests the wrong end of the interval fails here);
* ``within`` passes only when the value lies in the interval (each end tested just inside and
  just outside);
* a check built from several intervals records the sum of their failure probabilities (a union
  bound the engine adds up), shows each interval, and passes only if every interval does;
* an exclusion check records its margin in standard errors and its false-failure rate, and the
  false-failure rate Φ(−margin) is what a re-run of the sampling actually shows (simulated);
* the "Levels" line says what the failure probabilities bound (coverage), not that no check
  fails though the claim holds.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnref.analysis import stats
from attnref.book import claims


def _interval(low: float, high: float, delta: float = 1e-7, se: float | None = None) -> stats.Interval:
    return stats.Interval((low + high) / 2, low, high, "Hoeffding", delta, 100, se)


# Item 2: beyond() and within() on both sides of both ends ------------------------------------------

@pytest.mark.parametrize("side", ["both", "below", "above"])
@pytest.mark.parametrize("value", [0.2, 0.5, 0.8, 0.2 + 1e-12, 0.8 - 1e-12])
def test_a_value_inside_the_interval_is_never_excluded(side, value):
    e = claims.Evidence("C3")
    assert not e.beyond("inside", value, _interval(0.2, 0.8), side=side)
    assert not e.checks[-1].passed


@pytest.mark.parametrize("side, value, passes", [
    ("below", 0.1, True),          # the interval lies wholly above 0.1
    ("below", 0.9, False),         # wrong side: the interval lies below 0.9
    ("above", 0.9, True),          # the interval lies wholly below 0.9
    ("above", 0.1, False),         # wrong side
    ("both", 0.1, True),
    ("both", 0.9, True),
    ("below", 0.2 - 1e-12, True),  # just outside the lower end
    ("above", 0.8 + 1e-12, True),  # just outside the upper end
    ("below", 0.8 + 1e-12, False),  # just beyond the *other* end: wrong side
    ("above", 0.2 - 1e-12, False),
])
def test_beyond_tests_the_end_its_side_names(side, value, passes):
    e = claims.Evidence("C3")
    assert e.beyond("excluded?", value, _interval(0.2, 0.8), side=side) is passes
    relation = {"both": "∌", "below": "above", "above": "below"}[side]
    assert e.checks[-1].held_to.startswith(relation)


@pytest.mark.parametrize("value, passes", [
    (0.5, True), (0.2, True), (0.8, True), (0.2 + 1e-12, True), (0.8 - 1e-12, True),
    (0.2 - 1e-12, False), (0.8 + 1e-12, False), (-3.0, False), (3.0, False), (math.nan, False),
])
def test_within_holds_exactly_inside_the_interval(value, passes):
    e = claims.Evidence("C3")
    assert e.within("contains?", value, _interval(0.2, 0.8)) is passes


def test_nan_never_passes_an_exclusion_and_a_bad_side_is_refused():
    e = claims.Evidence("C3")
    assert not e.beyond("NaN value", math.nan, _interval(0.2, 0.8), side="below")
    assert not e.beyond("NaN interval", 0.0, _interval(math.nan, math.nan), side="below")
    with pytest.raises(ValueError, match="side"):
        e.beyond("no such side", 0.0, _interval(0.2, 0.8), side="left")


# Item 3: union bounds summed by the engine --------------------------------------------------------

def test_a_check_over_several_intervals_records_the_sum_of_their_failure_probabilities():
    deltas = [1e-7, 2e-7, 3e-8, 1e-7, 5e-8, 1.5e-7]            # six intervals, as C3 records
    intervals = [_interval(0.4 + i / 100, 0.6 + i / 100, d) for i, d in enumerate(deltas)]
    e = claims.Evidence("C3")
    assert e.within("all six contain 0.5", 0.5, intervals)
    assert e.beyond("all six lie above 0.1", 0.1, intervals, side="below")
    assert e.check("ordering from six intervals", True, kind=claims.STATISTICAL, intervals=intervals)
    for c in e.checks:
        assert c.failure_probability == pytest.approx(math.fsum(deltas), rel=1e-12)
        assert c.bound == "Hoeffding"
        assert len(c.measured.split("; ")) in (1, 6)
    assert e.checks[0].measured.count("[") == 6                 # every interval is shown
    assert claims.levels(e.checks)["failure_probability"] == pytest.approx(3 * math.fsum(deltas))
    # only three of the six: a different recorded probability
    e3 = claims.Evidence("C3")
    e3.within("three of six", 0.5, intervals[:3])
    assert e3.checks[0].failure_probability == pytest.approx(math.fsum(deltas[:3]))
    assert e3.checks[0].failure_probability != pytest.approx(math.fsum(deltas))


def test_every_interval_must_hold_and_per_interval_values_are_used():
    intervals = [_interval(0.0, 1.0), _interval(2.0, 3.0)]
    e = claims.Evidence("C3")
    assert not e.within("one target for two disjoint intervals", 0.5, intervals)
    assert e.within("a target for each", [0.5, 2.5], intervals)
    assert not e.within("targets swapped", [2.5, 0.5], intervals)
    assert e.beyond("a value below each", [-1.0, 1.5], intervals, side="below")
    assert not e.beyond("one value inside the second", [-1.0, 2.5], intervals, side="below")
    with pytest.raises(ValueError, match="3 values for 2 intervals"):
        e.within("wrong count", [0.5, 2.5, 1.0], intervals)


def test_the_union_is_refused_when_it_cannot_be_summed():
    e = claims.Evidence("C3")
    # guaranteed bounds may be mixed (their δ summed, issue 44 item 6); a nominal one may not join them
    mixed = [_interval(0, 1), stats.Interval(0.5, 0, 1, "bootstrap (asymptotic)", 1e-3, 10)]
    with pytest.raises(ValueError, match="share one bound"):
        e.within("mixed bounds", 0.5, mixed)
    with pytest.raises(ValueError, match="empty"):
        e.within("no interval", 0.5, [])
    with pytest.raises(ValueError, match="stats.Interval"):
        e.within("not an interval", 0.5, (0.0, 1.0))
    with pytest.raises(ValueError, match="sum to"):      # a hand-typed union that disagrees
        e.check("typed by hand", True, kind=claims.STATISTICAL, intervals=[_interval(0, 1)] * 6,
                failure_probability=3e-7)
    with pytest.raises(ValueError, match="failure probability"):   # the sum must respect the limit
        e.within("too many intervals", 0.5, [_interval(0, 1, 1e-7)] * 11)


def test_a_nominal_union_gives_the_level_of_the_family():
    # E1's Bonferroni: five placements at 99 % / 5 each make a 99 % family
    intervals = [stats.Interval(0.1, 0.05, 0.15, "t (normal theory)", 0.01 / 5, 8) for _ in range(5)]
    e = claims.Evidence("E1")
    e.check("five placements", True, kind=claims.TRAINING, intervals=intervals)
    assert e.checks[0].failure_probability == pytest.approx(0.01)
    assert "nominal level 0.01" in claims.kind_label(e.checks[0])
    e.check("two placements only", True, kind=claims.TRAINING, intervals=intervals[:2])
    assert e.checks[1].failure_probability == pytest.approx(0.004)


# Item 1: margins and false-failure rates ------------------------------------------------------------

def test_an_exclusion_records_its_margin_in_standard_errors_and_its_false_failure_rate():
    e = claims.Evidence("C3")
    e.beyond("above 0.1", 0.1, _interval(0.2, 0.8, se=0.05), side="below")
    check = e.checks[0]
    assert check.excludes and check.margin_se == pytest.approx(2.0)           # (0.2 − 0.1) / 0.05
    assert check.false_failure == pytest.approx(0.5 * math.erfc(2 / math.sqrt(2)))   # Φ(−2) = 0.0228
    assert check.false_failure_basis == claims.NORMAL_AT_ESTIMATE
    assert "margin 2 SE, false failure ≈ 0.02" in claims.kind_label(check)
    # the margin is to the near end: for side="above" the upper end
    e.beyond("below 0.9", 0.9, _interval(0.2, 0.8, se=0.05), side="above")
    assert e.checks[1].margin_se == pytest.approx(2.0)
    e.beyond("below 0.9, given se", 0.9, _interval(0.2, 0.8), side="above", se=0.025)
    assert e.checks[2].margin_se == pytest.approx(4.0)
    # within checks are not exclusions: their failure probability bounds the wrong fail
    e.within("contains", 0.5, _interval(0.2, 0.8, se=0.05))
    assert not e.checks[3].excludes and e.checks[3].false_failure is None


def test_a_false_failure_rate_given_needs_its_basis_and_an_exclusion_without_one_says_so():
    e = claims.Evidence("C3")
    e.beyond("no standard error known", 0.1, _interval(0.2, 0.8), side="below")
    assert e.checks[0].excludes and e.checks[0].false_failure is None
    assert "false failure not stated" in claims.kind_label(e.checks[0])
    assert "no false-failure rate stated for: no standard error known" in claims.levels_sentence(e.checks)
    e.beyond("simulated", 0.1, _interval(0.2, 0.8), side="below", false_failure=0.0048,
             false_failure_basis="19 failures in 4,000 re-runs")
    assert e.checks[1].false_failure == 0.0048
    with pytest.raises(ValueError, match="basis"):
        e.beyond("no basis", 0.1, _interval(0.2, 0.8), side="below", false_failure=0.01)
    with pytest.raises(ValueError, match="probability in"):
        e.at_least("bad rate", 1.0, 0.0, kind=claims.STATISTICAL, bound="Hoeffding", failure_probability=1e-7,
                   false_failure=1.5, false_failure_basis="x")
    # at_least / at_most on a statistical bound record a margin the caller computed
    e.at_least("lower end above 0", 0.2, 0.0, kind=claims.STATISTICAL, bound="Hoeffding",
               failure_probability=1e-7, margin_se=4.0)
    assert e.checks[-1].excludes and e.checks[-1].false_failure == pytest.approx(3.167e-5, rel=1e-3)


def test_the_false_failure_rate_is_what_re_runs_show():
    """Simulate the re-runs: a Hoeffding check "mean of Bernoulli(p) draws lies above p0", with p
    set so the margin is about 2.3 standard errors; the fraction of re-runs that fail matches
    Φ(−margin) computed from one run (the plug-in at the estimate), within the spread the
    plug-in has (its margin is itself random by ±1 SE)."""
    generator = torch.Generator().manual_seed(38)
    n, delta, p = 400, 1e-7, 0.5
    half = math.sqrt(math.log(2 / delta) / (2 * n))              # Hoeffding half-width, range [0, 1]
    se = math.sqrt(p * (1 - p) / n)
    p0 = p - half - 2.3 * se                                    # true margin 2.3 SE
    runs = 4000
    draws = (torch.rand(runs, n, generator=generator, dtype=torch.float64) < p).double()
    failures = int((draws.mean(dim=1) - half <= p0).sum())
    expected = 0.5 * math.erfc(2.3 / math.sqrt(2))             # 0.0107
    assert abs(failures / runs - expected) <= 4 * math.sqrt(expected / runs)   # 43 ± 26 of 4000
    # the engine's number from one typical run (estimate at p)
    e = claims.Evidence("C3")
    e.beyond("one run", p0, stats.Interval(p, p - half, p + half, "Hoeffding", delta, n, se), side="below")
    assert e.checks[0].false_failure == pytest.approx(expected, rel=1e-9)


def test_the_levels_line_says_what_the_failure_probabilities_bound():
    e = claims.Evidence("C3")
    e.within("contains", 0.5, _interval(0.2, 0.8))
    e.beyond("above 0.1", 0.1, _interval(0.2, 0.8, se=0.02), side="below")
    sentence = claims.levels_sentence(e.checks)
    assert "though the claim holds is at most" not in sentence
    assert "every interval covers its true value with probability at least 1 − 2·10⁻⁷ (union bound)" in sentence
    assert "1 is an exclusion or ordering check (its level bounds a wrong pass)" in sentence
    assert "re-run fails it though the claim holds is ≈ 3·10⁻⁷" in sentence       # Φ(−5)
    assert "smallest margin 5 standard errors" in sentence
    info = claims.levels(e.checks)
    assert info["exclusions"] == 1 and info["smallest_margin_se"] == pytest.approx(5.0)
    assert info["false_failure"] == pytest.approx(2.8665e-7, rel=1e-4)


def test_nominal_levels_of_any_kind_are_shown():
    e = claims.Evidence("E1")
    e.at_least("99 % t lower end of the gain", 0.02, 0.0, kind=claims.TRAINING, bound="t (normal theory)",
               failure_probability=0.01)
    assert claims.kind_label(e.checks[0]) == "training (t (normal theory), nominal level 0.01)"
    assert "1 with nominal levels only" in claims.levels_sentence(e.checks)
    assert "99 % t lower end of the gain (0.01)" in claims.levels_sentence(e.checks)
    e.at_least("plain training check", 0.9, 0.5, kind=claims.TRAINING)
    assert claims.kind_label(e.checks[1]) == "training"


def test_margins_and_rates_compare_within_their_tolerance_across_machines():
    assert claims.margins_agree(5.0, 5.0 * (1 + 1e-5)) and not claims.margins_agree(5.0, 5.1)
    assert claims.margins_agree(None, None) and not claims.margins_agree(None, 5.0)
    assert claims.false_failures_agree(1e-20, 1e-17)              # both negligible
    assert claims.false_failures_agree(0.0107, 0.0108) and not claims.false_failures_agree(0.01, 0.02)


# The exact false-failure rates of the exact intervals, against simulated re-runs -------------------

def test_the_binomial_false_failure_rate_is_what_re_runs_of_the_count_show(gen):
    """A share check "Clopper–Pearson interval of x/n lies above a": the rate is the chance that a
    re-run's count, Binomial(n, (x + ½)/(n + 1)), gives an interval reaching a — simulated here with
    the counts drawn by torch and each re-run's interval computed by clopper_pearson."""
    trials, successes, delta, a = 64, 52, 1e-3, 0.5
    rate = stats.binomial_false_failure(successes, trials, delta, above=a)
    share = (successes + 0.5) / (trials + 1)
    runs = 20_000
    counts = torch.binomial(torch.full((runs,), float(trials), dtype=torch.float64),
                            torch.full((runs,), share, dtype=torch.float64), generator=gen).long()
    fails_at = {c: not stats.clopper_pearson(c, trials, delta).low > a for c in range(trials + 1)}
    failures = sum(fails_at[c] for c in counts.tolist())
    assert 0.005 < rate < 0.5                                   # a rate the simulation can see
    assert abs(failures / runs - rate) <= 5 * math.sqrt(rate * (1 - rate) / runs)
    # both ends: the union of the two tails; 64 of 64 is not a certain pass
    assert stats.binomial_false_failure(trials, trials, 1e-7, above=0.5) > 0
    both = stats.binomial_false_failure(32, 64, 1e-3, above=0.2, below=0.8)
    assert both == pytest.approx(stats.binomial_false_failure(32, 64, 1e-3, above=0.2)
                                 + stats.binomial_false_failure(32, 64, 1e-3, below=0.8), rel=1e-9)
    with pytest.raises(ValueError, match="above= and/or below="):
        stats.binomial_false_failure(3, 10, 0.1)


@pytest.mark.parametrize("side", ["above", "below"])
def test_the_quantile_false_failure_rate_is_what_re_runs_of_the_sample_show(gen, side):
    """A median check "exact quantile interval lies above a" (or below b): the rate assumes the
    chance of a sample beyond the value is (c + ½)/(N + 1), c the observed count; re-runs draw N
    uniforms on [0, 1], where that chance is the value itself, and recompute quantile_interval."""
    n, delta = 101, 1e-3
    samples = torch.linspace(0.005, 0.995, n, dtype=torch.float64)
    value = 0.28 if side == "above" else 0.72                   # about 28 samples beyond it
    kwargs = {side: value}
    rate = stats.quantile_false_failure(samples, 0.5, delta, **kwargs)
    count = int((samples <= value).sum()) if side == "above" else int((samples >= value).sum())
    chance = (count + 0.5) / (n + 1)
    threshold = chance if side == "above" else 1 - chance      # the value with that chance beyond it
    runs = 4000
    draws = torch.rand(runs, n, generator=gen, dtype=torch.float64)
    failures = 0
    for row in draws:
        interval = stats.quantile_interval(row, 0.5, delta)
        failures += not (interval.low > threshold if side == "above" else interval.high < threshold)
    assert 0.01 < rate < 0.5
    assert abs(failures / runs - rate) <= 5 * math.sqrt(rate * (1 - rate) / runs)


def test_an_exclusion_may_state_only_its_false_failure_rate():
    e = claims.Evidence("C3")
    interval = stats.clopper_pearson(64, 64, 1e-7)
    rate = stats.binomial_false_failure(64, 64, 1e-7, above=0.5)
    e.beyond("64 of 64", 0.5, interval, side="below", false_failure=rate, false_failure_basis=stats.PLUG_IN_BASIS)
    label = claims.kind_label(e.checks[0])
    assert "margin" not in label and "false failure" in label and "not stated" not in label


def test_a_nan_standard_error_fails_the_check_without_raising():
    e = claims.Evidence("C3")
    nan = stats.Interval(math.nan, math.nan, math.nan, "Hoeffding", 1e-7, 100, math.nan)
    assert not e.beyond("NaN everywhere", 0.0, nan, side="below")
    assert e.checks[0].margin_se is None and not e.checks[0].passed
    with pytest.raises(ValueError, match="se must be"):
        e.beyond("negative se", 0.0, _interval(0.2, 0.8), side="below", se=-1.0)
