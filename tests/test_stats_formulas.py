"""Every bound helper of attnref.analysis.stats (and the t and bootstrap intervals) against its
published formula, written out here independently, at fixed inputs, to 1e-12 relative.

A bug in a constant (ln(1/δ) for ln(2/δ)), a missing term, a wrong δ split or the wrong estimator
(mean of the block means for their median) changes a number here. The coverage of each interval
is tested by simulation in test_stats_coverage.py.
"""

from __future__ import annotations

import itertools
import math
import statistics
from fractions import Fraction

import mpmath as mp
import pytest
import torch
from scipy.stats import kstest, norm, t

from attnref.analysis import stats, trained
from attnref.training import results

REL = 1e-12


def fixed_samples(n: int, low: float, high: float) -> torch.Tensor:
    """n float64 samples in [low, high], skewed (so mean, median and variance differ), fixed."""
    g = torch.Generator().manual_seed(20240525)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    return low + (high - low) * u ** 3


def fsum_mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def sample_variance(values: list[float]) -> float:
    """Σ (x − x̄)² / (n − 1)."""
    m = fsum_mean(values)
    return math.fsum((v - m) ** 2 for v in values) / (len(values) - 1)


def assert_interval(interval: stats.Interval, estimate: float, low: float, high: float, bound: str,
                    delta: float, samples: int) -> None:
    assert interval.estimate == pytest.approx(estimate, rel=REL, abs=1e-15)
    assert interval.low == pytest.approx(low, rel=REL, abs=1e-15)
    assert interval.high == pytest.approx(high, rel=REL, abs=1e-15)
    assert (interval.bound, interval.failure_probability, interval.samples) == (bound, delta, samples)


# --- Hoeffding -----------------------------------------------------------------------------------

@pytest.mark.parametrize("n, low, high, delta", [(50, 0.0, 1.0, 0.1), (1000, -1.0, 3.0, 1e-7), (7, 2.0, 2.5, 0.5)])
def test_hoeffding_half_width_is_the_published_formula(n, low, high, delta):
    # Hoeffding (1963), Theorem 2, two tails: P(|X̄ − μ| ≥ t) ≤ 2 exp(−2 n t² / (b − a)²) = δ
    # ⇔ t = (b − a) √(ln(2/δ) / (2n)).
    x = fixed_samples(n, low, high)
    mean = fsum_mean(x.tolist())
    half = (high - low) * math.sqrt(math.log(2 / delta) / (2 * n))
    assert_interval(stats.hoeffding_mean(x, low, high, delta), mean, mean - half, mean + half, "Hoeffding", delta, n)


# --- empirical Bernstein -------------------------------------------------------------------------

def maurer_pontil_theorem_4(unit_samples: list[float], delta: float) -> float:
    """Maurer & Pontil (2009), Theorem 4, for samples in [0, 1]: with probability ≥ 1 − δ,
    E Z − mean(Z) ≤ √(2 V_n ln(2/δ) / n) + 7 ln(2/δ) / (3 (n − 1)), V_n the sample variance
    (1/(n(n−1)) Σ_{i<j} (Z_i − Z_j)², which is Σ (Z_i − Z̄)² / (n − 1))."""
    n = len(unit_samples)
    pairs = math.fsum((a - b) ** 2 for i, a in enumerate(unit_samples) for b in unit_samples[i + 1:])
    v_n = pairs / (n * (n - 1))
    return math.sqrt(2 * v_n * math.log(2 / delta) / n) + 7 * math.log(2 / delta) / (3 * (n - 1))


@pytest.mark.parametrize("n, low, high, delta", [(40, 0.0, 1.0, 0.1), (300, -2.0, 6.0, 1e-7), (2, 0.0, 1.0, 0.5)])
def test_empirical_bernstein_half_width_is_theorem_4_on_both_sides(n, low, high, delta):
    # Two-sided on [a, b]: Theorem 4 for (X − a)/(b − a) and for (b − X)/(b − a), each at δ/2
    # (a union bound), scaled back by (b − a): ln(2/(δ/2)) = ln(4/δ).
    x = fixed_samples(n, low, high)
    values = x.tolist()
    unit = [(v - low) / (high - low) for v in values]
    half = (high - low) * maurer_pontil_theorem_4(unit, delta / 2)
    # the same by the docstring's formula, with V = Σ (x − x̄)² / (n − 1) on the original scale
    direct = (math.sqrt(2 * sample_variance(values) * math.log(4 / delta) / n)
              + 7 * (high - low) * math.log(4 / delta) / (3 * (n - 1)))
    assert half == pytest.approx(direct, rel=REL)
    mean = fsum_mean(values)
    assert_interval(stats.empirical_bernstein_mean(x, low, high, delta), mean, mean - half, mean + half,
                    "empirical Bernstein", delta, n)


def test_empirical_bernstein_with_zero_variance_keeps_its_second_term():
    # All samples equal: V = 0, and the half-width is the second term 7 (b − a) ln(4/δ) / (3(n − 1)).
    x = torch.full((30,), 0.25, dtype=torch.float64)
    interval = stats.empirical_bernstein_mean(x, 0.0, 2.0, 0.01)
    assert interval.half_width == pytest.approx(7 * 2.0 * math.log(4 / 0.01) / (3 * 29), rel=REL)


# --- median of means -----------------------------------------------------------------------------

def median_of_means_reference(values: list[float], variance_bound: float, delta: float) -> tuple[float, float, int]:
    """Lugosi & Mendelson (2019), Theorem 2 and its proof: k = ⌈8 ln(1/δ)⌉ blocks of m = ⌊n/k⌋
    consecutive samples (the rest unused); the estimate is a median of the k block means (the lower
    one when k is even: both are covered by the proof); by Chebyshev a block mean is off by more than
    2σ/√m with probability ≤ 1/4, and by Hoeffding ≥ k/2 blocks are off with probability
    ≤ exp(−2k(1/4)²) = exp(−k/8) ≤ δ: radius 2σ/√m = 2σ √(k/N), N = k m."""
    k = math.ceil(8 * math.log(1 / delta))
    m = len(values) // k
    block_means = [fsum_mean(values[i * m:(i + 1) * m]) for i in range(k)]
    return statistics.median_low(block_means), 2 * math.sqrt(variance_bound) / math.sqrt(m), k * m


@pytest.mark.parametrize("n, delta", [(200, 0.2), (1000, 0.05), (5000, 1e-7), (130, 1e-7)])
def test_median_of_means_is_the_median_of_block_means_with_the_proved_radius(n, delta):
    # Samples with large outliers, so the median of the block means is far from their mean.
    x = fixed_samples(n, 0.0, 1.0)
    x[::17] = 1e3
    variance_bound = 2.5
    estimate, half, used = median_of_means_reference(x.tolist(), variance_bound, delta)
    assert abs(estimate - x[:used].mean().item()) > 1.0          # the mean of the block means is far off
    assert_interval(stats.median_of_means(x, variance_bound, delta), estimate, estimate - half, estimate + half,
                    "median of means", delta, used)


def test_median_of_means_radius_is_not_below_the_proved_one():
    # δ = 0.2: 8 ln 5 = 12.88, so k = 13 blocks; the theorem's σ √(32 ln(1/δ)/N) = 2σ √(12.88/N) is
    # smaller than the 2σ √(13/N) its proof shows, and the proof says nothing about the smaller one.
    # (This failed before the radius was 2σ √(k/N).)
    x = fixed_samples(130, 0.0, 1.0)
    interval = stats.median_of_means(x, 1.0, 0.2)
    assert interval.half_width >= 2 * math.sqrt(13 / 130) * (1 - 1e-15)
    assert interval.half_width > math.sqrt(32 * math.log(5) / 130)


# --- DKW -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, delta", [(20, 0.2), (500, 0.05), (3000, 1e-7)])
def test_dkw_distance_and_massart_bound(n, delta):
    # D is the two-sided Kolmogorov–Smirnov statistic (scipy's kstest as the independent oracle);
    # ε = √(ln(2/δ) / (2n)) from Massart (1990): P(D > ε) ≤ 2 exp(−2nε²) = δ.
    g = torch.Generator().manual_seed(n)
    x = -torch.log(torch.rand(n, generator=g, dtype=torch.float64)) * 2.0          # exponential, mean 2
    cdf = lambda v: 1 - torch.exp(-v / 2.0)
    distance, epsilon = stats.dkw_distance(x, cdf, delta)
    oracle = kstest(x.numpy(), lambda v: 1 - __import__("numpy").exp(-v / 2.0)).statistic
    assert distance == pytest.approx(oracle, rel=REL)
    assert epsilon == pytest.approx(math.sqrt(math.log(2 / delta) / (2 * n)), rel=REL)


def test_dkw_distance_sees_a_one_sided_deviation():
    # Every sample below its quantile: the largest gap is F(x) − (i − 1)/n on the other side of a jump.
    x = torch.tensor([0.0, 0.0, 0.0, 0.9], dtype=torch.float64)
    distance, _ = stats.dkw_distance(x, lambda v: v, 0.1)                         # uniform CDF
    assert distance == pytest.approx(0.75, rel=REL)
    distance, _ = stats.dkw_distance(torch.tensor([0.1, 0.95, 0.97, 0.99], dtype=torch.float64), lambda v: v, 0.1)
    assert distance == pytest.approx(0.95 - 0.25, rel=REL)                      # F(x_(2)) − 1/n


# --- Clopper–Pearson -----------------------------------------------------------------------------

mp.mp.dps = 50    # the references below are sums and roots in 50-digit arithmetic


def mp_cdf(k: int, n: int, p) -> mp.mpf:
    """P(B ≤ k) = Σ_{j ≤ k} C(n, j) p^j (1 − p)^(n − j), in mpmath (p the binary fraction a float holds)."""
    p = mp.mpf(p)
    return mp.fsum(mp.binomial(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k + 1))


def root(function, guess: float) -> float:
    return float(mp.findroot(function, mp.mpf(guess)))


@pytest.mark.parametrize("successes, trials, delta", [(0, 10, 0.05), (3, 10, 0.05), (7, 20, 1e-7), (20, 20, 0.1),
                                                      (250, 1000, 1e-6), (1, 400, 0.2)])
def test_clopper_pearson_bounds_solve_the_binomial_tail_equations(successes, trials, delta):
    # Clopper & Pearson (1934): low solves P(B ≥ x | p) = δ/2, high solves P(B ≤ x | p) = δ/2
    # (0 when x = 0, 1 when x = n). Solved here on the binomial tails, not the beta quantiles.
    interval = stats.clopper_pearson(successes, trials, delta)   # its ends are the starting points
    half = mp.mpf(delta) / 2
    low = 0.0 if successes == 0 else root(lambda p: 1 - mp_cdf(successes - 1, trials, p) - half, interval.low)
    high = 1.0 if successes == trials else root(lambda p: mp_cdf(successes, trials, p) - half, interval.high)
    assert_interval(interval, successes / trials, low, high, "Clopper–Pearson", delta, trials)


# --- the binomial tails and the order-statistic ranks --------------------------------------------

@pytest.mark.parametrize("successes, trials, p", [(0, 10, 0.3), (3, 10, 0.5), (7, 20, 0.1), (20, 20, 0.9),
                                                  (2, 400, 1e-7), (60, 200, 0.2), (150, 200, 0.5)])
def test_binomial_upper_tail_is_the_exact_sum(successes, trials, p):
    # P(B ≥ s) = Σ_{j ≥ s} C(n, j) p^j (1 − p)^(n − j), summed in rationals.
    q = Fraction(p)
    expected = sum((math.comb(trials, j) * q ** j * (1 - q) ** (trials - j) for j in range(successes, trials + 1)),
                   Fraction(0))
    assert stats.binomial_upper_tail(successes, trials, p) == pytest.approx(float(expected), rel=REL)


@pytest.mark.parametrize("n, p", [(10, 0.3), (101, 0.5), (60, 0.9)])
def test_log_binomial_cdf_and_sf_are_the_exact_sums(n, p):
    log_cdf = stats._log_binomial_cdf(n, p)
    log_sf = stats._log_binomial_sf(n, p)
    for k in range(n + 1):
        cdf = mp_cdf(k, n, p)
        assert math.exp(log_cdf[k].item()) == pytest.approx(float(cdf), rel=REL)
        assert math.exp(log_sf[k].item()) == pytest.approx(float(1 - cdf), rel=REL, abs=1e-300)


@pytest.mark.parametrize("n, quantile, delta", [(101, 0.5, 0.05), (60, 0.25, 0.1), (300, 0.9, 1e-3), (2000, 0.5, 1e-7)])
def test_quantile_interval_ranks_are_the_exact_binomial_ranks(n, quantile, delta):
    # B = #{X ≤ ξ_q} ~ Binomial(n, q): X_(l) > ξ ⇔ B ≤ l − 1 and X_(u) < ξ ⇔ B ≥ u. The lower rank is
    # the largest l with P(B ≤ l − 1) ≤ δ/2, the upper the smallest u with P(B ≥ u) ≤ δ/2; the
    # estimate is X_(⌈qn⌉). Ranks found here from rational CDFs; the samples are a shuffle of 1..n,
    # so the interval's ends are the ranks.
    half = mp.mpf(delta) / 2
    pmf = [(1 - mp.mpf(quantile)) ** n]
    for j in range(1, n + 1):           # C(n, j) q^j (1 − q)^(n − j) from C(n, j − 1) …
        pmf.append(pmf[-1] * (n - j + 1) / j * mp.mpf(quantile) / (1 - mp.mpf(quantile)))
    cdf = list(itertools.accumulate(pmf))                      # cdf[k] = P(B ≤ k)
    lower = max(rank for rank in range(1, n + 1) if cdf[rank - 1] <= half)
    upper = min(rank for rank in range(1, n + 1) if 1 - cdf[rank - 1] <= half)
    g = torch.Generator().manual_seed(n)
    x = (torch.randperm(n, generator=g) + 1).double()
    interval = stats.quantile_interval(x, quantile, delta)
    assert (interval.low, interval.high) == (lower, upper)
    assert interval.estimate == math.ceil(quantile * n)
    assert (interval.bound, interval.failure_probability, interval.samples) == ("exact", delta, n)


# --- CLT, the older z-bands, the t interval and the bootstrap ------------------------------------

@pytest.mark.parametrize("delta", [0.2, 0.05, 1e-7])
def test_normal_quantile_is_scipys(delta):
    assert stats.normal_quantile(delta) == pytest.approx(norm.isf(delta / 2), rel=REL)


@pytest.mark.parametrize("n, delta", [(30, 0.1), (1000, 1e-7)])
def test_clt_mean_and_mean_estimate(n, delta):
    # x̄ ± z s/√n, s² = Σ (x − x̄)² / (n − 1), z = Φ⁻¹(1 − δ/2).
    x = fixed_samples(n, -1.0, 5.0)
    values = x.tolist()
    mean, z = fsum_mean(values), norm.isf(delta / 2)
    half = z * math.sqrt(sample_variance(values)) / math.sqrt(n)
    interval = stats.clt_mean(x, delta)
    assert_interval(interval, mean, mean - half, mean + half, "CLT (asymptotic)", delta, n)
    estimate = stats.mean_estimate(x, z=3.0)
    assert estimate.value == pytest.approx(mean, rel=REL)
    assert estimate.half_width == pytest.approx(3.0 * math.sqrt(sample_variance(values)) / math.sqrt(n), rel=REL)


def variance_of_sample_variance(values: list[float]) -> tuple[float, float]:
    """s² and the plug-in Var(s²) = (μ₄ − σ⁴ (n − 3)/(n − 1)) / n (e.g. Cramér 1946, §27.4; Rao
    1973 §3a), with μ₄ = Σ (x − x̄)⁴ / n and σ² = s²."""
    n = len(values)
    m = fsum_mean(values)
    s2 = sample_variance(values)
    mu4 = math.fsum((v - m) ** 4 for v in values) / n
    return s2, (mu4 - s2 ** 2 * (n - 3) / (n - 1)) / n


@pytest.mark.parametrize("n, delta", [(30, 0.1), (1000, 1e-7)])
def test_clt_variance_and_variance_estimate(n, delta):
    x = fixed_samples(n, -1.0, 5.0)
    s2, var_s2 = variance_of_sample_variance(x.tolist())
    half = norm.isf(delta / 2) * math.sqrt(var_s2)
    interval = stats.clt_variance(x, delta)
    assert_interval(interval, s2, s2 - half, s2 + half, "CLT (asymptotic)", delta, n)
    estimate = stats.variance_estimate(x, z=2.0)
    assert (estimate.value, estimate.half_width) == (pytest.approx(s2, rel=REL), pytest.approx(2.0 * math.sqrt(var_s2), rel=REL))


@pytest.mark.parametrize("k, level", [(2, 0.95), (5, 0.95), (10, 0.99), (30, 0.8)])
def test_paired_t_is_the_student_interval(k, level):
    # D̄ ± t_{(1+level)/2, k−1} s / √k (Student 1908), s with denominator k − 1.
    differences = fixed_samples(k, -0.2, 0.3).tolist()
    mean = fsum_mean(differences)
    half = t.ppf(0.5 + level / 2, k - 1) * math.sqrt(sample_variance(differences)) / math.sqrt(k)
    interval = results.paired_t(differences, level)
    assert_interval(interval, mean, mean - half, mean + half, "t (normal theory)", pytest.approx(1 - level, rel=REL), k)
    assert results.t_quantile(level, k - 1) == pytest.approx(t.ppf(0.5 + level / 2, k - 1), rel=REL)


@pytest.mark.parametrize("delta", [0.1, 1e-6])
def test_bootstrap_interval_and_band(delta):
    # Normal-approximation bootstrap: estimate ± z sd*(replicates), sd* with denominator B − 1.
    replicates = fixed_samples(500, 0.0, 1.0)
    values = replicates.tolist()
    half = norm.isf(delta / 2) * math.sqrt(sample_variance(values))
    interval = trained.bootstrap_interval(0.3, replicates, delta)
    assert_interval(interval, 0.3, 0.3 - half, 0.3 + half, "bootstrap (asymptotic)", delta, 500)
    low, high = trained.bootstrap_band(torch.tensor([0.3], dtype=torch.float64), replicates[:, None], delta)
    assert (low.item(), high.item()) == (pytest.approx(0.3 - half, rel=REL), pytest.approx(0.3 + half, rel=REL))


# --- which failure probabilities are guarantees --------------------------------------------------

def test_only_finite_sample_and_exact_bounds_are_guaranteed():
    from attnref.book import claims

    x = fixed_samples(200, 0.0, 1.0)
    guaranteed = [stats.hoeffding_mean(x, 0, 1, 0.1), stats.empirical_bernstein_mean(x, 0, 1, 0.1),
                  stats.median_of_means(x, 1.0, 0.1), stats.clopper_pearson(3, 10, 0.1),
                  stats.quantile_interval(x, 0.5, 0.1)]
    asymptotic = [stats.clt_mean(x, 0.1), stats.clt_variance(x, 0.1), results.paired_t(x[:5].tolist(), 0.9),
                  trained.bootstrap_interval(0.5, x, 0.1)]
    assert all(i.guaranteed for i in guaranteed) and not any(i.guaranteed for i in asymptotic)
    assert stats.GUARANTEED_BOUNDS <= set(claims.BOUNDS)
    # every label the book knows is either a guarantee or nominal (asymptotic, or normal theory)
    assert all((b in stats.GUARANTEED_BOUNDS) != (b in claims.NOMINAL_BOUNDS) for b in claims.BOUNDS)
    assert all("asymptotic" in b or "normal theory" in b for b in claims.NOMINAL_BOUNDS)
