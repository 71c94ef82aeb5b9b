"""attnref.analysis.stats: the order-statistic quantile interval and the exact binomial tail."""

from __future__ import annotations

import math

import pytest
import torch

from attnref.analysis import stats


def binomial_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k + 1))


def test_quantile_interval_ranks_have_the_stated_coverage():
    # The interval is [X_(l), X_(u)]: it misses the median when B = #{X ≤ ξ} < l or ≥ u.
    n, delta = 200, 1e-3
    samples = torch.arange(1, n + 1, dtype=torch.float64)             # X_(r) = r
    interval = stats.quantile_interval(samples, 0.5, delta)
    lower, upper = int(interval.low), int(interval.high)
    assert binomial_cdf(lower - 1, n, 0.5) <= delta / 2                 # P(B ≤ l − 1)
    assert 1 - binomial_cdf(upper - 1, n, 0.5) <= delta / 2             # P(B ≥ u)
    assert binomial_cdf(lower, n, 0.5) > delta / 2                      # l is the largest such rank
    assert 1 - binomial_cdf(upper - 2, n, 0.5) > delta / 2              # u is the smallest
    assert interval.bound == "exact" and interval.failure_probability == delta and interval.samples == n
    assert interval.estimate == 100.0


def test_quantile_interval_covers_the_quantile_of_a_heavy_tailed_law(gen):
    # Cauchy: no mean, median 0, upper quartile 1.
    samples = torch.distributions.Cauchy(0.0, 1.0).icdf(torch.rand(20_000, generator=gen, dtype=torch.float64))
    assert stats.quantile_interval(samples, 0.5).contains(0.0)
    assert stats.quantile_interval(samples, 0.75).contains(1.0)


def test_quantile_interval_coverage_over_repetitions(gen):
    # δ = 0.2 on 300 repetitions: misses are Binomial(300, ≤ 0.2); far fewer than 100 of them.
    misses = sum(not stats.quantile_interval(torch.rand(101, generator=gen, dtype=torch.float64), 0.5, 0.2).contains(0.5)
                 for _ in range(300))
    assert misses < 100


def test_quantile_interval_says_when_the_samples_are_too_few_on_either_side():
    # 10 samples cannot bound the 0.9-quantile from above at δ = 0.01 (0.9¹⁰ = 0.35 > δ/2): a
    # clear error, not an index past the last sample; nor the 0.1-quantile from below.
    for quantile in (0.9, 0.1):
        with pytest.raises(ValueError, match="too few"):
            stats.quantile_interval(torch.rand(10, dtype=torch.float64), quantile, 1e-2)


def test_quantile_interval_rejects_bad_input():
    with pytest.raises(ValueError, match=r"quantile must be in \(0, 1\), got 1"):
        stats.quantile_interval(torch.rand(100, dtype=torch.float64), 1)
    with pytest.raises(ValueError, match="too few"):
        stats.quantile_interval(torch.rand(10, dtype=torch.float64), 0.5, 1e-7)
    with pytest.raises(ValueError, match="failure_probability must be in"):
        stats.quantile_interval(torch.rand(100, dtype=torch.float64), 0.5, 0.0)


@pytest.mark.parametrize("successes, trials, p", [(0, 10, 0.3), (3, 10, 0.5), (7, 20, 0.1), (20, 20, 0.9)])
def test_binomial_upper_tail_is_exact(successes, trials, p):
    expected = 1 - binomial_cdf(successes - 1, trials, p) if successes else 1.0
    assert stats.binomial_upper_tail(successes, trials, p) == pytest.approx(expected, rel=1e-10)


def test_binomial_upper_tail_of_a_rare_event_keeps_its_precision():
    # P(B ≥ 2) for n = 400, p = 1e-7 ≈ C(400, 2) p² = 7.98e-10; 1 − CDF would round it away.
    assert stats.binomial_upper_tail(2, 400, 1e-7) == pytest.approx(math.comb(400, 2) * 1e-14, rel=1e-5)
    assert stats.binomial_upper_tail(20, 400, 1e-7) < 1e-100


def test_binomial_upper_tail_rejects_bad_input():
    with pytest.raises(ValueError, match="need 0 ≤ successes ≤ trials"):
        stats.binomial_upper_tail(5, 4, 0.5)
    with pytest.raises(ValueError, match=r"probability must be in \(0, 1\)"):
        stats.binomial_upper_tail(1, 4, 1.0)
