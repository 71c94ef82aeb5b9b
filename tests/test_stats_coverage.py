"""Simulated coverage of every interval helper, with the power to see an interval 2× too narrow.

Each test draws R replications from a law that meets the helper's assumptions, counts how often
the interval misses the true value, and asserts the count is below ``miss_limit(R, δ)``: the
smallest c with P(Binomial(R, δ) ≥ c) ≤ 2.5·10⁻⁷. A correct interval misses with probability at
most δ, so the assertion fails with probability at most 2.5·10⁻⁷ for every seed (the gen fixture
changes with ATTNREF_SEED). In the same test, the same interval with its half-width halved must
miss at least ``miss_limit`` times: the test would have caught it. Its miss rate is given (exactly,
where the law is discrete; by simulation otherwise) so that this, too, fails with probability at
most 2.5·10⁻⁷; a test makes at most four such decisions, ≤ 10⁻⁶ in all.

Asymptotic intervals (CLT, bootstrap, t) have no guaranteed miss rate: they are held to their exact
miss rate where it is known (normal data) or to a stated tolerance above δ.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import binom, t

from attnref.analysis import stats, trained
from attnref.training import results

FALSE_ALARM = 2.5e-7


def miss_limit(replications: int, rate: float) -> int:
    """The smallest c with P(Binomial(R, rate) ≥ c) ≤ FALSE_ALARM."""
    c = int(binom.isf(FALSE_ALARM, replications, rate)) + 1
    assert binom.sf(c - 1, replications, rate) <= FALSE_ALARM < binom.sf(c - 2, replications, rate)
    return c


def assert_detected(narrow_misses: int, replications: int, narrow_rate: float, limit: int) -> None:
    """The 2× narrow interval misses at least ``limit`` times (the test sees it); the design is such
    that it does so except with probability ≤ FALSE_ALARM, given its miss rate ``narrow_rate``."""
    assert binom.cdf(limit - 1, replications, narrow_rate) <= FALSE_ALARM, "the test has too little power"
    assert narrow_misses >= limit


def narrowed(interval: stats.Interval) -> tuple[float, float]:
    """The interval with each side halved towards the estimate (the half-width halved)."""
    return (interval.estimate - (interval.estimate - interval.low) / 2,
            interval.estimate + (interval.high - interval.estimate) / 2)


def bernoulli(rows: int, n: int, p: float, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(rows, n, generator=gen) < p                         # (R, n) bool


def exact_bernoulli_rates(helper, n: int, p: float, true_value: float, window: float = 8.0) -> tuple[float, float]:
    """Exact miss rates (full, 2× narrow) of ``helper`` on n Bernoulli(p) samples: the interval depends
    on the number S of ones only, so it is computed once per S (on a sample with S ones) and weighted
    by P(S); S outside ±window standard deviations is counted as a miss of the narrow interval's
    complement (never helps the power)."""
    sd = math.sqrt(n * p * (1 - p))
    full = narrow = 0.0
    for s in range(max(0, int(n * p - window * sd)), min(n, int(n * p + window * sd)) + 1):
        sample = torch.zeros(n, dtype=torch.float64)
        sample[:s] = 1
        interval = helper(sample)
        low, high = narrowed(interval)
        weight = binom.pmf(s, n, p)
        full += weight * (not interval.contains(true_value))
        narrow += weight * (not low <= true_value <= high)
    return full, narrow


# --- finite-sample bounds ------------------------------------------------------------------------

def test_hoeffding_coverage_and_power(gen):
    # Bernoulli(1/2), the law of largest variance on [0, 1] (where Hoeffding is least loose).
    n, delta, replications = 100, 0.05, 20_000
    helper = lambda x: stats.hoeffding_mean(x, 0.0, 1.0, delta)
    samples = bernoulli(replications, n, 0.5, gen)
    misses = narrow_misses = 0
    for row in samples:
        interval = helper(row)
        low, high = narrowed(interval)
        misses += not interval.contains(0.5)
        narrow_misses += not low <= 0.5 <= high
    limit = miss_limit(replications, delta)
    assert misses < limit
    _, narrow_rate = exact_bernoulli_rates(helper, n, 0.5, 0.5)                   # 0.193
    assert_detected(narrow_misses, replications, narrow_rate, limit)


def test_empirical_bernstein_coverage_and_power(gen):
    # Bernoulli(1/2) at n = 2000: the variance term dominates; the 2× narrow interval misses 8.5 %.
    n, delta, replications = 2000, 0.05, 10_000
    helper = lambda x: stats.empirical_bernstein_mean(x, 0.0, 1.0, delta)
    misses = narrow_misses = 0
    for chunk in range(0, replications, 1000):
        for row in bernoulli(1000, n, 0.5, gen):
            interval = helper(row)
            low, high = narrowed(interval)
            misses += not interval.contains(0.5)
            narrow_misses += not low <= 0.5 <= high
    limit = miss_limit(replications, delta)
    assert misses < limit
    _, narrow_rate = exact_bernoulli_rates(helper, n, 0.5, 0.5)                   # 0.085
    assert_detected(narrow_misses, replications, narrow_rate, limit)


def test_empirical_bernstein_needs_its_second_term(gen):
    # Bernoulli(0.01) at n = 100: 37 % of the samples are all zeros (V = 0), where only the second
    # term 7 ln(4/δ)/(3(n − 1)) keeps μ = 0.01 inside; the first term alone misses 37 % of the time.
    n, p, delta, replications = 100, 0.01, 0.05, 20_000
    misses = first_term_misses = 0
    for row in bernoulli(replications, n, p, gen):
        interval = stats.empirical_bernstein_mean(row, 0.0, 1.0, delta)
        first_term = math.sqrt(2 * row.double().var().item() * math.log(4 / delta) / n)
        misses += not interval.contains(p)
        first_term_misses += abs(interval.estimate - p) > first_term
    limit = miss_limit(replications, delta)
    assert misses < limit
    assert_detected(first_term_misses, replications, binom.pmf(0, n, p), limit)   # S = 0 alone: 0.366


def test_median_of_means_coverage_and_power(gen):
    # The law where Chebyshev is tight: X = ±a with probability 0.45 each, 0 otherwise; Var X = 0.9 a² = 1
    # (the bound σ² = 1 is exact). One sample per block (N = k = ⌈8 ln 20⌉ = 24): the radius 2σ√(k/N) = 2
    # exceeds a = 1.054, so the median (one of −a, 0, a) is always inside; halved (1 < a), the interval
    # misses whenever the median is ±a: with probability 1 − P(lower median = 0) ≥ 0.9.
    delta, replications, a = 0.05, 20_000, 1 / math.sqrt(0.9)
    blocks = math.ceil(8 * math.log(1 / delta))
    u = torch.rand(replications, blocks, generator=gen, dtype=torch.float64)
    samples = torch.where(u < 0.45, -a, torch.where(u < 0.9, a, 0.0))            # (R, k)
    misses = narrow_misses = 0
    for row in samples:
        interval = stats.median_of_means(row, 1.0, delta)
        low, high = narrowed(interval)
        misses += not interval.contains(0.0)
        narrow_misses += not low <= 0.0 <= high
    limit = miss_limit(replications, delta)
    assert misses < limit
    # The lower median (the 12th smallest, torch's median) is 0 iff #{−a} ≤ 11 and #{−a} + #{0} ≥ 12.
    half = blocks // 2
    zero_median = sum(math.factorial(blocks) / (math.factorial(i) * math.factorial(j) * math.factorial(blocks - i - j))
                      * 0.45 ** i * 0.1 ** j * 0.45 ** (blocks - i - j)
                      for i in range(half) for j in range(half - i, blocks - i + 1))
    assert_detected(narrow_misses, replications, 1 - zero_median, limit)          # 0.93


def test_median_of_means_coverage_on_a_heavy_tailed_law(gen):
    # Student t with 3 degrees of freedom (no third moment), scaled to variance 1; 19 blocks of 40.
    # (No power check here: with many samples per block the Chebyshev radius is ~4× the spread.)
    delta, replications, n = 0.1, 3000, 760
    normal = torch.randn(replications, n, 4, generator=gen, dtype=torch.float64)
    t3 = normal[..., 0] / (normal[..., 1:] ** 2).mean(-1).sqrt() / math.sqrt(3)     # Var t₃ = 3
    misses = sum(not stats.median_of_means(row, 1.0, delta).contains(0.0) for row in t3)
    assert misses < miss_limit(replications, delta)


def test_dkw_coverage_and_power(gen):
    # Uniform samples, F(x) = x. Massart's constant is sharp: the miss rate is close to δ (about 0.18
    # at n = 50); the 2× narrow band misses 92 % of the time (simulated, 20 000 replications; Kolmogorov's
    # limit P(√n D > 0.54) = 0.93); the power is checked at 0.8.
    n, delta, replications = 50, 0.2, 5000
    samples = torch.rand(replications, n, generator=gen, dtype=torch.float64)
    misses = narrow_misses = 0
    for row in samples:
        distance, epsilon = stats.dkw_distance(row, lambda v: v, delta)
        misses += distance > epsilon
        narrow_misses += distance > epsilon / 2
    limit = miss_limit(replications, delta)
    assert misses < limit
    assert_detected(narrow_misses, replications, 0.8, limit)


def test_clopper_pearson_coverage_and_power(gen):
    # Binomial(50, 0.3) counts; the interval depends on the count only (computed once per count).
    trials, p, delta, replications = 50, 0.3, 0.05, 100_000
    counts = torch.binomial(torch.full((replications,), float(trials), dtype=torch.float64),
                            torch.full((replications,), p, dtype=torch.float64), generator=gen).long()
    values, frequency = counts.unique(return_counts=True)
    misses = narrow_misses = 0
    miss_of, narrow_of = {}, {}
    for s in range(trials + 1):
        interval = stats.clopper_pearson(s, trials, delta)
        low, high = narrowed(interval)
        miss_of[s], narrow_of[s] = not interval.contains(p), not low <= p <= high
    for s, f in zip(values.tolist(), frequency.tolist()):
        misses += f * miss_of[s]
        narrow_misses += f * narrow_of[s]
    limit = miss_limit(replications, delta)
    assert misses < limit
    narrow_rate = sum(binom.pmf(s, trials, p) for s in range(trials + 1) if narrow_of[s])   # 0.28, exactly
    assert_detected(narrow_misses, replications, narrow_rate, limit)


@pytest.mark.parametrize("quantile, delta", [(0.5, 0.05), (0.75, 0.2)])
def test_quantile_interval_coverage_and_power(gen, quantile, delta):
    # Uniform samples: ξ_q = q. The interval misses when B = #{X ≤ q} < l or ≥ u.
    n, replications = 101, 4000
    samples = torch.rand(replications, n, generator=gen, dtype=torch.float64)
    misses = narrow_misses = 0
    for row in samples:
        interval = stats.quantile_interval(row, quantile, delta)
        low, high = narrowed(interval)
        misses += not interval.contains(quantile)
        narrow_misses += not low <= quantile <= high
    limit = miss_limit(replications, delta)
    assert misses < limit
    # the halved interval spans about half the ranks: it misses 30 % (δ = 0.05) and 47 % (δ = 0.2) of
    # the time (simulated, 20 000 replications); the power is checked at 0.2 and 0.35
    assert_detected(narrow_misses, replications, 0.2 if delta == 0.05 else 0.35, limit)


def test_binomial_upper_tail_test_has_its_level_and_power(gen):
    # As a test of "rate ≤ p": reject when P(B ≥ S) ≤ δ. Under rate = p the rejection rate is ≤ δ
    # (0.046 here); a tail 2× too small (the analogue of a 2× narrow interval) rejects 9.7 % of the time.
    trials, p, delta, replications = 1000, 0.2, 0.05, 100_000
    counts = torch.binomial(torch.full((replications,), float(trials), dtype=torch.float64),
                            torch.full((replications,), p, dtype=torch.float64), generator=gen).long()
    values, frequency = counts.unique(return_counts=True)
    tails = {s: stats.binomial_upper_tail(s, trials, p) for s in values.tolist()}
    rejections = sum(f for s, f in zip(values.tolist(), frequency.tolist()) if tails[s] <= delta)
    halved = sum(f for s, f in zip(values.tolist(), frequency.tolist()) if tails[s] / 2 <= delta)
    limit = miss_limit(replications, delta)
    assert rejections < limit
    halved_rate = sum(binom.pmf(s, trials, p) for s in range(trials + 1) if binom.sf(s - 1, trials, p) / 2 <= delta)
    assert_detected(halved, replications, halved_rate, limit)


# --- asymptotic intervals ------------------------------------------------------------------------

def two_sided_limits(replications: int, rate: float) -> tuple[int, int]:
    """(a, c): P(Binomial(R, rate) ≤ a) ≤ FALSE_ALARM and P(≥ c) ≤ FALSE_ALARM."""
    return int(binom.ppf(FALSE_ALARM, replications, rate)) - 1, miss_limit(replications, rate)


def test_clt_mean_and_mean_estimate_have_their_exact_miss_rate_on_normal_data(gen):
    # For normal data (x̄ − μ)/(s/√n) is Student t with n − 1 degrees of freedom, so the CLT band's
    # miss rate is exactly 2 P(T > z) (0.1008 at n = 200, δ = 0.1): held to it from both sides.
    n, delta, replications = 200, 0.1, 10_000
    z = stats.normal_quantile(delta)
    samples = torch.randn(replications, n, generator=gen, dtype=torch.float64)
    misses = narrow_misses = band_misses = 0
    for row in samples:
        interval = stats.clt_mean(row, delta)
        low, high = narrowed(interval)
        misses += not interval.contains(0.0)
        narrow_misses += not low <= 0.0 <= high
        band_misses += not stats.mean_estimate(row, z).contains(0.0)
    exact = 2 * t.sf(z, n - 1)
    below, limit = two_sided_limits(replications, exact)
    assert below < misses < limit and below < band_misses < limit
    assert_detected(narrow_misses, replications, 2 * t.sf(z / 2, n - 1), limit)   # 0.41
    assert not interval.guaranteed


def test_clt_variance_coverage_on_normal_data(gen):
    # Asymptotic: at n = 1000 on normal data the miss rate is 0.053 for δ = 0.05 (simulated, 75 000
    # replications); held to at most 0.065. The 2× narrow band misses 33 %.
    n, delta, replications = 1000, 0.05, 4000
    z = stats.normal_quantile(delta)
    samples = torch.randn(replications, n, generator=gen, dtype=torch.float64)
    misses = narrow_misses = band_misses = 0
    for row in samples:
        interval = stats.clt_variance(row, delta)
        low, high = narrowed(interval)
        misses += not interval.contains(1.0)
        narrow_misses += not low <= 1.0 <= high
        band_misses += not stats.variance_estimate(row, z).contains(1.0)
    limit = miss_limit(replications, 0.065)
    assert misses < limit and band_misses < limit
    assert_detected(narrow_misses, replications, 0.3, limit)
    assert not interval.guaranteed


def test_bootstrap_interval_coverage_on_normal_data(gen):
    # The bootstrap interval of a mean (n = 100, 100 resamples): asymptotic, miss rate ≈ 0.11 for δ = 0.1
    # (simulated); held to at most 0.14. The 2× narrow interval misses about 41 %.
    n, resamples, delta, replications, chunk = 100, 100, 0.1, 2000, 200
    misses = narrow_misses = 0
    for _ in range(replications // chunk):
        x = torch.randn(chunk, n, generator=gen, dtype=torch.float64)                         # (C, n)
        counts = trained.bootstrap_counts(n, chunk * resamples, gen).reshape(chunk, resamples, n)
        replicates = (counts @ x[:, :, None]).squeeze(-1) / n       # (C, B, n) @ (C, n, 1) -> (C, B)
        for mean, rep in zip(x.mean(dim=1), replicates):
            interval = trained.bootstrap_interval(mean, rep, delta)
            low, high = narrowed(interval)
            misses += not interval.contains(0.0)
            narrow_misses += not low <= 0.0 <= high
    limit = miss_limit(replications, 0.14)
    assert misses < limit
    assert_detected(narrow_misses, replications, 0.35, limit)
    assert not interval.guaranteed


def test_paired_t_has_its_exact_miss_rate_on_normal_differences(gen):
    # Normal differences: the t interval misses with probability exactly 1 − level; held to it from
    # both sides. Halved, it misses 2 P(T₇ > t/2) = 0.38.
    k, level, replications = 8, 0.9, 5000
    differences = torch.randn(replications, k, generator=gen, dtype=torch.float64) * 0.02 + 0.01
    misses = narrow_misses = 0
    for row in differences.tolist():
        interval = results.paired_t(row, level)
        low, high = narrowed(interval)
        misses += not interval.contains(0.01)
        narrow_misses += not low <= 0.01 <= high
    below, limit = two_sided_limits(replications, 1 - level)
    assert below < misses < limit
    assert_detected(narrow_misses, replications, 2 * t.sf(t.isf((1 - level) / 2, k - 1) / 2, k - 1), limit)


# --- Clopper–Pearson at the edges (x = 0 and x = n), δ = 10⁻⁷ ---------------------------------------
# Chapter 7 records 64 of 64 draws. At x = n the binomial tail P(B ≥ n | p) = pⁿ, so the two-sided
# Clopper–Pearson (1934) lower end solves pⁿ = δ/2: (δ/2)^{1/n}, and the upper end is 1; at x = 0,
# symmetrically, [0, 1 − (δ/2)^{1/n}] (the published two-sided form, e.g. Brown, Cai & DasGupta 2001,
# "Interval estimation for a binomial proportion", §4.2.1; the one-sided form δ^{1/n} is the other
# parametrisation, which stats.clopper_pearson does not use: its ends are δ/2 tails).

EDGE_DELTA = 1e-7


@pytest.mark.parametrize("trials", [1, 2, 16, 64, 1000])
def test_clopper_pearson_at_all_successes_is_the_closed_form(trials):
    interval = stats.clopper_pearson(trials, trials, EDGE_DELTA)
    assert interval.low == pytest.approx((EDGE_DELTA / 2) ** (1 / trials), rel=1e-12)
    assert interval.high == 1.0 and interval.estimate == 1.0
    assert interval.low != pytest.approx(EDGE_DELTA ** (1 / trials), rel=1e-6)     # not the one-sided form
    # the lower end is where the chance of n successes is exactly δ/2
    assert interval.low ** trials == pytest.approx(EDGE_DELTA / 2, rel=1e-9)


@pytest.mark.parametrize("trials", [1, 2, 16, 64, 1000])
def test_clopper_pearson_at_no_success_is_the_closed_form(trials):
    interval = stats.clopper_pearson(0, trials, EDGE_DELTA)
    assert interval.low == 0.0 and interval.estimate == 0.0
    # 1 − (δ/2)^{1/n} written as −expm1(ln(δ/2)/n): no cancellation when the root is close to 1
    assert interval.high == pytest.approx(-math.expm1(math.log(EDGE_DELTA / 2) / trials), rel=1e-12)
    assert (1 - interval.high) ** trials == pytest.approx(EDGE_DELTA / 2, rel=1e-9)


@pytest.mark.parametrize("trials", [16, 64])
def test_clopper_pearson_edge_coverage_is_exact_at_the_boundary(trials):
    """The miss probability at p, summed exactly over every count: at most δ for every p, and
    it jumps by δ/2 where p crosses the edge (the event "all n succeed" starts to miss): the
    edge interval is neither too narrow nor needlessly wide."""
    intervals = [stats.clopper_pearson(s, trials, EDGE_DELTA) for s in range(trials + 1)]
    edge = (EDGE_DELTA / 2) ** (1 / trials)

    def miss(p: float) -> float:
        return math.fsum(binom.pmf(s, trials, p) for s, iv in enumerate(intervals) if not iv.low <= p <= iv.high)

    for p in [1e-12, 1e-6, 1 - edge, 0.5, edge * (1 - 1e-6), edge, edge * (1 + 1e-6), 1 - 1e-6]:
        assert miss(p) <= EDGE_DELTA * (1 + 1e-9)
    just_below, just_above = edge * (1 - 1e-6), edge * (1 + 1e-6)
    assert not intervals[trials].contains(just_below) and intervals[trials].contains(just_above)
    # crossing the edge adds the event "all n succeed" to the misses: a jump of pⁿ = δ/2
    assert miss(just_below) - miss(just_above) == pytest.approx(EDGE_DELTA / 2, rel=1e-3)
    assert miss(1 - just_below) - miss(1 - just_above) == pytest.approx(EDGE_DELTA / 2, rel=1e-3)  # x = 0


@pytest.mark.parametrize("p", [0.93, 0.97, 0.999])
def test_clopper_pearson_edge_coverage_by_simulation(gen, p):
    """Binomial(64, p) counts near 1, where x = n is frequent (P = 1 % … 94 %): the two-sided
    δ = 0.05 interval misses p at most the allowed number of times, and at p = 0.93, just below
    the edge (0.025)^{1/64} = 0.944, the misses (almost all x = 64) reach δ/2's order — an edge
    put at δ^{1/64} (one-sided) or the x = n interval taken as [0, 1] would move them."""
    trials, delta, replications = 64, 0.05, 200_000
    counts = torch.binomial(torch.full((replications,), float(trials), dtype=torch.float64),
                            torch.full((replications,), p, dtype=torch.float64), generator=gen).long()
    miss_of = {s: not stats.clopper_pearson(s, trials, delta).contains(p) for s in range(trials + 1)}
    misses = sum(f * miss_of[s] for s, f in zip(*(v.tolist() for v in counts.unique(return_counts=True))))
    assert misses < miss_limit(replications, delta)
    exact = math.fsum(binom.pmf(s, trials, p) for s in range(trials + 1) if miss_of[s])
    assert abs(misses - replications * exact) <= 6 * math.sqrt(replications * exact) + 1
    if p == 0.93:                                        # below the edge: 64 of 64 excludes p
        assert miss_of[trials] and exact >= p ** trials  # 0.93⁶⁴ = 0.0096 of the misses
        assert misses >= replications * p ** trials - 6 * math.sqrt(replications * p ** trials)
