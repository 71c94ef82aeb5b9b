r"""Monte-Carlo estimates with confidence bounds that come from the sample size.

A check in the book asserts that a known value lies inside :math:`\hat\theta \pm z\,\widehat{\mathrm{se}}`.
The standard error is estimated from the same samples; ``z`` defaults to :data:`Z_DEFAULT`
(two-sided tail probability about 6·10⁻⁷), so that a book with a few hundred such checks
passes for any seed with overwhelming probability — the bound is not tuned to one seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

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


def proportion_estimate(successes: int, trials: int, z: float = Z_DEFAULT) -> Estimate:
    """A proportion with the Wilson score interval (good near 0 and 1)."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 ≤ successes ≤ trials and trials > 0, got {successes}/{trials}")
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return Estimate(centre, half, trials, z)


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
