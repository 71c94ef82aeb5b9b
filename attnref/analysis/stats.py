r"""Monte-Carlo estimates with stated bounds: each interval names its bound and failure probability.

Every statistical check of the book is an :class:`Interval` that covers the true value with
probability at least ``1 − failure_probability`` (at most
:data:`attnref.book.claims.MAX_FAILURE_PROBABILITY` = 10⁻⁶), by a named bound:

* finite-sample, for bounded samples: :func:`hoeffding_mean`, :func:`empirical_bernstein_mean`;
* finite-sample, for samples with a known variance bound (heavy tails allowed):
  :func:`median_of_means`;
* finite-sample, for a whole distribution: :func:`dkw_distance` (Dvoretzky–Kiefer–Wolfowitz
  with Massart's constant) for the Kolmogorov–Smirnov distance to a known CDF;
* exact, for a proportion: :func:`clopper_pearson`; for a quantile: :func:`quantile_interval`;
  and the exact binomial tail :func:`binomial_upper_tail`;
* asymptotic, named so in the evidence: :func:`clt_mean`, :func:`clt_variance` (the latter
  needs a finite fourth moment, which the caller must establish).

The older ``mean_estimate``/``variance_estimate`` (z = 5 CLT bands with a plug-in standard
error) are asymptotic too; new checks use the functions above. An asymptotic interval's
``failure_probability`` is the nominal level, not a guarantee: :attr:`Interval.guaranteed` says
which is which.

Distribution functions (binomial, beta, normal) come from ``scipy.stats`` (imported inside the
functions that need them: the import costs a notebook about a second) or, for the normal quantile,
from :mod:`statistics`; the bound formulas the book explains are written out here.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

import numpy as np
import torch

from attnref.book import claims

Tensor = torch.Tensor

#: Normal quantile of the bounds: P(|Z| > 5) ≈ 5.7e-7.
Z_DEFAULT = 5.0


@dataclass(frozen=True)
class Estimate:
    """A Monte-Carlo estimate ``value ± half_width`` from ``samples`` draws."""

    value: float
    half_width: float
    samples: int
    z: float = Z_DEFAULT

    @property
    def low(self) -> float:
        return self.value - self.half_width

    @property
    def high(self) -> float:
        return self.value + self.half_width

    def contains(self, target: float) -> bool:
        return self.low <= target <= self.high

    def __str__(self) -> str:
        return f"{self.value:.4g} ± {self.half_width:.2g} (N = {self.samples}, z = {self.z:g})"


def _flat(samples: Tensor) -> Tensor:
    if not isinstance(samples, torch.Tensor) or samples.dim() != 1:
        raise ValueError(f"samples must be a 1-D tensor, got {getattr(samples, 'shape', type(samples).__name__)}")
    if samples.numel() < 2:
        raise ValueError(f"need at least 2 samples, got {samples.numel()}")
    return samples.double()


def mean_estimate(samples: Tensor, z: float = Z_DEFAULT) -> Estimate:
    r"""Sample mean with the CLT bound :math:`z\, s / \sqrt N`."""
    x = _flat(samples)
    n = x.numel()
    return Estimate(x.mean().item(), z * x.std(unbiased=True).item() / math.sqrt(n), n, z)


def variance_estimate(samples: Tensor, z: float = Z_DEFAULT) -> Estimate:
    r"""Unbiased sample variance with the bound :math:`z \sqrt{\widehat{\mathrm{Var}}(s^2)}`.

    The standard error of a sample variance depends on the fourth central moment
    :math:`\mu_4`; exactly, :math:`\mathrm{Var}(s^2) = \big(\mu_4 - \sigma^4 \tfrac{N-3}{N-1}\big)/N`
    (which stays positive even when :math:`\mu_4 = \sigma^4`, e.g. for ±1 samples).
    """
    x = _flat(samples)
    n = x.numel()
    centred = x - x.mean()
    variance = (centred ** 2).sum().item() / (n - 1)
    fourth = (centred ** 4).mean().item()
    spread = max(fourth - variance ** 2 * (n - 3) / (n - 1), 0.0)   # exact Var(s²)·N
    return Estimate(variance, z * math.sqrt(spread / n), n, z)


#: Bounds (labels of :attr:`Interval.bound`) that hold for every sample size: their failure
#: probability is a guarantee (the same list as ``attnref.book.claims.GUARANTEED_BOUNDS``). The
#: others ("CLT (asymptotic)", "bootstrap (asymptotic)", "t (normal theory)") hold only in a limit,
#: or under an assumption the data do not show: their level is nominal.
GUARANTEED_BOUNDS = frozenset(claims.GUARANTEED_BOUNDS)


@dataclass(frozen=True)
class Interval:
    """``estimate`` with an interval ``[low, high]`` that covers the true value with probability at
    least ``1 − failure_probability``, by the named ``bound`` (see :data:`attnref.book.claims.BOUNDS`).
    For an asymptotic bound (``guaranteed`` is False) that probability is only the nominal level."""

    estimate: float
    low: float
    high: float
    bound: str
    failure_probability: float
    samples: int
    #: The estimate's standard error where the bound's sample gives one (the sample standard
    #: deviation over √N for a mean); ``None`` otherwise. Not part of the bound: an exclusion check
    #: (``claims.beyond``) states its margin in it, and from that its false-failure rate.
    standard_error: float | None = None

    @property
    def half_width(self) -> float:
        return max(self.estimate - self.low, self.high - self.estimate)

    @property
    def guaranteed(self) -> bool:
        """Whether ``failure_probability`` is guaranteed at this sample size (a finite-sample or
        exact bound, :data:`GUARANTEED_BOUNDS`), not only asymptotically."""
        return self.bound in GUARANTEED_BOUNDS

    def contains(self, target: float) -> bool:
        return self.low <= target <= self.high

    def __str__(self) -> str:
        return (f"{self.estimate:.4g} in [{self.low:.4g}, {self.high:.4g}] "
                f"({self.bound}, N = {self.samples}, failure probability {self.failure_probability:.0e})")


def _mean_standard_error(x: Tensor) -> float:
    """s/√N: the standard error of a sample mean."""
    return x.std(unbiased=True).item() / math.sqrt(x.numel())


def _delta(failure_probability: float) -> float:
    if not 0 < failure_probability < 1:
        raise ValueError(f"failure_probability must be in (0, 1), got {failure_probability!r}")
    return float(failure_probability)


def _range(samples: Tensor, low: float, high: float) -> None:
    if not low < high:
        raise ValueError(f"the range [low, high] must have low < high, got [{low}, {high}]")
    if samples.min().item() < low or samples.max().item() > high:
        raise ValueError(f"samples must lie in [{low}, {high}] (the bound needs it), found "
                         f"[{samples.min().item():.6g}, {samples.max().item():.6g}]")


def hoeffding_mean(samples: Tensor, low: float, high: float, failure_probability: float = 1e-7) -> Interval:
    r"""Hoeffding (1963, Theorem 2, both tails): for i.i.d. samples in :math:`[a, b]`,
    :math:`P(|\bar X - \mu| > (b-a)\sqrt{\ln(2/\delta)/2N}) \le \delta`
    (each tail is at most :math:`\exp(-2N t^2/(b-a)^2) = \delta/2`)."""
    x = _flat(samples)
    delta = _delta(failure_probability)
    _range(x, low, high)
    n = x.numel()
    half = (high - low) * math.sqrt(math.log(2 / delta) / (2 * n))
    mean = x.mean().item()
    return Interval(mean, mean - half, mean + half, "Hoeffding", delta, n, _mean_standard_error(x))


def empirical_bernstein_mean(samples: Tensor, low: float, high: float, failure_probability: float = 1e-7) -> Interval:
    r"""Empirical Bernstein (Maurer & Pontil 2009, "Empirical Bernstein bounds and sample variance
    penalization", Theorem 4), two-sided: for i.i.d. samples in :math:`[a, b]` with the sample
    variance :math:`V = \sum_i (X_i - \bar X)^2 / (N-1)`,
    :math:`|\bar X - \mu| \le \sqrt{2 V \ln(4/\delta)/N} + 7 (b-a) \ln(4/\delta) / (3(N-1))`
    with probability at least :math:`1 - \delta`. Theorem 4 is one-sided, for samples in
    :math:`[0, 1]`: :math:`\mu - \bar X \le \sqrt{2 V \ln(2/\delta')/N} + 7 \ln(2/\delta') / (3(N-1))`
    with probability :math:`1 - \delta'`; it is applied to :math:`(X - a)/(b - a)` and to
    :math:`(b - X)/(b - a)` with :math:`\delta' = \delta/2` each (a union bound), hence
    :math:`\ln(4/\delta)`. Tighter than Hoeffding when the variance is small."""
    x = _flat(samples)
    delta = _delta(failure_probability)
    _range(x, low, high)
    n = x.numel()
    log_term = math.log(4 / delta)
    variance = x.var(unbiased=True).item()
    half = math.sqrt(2 * variance * log_term / n) + 7 * (high - low) * log_term / (3 * (n - 1))
    mean = x.mean().item()
    return Interval(mean, mean - half, mean + half, "empirical Bernstein", delta, n, _mean_standard_error(x))


def median_of_means(samples: Tensor, variance_bound: float, failure_probability: float = 1e-7) -> Interval:
    r"""Median of means (Lugosi & Mendelson 2019, "Mean estimation and regression under heavy-tailed
    distributions: a survey", Theorem 2 and its proof): split the first :math:`N = k m` samples into
    :math:`k = \lceil 8 \ln(1/\delta) \rceil` blocks of :math:`m`; if :math:`\mathrm{Var}\,X \le \sigma^2`,
    the median of the block means is within :math:`2 \sigma \sqrt{k / N}` of the mean with
    probability at least :math:`1 - \delta`. (Chebyshev: a block mean is off by more than
    :math:`2\sigma/\sqrt m` with probability at most 1/4; Hoeffding: at least :math:`k/2` of the
    :math:`k` blocks are off with probability at most :math:`e^{-k/8} \le \delta`.) The theorem
    writes the radius as :math:`\sigma \sqrt{32 \ln(1/\delta) / N}`, which is the same when
    :math:`8 \ln(1/\delta)` is a whole number and smaller otherwise (the proof does not cover
    the smaller one). Needs only a finite variance (heavy tails allowed), but the variance bound
    must be known (derived), not estimated from the same samples."""
    x = _flat(samples)
    delta = _delta(failure_probability)
    if not (variance_bound > 0 and math.isfinite(variance_bound)):
        raise ValueError(f"variance_bound must be positive and finite, got {variance_bound!r}")
    blocks = math.ceil(8 * math.log(1 / delta))
    n = x.numel()
    if n < blocks:
        raise ValueError(f"median of means with failure probability {delta:g} needs at least {blocks} samples, got {n}")
    usable = (n // blocks) * blocks
    block_means = x[:usable].reshape(blocks, -1).mean(dim=1)        # (blocks,)
    estimate = block_means.median().item()
    half = 2 * math.sqrt(variance_bound) * math.sqrt(blocks / usable)   # 2σ/√m, m = usable / blocks
    return Interval(estimate, estimate - half, estimate + half, "median of means", delta, usable)


def dkw_distance(samples: Tensor, cdf, failure_probability: float = 1e-7) -> tuple[float, float]:
    r"""The Kolmogorov–Smirnov distance :math:`D = \sup_x |F_N(x) - F(x)|` of the samples to a
    continuous CDF ``cdf`` (a callable on a float64 tensor), and the DKW bound
    :math:`\varepsilon = \sqrt{\ln(2/\delta) / 2N}` (Dvoretzky–Kiefer–Wolfowitz with Massart's
    constant, Massart 1990, "The tight constant in the DKW inequality": :math:`P(D > \varepsilon) \le
    2 e^{-2N\varepsilon^2}`): if the samples are i.i.d. with CDF :math:`F`,
    :math:`P(D > \varepsilon) \le \delta` for every N. Returns ``(D, ε)``."""
    x = _flat(samples)
    delta = _delta(failure_probability)
    n = x.numel()
    values = torch.as_tensor(cdf(x.sort().values), dtype=torch.float64)   # F at the order statistics
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    distance = torch.maximum(ranks / n - values, values - (ranks - 1) / n).max().item()
    return distance, math.sqrt(math.log(2 / delta) / (2 * n))


def clopper_pearson(successes: int, trials: int, failure_probability: float = 1e-7) -> Interval:
    r"""The exact (Clopper–Pearson 1934) interval for a binomial proportion: with :math:`x` successes
    in :math:`n` trials, ``low`` solves :math:`P(B \ge x \mid p = \text{low}) = \delta/2` and ``high``
    solves :math:`P(B \le x \mid p = \text{high}) = \delta/2`, i.e. the beta quantiles
    :math:`\mathrm{Beta}(x, n - x + 1)_{\delta/2}` and :math:`\mathrm{Beta}(x + 1, n - x)_{1 - \delta/2}`
    (0 and 1 when :math:`x = 0` or :math:`x = n`)."""
    from scipy.stats import beta   # here, not at the top: importing scipy.stats costs about a second

    delta = _delta(failure_probability)
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 ≤ successes ≤ trials and trials > 0, got {successes}/{trials}")
    low = 0.0 if successes == 0 else float(beta.ppf(delta / 2, successes, trials - successes + 1))
    # the upper quantile from the upper tail (isf): 1 − δ/2 in float64 would lose digits of a small δ
    high = 1.0 if successes == trials else float(beta.isf(delta / 2, successes + 1, trials - successes))
    return Interval(successes / trials, low, high, "Clopper–Pearson", delta, trials)


def normal_quantile(failure_probability: float) -> float:
    """The two-sided standard-normal quantile z with P(|Z| > z) = failure_probability (from the lower
    tail, −Φ⁻¹(δ/2): 1 − δ/2 in float64 would lose digits of a small δ)."""
    return -statistics.NormalDist().inv_cdf(_delta(failure_probability) / 2)


def clt_mean(samples: Tensor, failure_probability: float = 1e-7) -> Interval:
    """Sample mean ± z·s/√N: asymptotic (the CLT), with a plug-in standard error."""
    x = _flat(samples)
    z = normal_quantile(failure_probability)
    n = x.numel()
    mean = x.mean().item()
    half = z * x.std(unbiased=True).item() / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, "CLT (asymptotic)", failure_probability, n, _mean_standard_error(x))


def clt_variance(samples: Tensor, failure_probability: float = 1e-7) -> Interval:
    """Unbiased sample variance ± z·√Var(s²) (see :func:`variance_estimate`): asymptotic, and valid
    only for a law with a finite fourth moment (a heavy-tailed law breaks it)."""
    z = normal_quantile(failure_probability)
    estimate = variance_estimate(samples, z=z)
    return Interval(estimate.value, estimate.low, estimate.high, "CLT (asymptotic)", failure_probability,
                    estimate.samples, estimate.half_width / z)


def loglog_slope(x: Tensor, y: Tensor) -> float:
    r"""Least-squares slope of :math:`\log y` against :math:`\log x` (the degree of a power law)."""
    x = torch.as_tensor(x, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64)
    if x.shape != y.shape or x.dim() != 1 or x.numel() < 2:
        raise ValueError(f"x and y must be 1-D of the same length ≥ 2, got {tuple(x.shape)} and {tuple(y.shape)}")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("x and y must be positive for a log–log slope")
    lx, ly = x.log(), y.log()
    lx_c = lx - lx.mean()
    return ((lx_c * (ly - ly.mean())).sum() / (lx_c ** 2).sum()).item()


def _log_binomial_cdf(n: int, p: float) -> Tensor:
    """``log P(B ≤ k)`` for ``k = 0, …, n``, B ~ Binomial(n, p), in float64 (``scipy.stats.binom``;
    ``-inf`` where the probability is below the smallest float64, about 1e-308)."""
    from scipy.stats import binom   # here, not at the top: importing scipy.stats costs about a second

    return torch.from_numpy(binom.logcdf(np.arange(n + 1), n, p)).double()


def _log_binomial_sf(n: int, p: float) -> Tensor:
    """``log P(B > k)`` for ``k = 0, …, n``, B ~ Binomial(n, p), in float64 (``scipy.stats.binom``;
    accurate where ``P(B > k)`` is far below the rounding of ``1 − P(B ≤ k)``)."""
    from scipy.stats import binom

    return torch.from_numpy(binom.logsf(np.arange(n + 1), n, p)).double()


@functools.lru_cache(maxsize=256)
def _order_statistic_ranks(n: int, quantile: float, delta: float) -> tuple[int, int]:
    """The 1-based ranks ``(l, u)`` of :func:`quantile_interval` (they depend on N, q and δ only)."""
    log_cdf = _log_binomial_cdf(n, quantile)                    # log P(B ≤ k), B = #{X_i ≤ ξ_q}
    log_half = math.log(delta / 2)
    # Lower rank l (1-based): the largest l with P(B ≤ l − 1) ≤ δ/2, i.e. P(X_(l) > ξ) ≤ δ/2.
    below = torch.nonzero(log_cdf <= log_half).flatten()
    # Upper rank u: the smallest u with P(B ≥ u) = 1 − P(B ≤ u − 1) ≤ δ/2.
    log_upper_tail = _log_binomial_sf(n, quantile)              # log P(B > k) = log P(B ≥ k + 1)
    # k = n is left out: P(B > n) = 0 would pick the rank n + 1, past the last sample.
    above = torch.nonzero(log_upper_tail[:-1] <= log_half).flatten()
    if below.numel() == 0 or above.numel() == 0:
        raise ValueError(f"{n} samples are too few for a {quantile:g}-quantile interval with failure probability "
                         f"{delta:g}")
    lower_rank = int(below.max().item()) + 1                    # P(B ≤ l − 1) ≤ δ/2 with l − 1 = index
    upper_rank = int(above.min().item()) + 1                    # P(B ≥ u) ≤ δ/2 with u − 1 = index
    return lower_rank, upper_rank


def quantile_interval(samples: Tensor, quantile: float = 0.5, failure_probability: float = 1e-7) -> Interval:
    r"""A distribution-free interval for the ``quantile`` :math:`\xi_q` of a continuous law, from order
    statistics: :math:`[X_{(l)}, X_{(u)}]` with the ranks chosen from Binomial(N, q) tails so that
    :math:`P(X_{(l)} \le \xi_q \le X_{(u)}) \ge 1 - \delta` (each tail :math:`\le \delta/2`). Exact: no
    assumption beyond i.i.d. samples of a continuous law (heavy tails allowed). The estimate is the
    sample quantile at rank :math:`\lceil qN \rceil`."""
    x = _flat(samples)
    delta = _delta(failure_probability)
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
    n = x.numel()
    ordered = x.sort().values
    lower_rank, upper_rank = _order_statistic_ranks(n, quantile, delta)
    estimate = ordered[max(math.ceil(quantile * n), 1) - 1].item()
    return Interval(estimate, ordered[lower_rank - 1].item(), ordered[upper_rank - 1].item(), "exact", delta, n)


def binomial_upper_tail(successes: int, trials: int, probability: float) -> float:
    r""":math:`P(B \ge \text{successes})` for :math:`B \sim \mathrm{Binomial}(\text{trials}, \text{probability})`,
    exactly (``scipy.stats.binom.sf``, accurate for tails far below 10⁻¹⁶). As a test: if it is at
    most δ, the hypothesis "the rate is at most ``probability``" is rejected with failure probability at most δ (the exact one-sided test
    that the Clopper–Pearson lower bound inverts)."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 ≤ successes ≤ trials and trials > 0, got {successes}/{trials}")
    if not 0 < probability < 1:
        raise ValueError(f"probability must be in (0, 1), got {probability!r}")
    from scipy.stats import binom   # here, not at the top: importing scipy.stats costs about a second

    return min(float(binom.sf(successes - 1, trials, probability)), 1.0)   # P(B > successes − 1)


def relative_error(value: Tensor, reference: Tensor) -> float:
    r"""Largest absolute deviation relative to the reference's largest magnitude:
    :math:`\max |v - r| / \max |r|` (max norms over all entries; no guard against a zero
    reference, which gives ``inf`` or ``nan``)."""
    return ((value - reference).abs().max() / reference.abs().max()).item()


# --- false-failure rates of exclusion checks -------------------------------------------------------
# An exclusion check ("the interval lies above a") fails on a re-run of the sampling though the
# claim holds when the re-run's interval end crosses a. For the exact intervals the chance is an
# exact binomial sum once a true share is assumed; the share plugged in is (c + ½)/(n + 1), c the
# count observed (never 0 or 1, so 64 of 64 does not make a re-run certain).

#: How :func:`binomial_false_failure` and :func:`quantile_false_failure` obtain their rate.
PLUG_IN_BASIS = "exact binomial, share plugged in at (c + ½)/(n + 1)"


def binomial_false_failure(successes: int, trials: int, failure_probability: float, *,
                           above: float | None = None, below: float | None = None) -> float:
    r"""The chance that a re-run's :func:`clopper_pearson` interval (same ``trials`` and δ) fails
    to lie wholly above ``above`` and/or wholly below ``below``, for counts
    :math:`B \sim \mathrm{Binomial}(n, (x + \tfrac12)/(n + 1))`: the false-failure rate of a check
    ``beyond(above, share, side="below")`` (or ``side="above"`` with ``below``)."""
    from scipy.stats import beta, binom

    delta = _delta(failure_probability)
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 ≤ successes ≤ trials and trials > 0, got {successes}/{trials}")
    if above is None and below is None:
        raise ValueError("name the excluded value: above= and/or below=")
    counts = np.arange(trials + 1)
    low = np.where(counts == 0, 0.0, beta.ppf(delta / 2, np.maximum(counts, 1), trials - counts + 1))
    high = np.where(counts == trials, 1.0, beta.isf(delta / 2, counts + 1, np.maximum(trials - counts, 1)))
    passes = np.ones(trials + 1, dtype=bool)
    if above is not None:
        passes &= low > above
    if below is not None:
        passes &= high < below
    share = (successes + 0.5) / (trials + 1)
    return float(min(1.0, binom.pmf(counts[~passes], trials, share).sum()))


def quantile_false_failure(samples: Tensor, quantile: float = 0.5, failure_probability: float = 1e-7, *,
                           above: float | None = None, below: float | None = None) -> float:
    r"""The chance that a re-run's :func:`quantile_interval` (same N, q, δ) fails to lie wholly above
    ``above`` and/or below ``below``. The interval :math:`[X_{(l)}, X_{(u)}]` lies above ``a`` unless
    :math:`\#\{X_i \le a\} \ge l`, below ``b`` unless :math:`\#\{X_i \ge b\} \ge N - u + 1`; each
    count is Binomial(N, p) with p plugged in at (c + ½)/(N + 1) from the samples' own count c
    (a union of the two tails when both are given)."""
    from scipy.stats import binom

    x = _flat(samples)
    delta = _delta(failure_probability)
    if above is None and below is None:
        raise ValueError("name the excluded value: above= and/or below=")
    n = x.numel()
    lower_rank, upper_rank = _order_statistic_ranks(n, quantile, delta)
    rate = 0.0
    if above is not None:
        c = int((x <= above).sum())
        rate += float(binom.sf(lower_rank - 1, n, (c + 0.5) / (n + 1)))          # P(count ≥ l)
    if below is not None:
        c = int((x >= below).sum())
        rate += float(binom.sf(n - upper_rank, n, (c + 0.5) / (n + 1)))          # P(count ≥ N − u + 1)
    return min(1.0, rate)


def in_standard_errors(gap: float, standard_error: float | None) -> float:
    """A margin ``gap`` (a distance from an interval's end to an excluded value) in standard errors:
    ``gap / standard_error``; ±∞ for a zero standard error (no spread: the margin is all there is),
    NaN for a NaN or missing one. For ``margin_se=`` of an exclusion check."""
    gap = float(gap)
    if standard_error is None or math.isnan(float(standard_error)) or math.isnan(gap):
        return math.nan
    standard_error = float(standard_error)
    if standard_error < 0:
        raise ValueError(f"standard_error must be ≥ 0, got {standard_error!r}")
    if standard_error == 0:
        return math.inf if gap > 0 else -math.inf
    return gap / standard_error
