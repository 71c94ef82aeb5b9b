r"""The scale of attention logits: random components, saturation measures, the sharpness bound of
cosine attention, and power-law slopes with sampling bounds (chapter 4 of the book).

Shapes use the letters of the package docstring: a row of attention weights ``p`` has ``m``
entries (one per key), ``(..., m)``; a batch of rows is ``(..., n, m)``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from attnref import _validate as check
from attnref.analysis.stats import Estimate

Tensor = torch.Tensor

#: The component distributions of :func:`standardised_components`, each with mean 0 and variance 1.
#: Their fourth moments :math:`E[x^4]` are 3, 9/5 and 1.
DISTRIBUTIONS = ("gaussian", "uniform", "rademacher")

#: How far a row of weights may be from summing to 1 before it is rejected.
_ROW_SUM_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-5}


def standardised_components(distribution: str, *shape: int, generator: torch.Generator,
                            dtype: torch.dtype = torch.float64) -> Tensor:
    r"""Independent samples with mean 0 and variance 1, of the given ``shape``.

    * ``"gaussian"``: :math:`x \sim \mathcal N(0, 1)`;
    * ``"uniform"``: :math:`x \sim U(-\sqrt3, \sqrt3)`, variance :math:`(2\sqrt3)^2/12 = 1`;
    * ``"rademacher"``: :math:`x = \pm 1` with probability 1/2 each.

    All three are symmetric, so they share their first three moments (0, 1, 0); they differ in the
    fourth (:math:`E[x^4] = 3,\ 9/5,\ 1`). A result that holds for all three does not rest on
    Gaussianity.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if not shape:
        raise ValueError("shape must name at least one dimension, got ()")
    for axis, size in enumerate(shape):
        check.positive_int(f"shape[{axis}]", size)
    if distribution == "gaussian":
        return torch.randn(*shape, generator=generator, dtype=dtype)
    if distribution == "uniform":
        unit = torch.rand(*shape, generator=generator, dtype=dtype)     # U(0, 1)
        return math.sqrt(3.0) * (2.0 * unit - 1.0)                      # U(−√3, √3)
    bits = torch.randint(0, 2, shape, generator=generator)              # 0 or 1
    return (2 * bits - 1).to(dtype)                                     # −1 or +1


def _weight_rows(weights: Tensor) -> Tensor:
    check.floating("weights", weights, min_dim=1)
    if (weights < 0).any():
        raise ValueError(f"weights of shape {check.shape_of(weights)} have negative entries; "
                         "attention weights are probabilities")
    sums = weights.sum(dim=-1)                                          # (...,)
    tolerance = _ROW_SUM_TOLERANCE.get(weights.dtype, 1e-3)
    masked = sums == 0                                                  # a fully masked query: all zeros
    if not ((sums - 1).abs() <= tolerance).logical_or(masked).all():
        raise ValueError(f"every row of weights (shape {check.shape_of(weights)}) must sum to 1 "
                         "(or be all zero, a fully masked query)")
    return weights


def attention_entropy(weights: Tensor) -> Tensor:
    r"""Entropy of each row of attention weights, in nats: :math:`H(p) = -\sum_j p_j \log p_j`.

    ``weights (..., m)`` → ``(...)``, with :math:`0 \log 0 = 0`. :math:`H = \log m` for uniform
    weights and :math:`H = 0` for a one-hot (saturated) row.
    """
    _weight_rows(weights)
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))   # log p_j, 0 where p_j = 0
    return -(weights * logs).sum(dim=-1)                                        # −Σ_j p_j log p_j


def softmax_jacobian(weights: Tensor) -> Tensor:
    r"""Jacobian of :math:`p = \mathrm{softmax}(z)` with respect to the logits, from the weights :math:`p`:

    .. math:: \frac{\partial p_j}{\partial z_l} = p_j(\delta_{jl} - p_l), \qquad J = \mathrm{diag}(p) - p^\top p

    for a row vector ``p``. ``weights (..., m)`` → ``(..., m, m)``. :math:`J \to 0` as ``p``
    becomes one-hot: a saturated softmax passes no gradient to its logits.
    """
    _weight_rows(weights)
    diagonal = torch.diag_embed(weights)                          # diag(p): (..., m, m)
    outer = weights[..., :, None] * weights[..., None, :]         # pᵀ p: (..., m, 1) * (..., 1, m) -> (..., m, m)
    return diagonal - outer


def cosine_max_weight_bound(m: int, beta: float = 1.0) -> float:
    r"""The largest weight that cosine attention with strength :math:`\beta \ge 0` can give one of ``m`` keys:

    .. math:: \max p_1 = \frac{e^{2\beta}}{e^{2\beta} + m - 1} = \frac{1}{1 + (m - 1)\,e^{-2\beta}},

    attained when key 1 points along the query (logit :math:`\beta`) and every other key points
    against it (logit :math:`-\beta`). The right-hand form cannot overflow.
    """
    check.positive_int("m", m)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta < 0:
        raise ValueError(f"beta must be a finite number ≥ 0, got {beta!r}")
    others = (m - 1) * math.exp(-2.0 * beta)     # (m − 1) e^{−2β}
    return 1.0 / (1.0 + others)


def loglog_slope_estimate(x: Sequence[float] | Tensor, estimates: Sequence[Estimate],
                          power: float = 1.0) -> Estimate:
    r"""Least-squares slope of :math:`\log y` against :math:`\log x` for :math:`y_i = \hat\theta_i^{\,p}`,
    with a bound that holds whenever every estimate's own interval holds.

    The slope is linear in the :math:`\log y_i`:

    .. math:: \hat b = \sum_i w_i \log y_i, \qquad w_i = \frac{\log x_i - \overline{\log x}}{\sum_l (\log x_l - \overline{\log x})^2},

    so if each true :math:`\theta_i^{\,p}` lies in :math:`[\mathrm{low}_i^{\,p}, \mathrm{high}_i^{\,p}]`,
    the slope of the true values differs from :math:`\hat b` by at most
    :math:`\sum_i |w_i|\, \delta_i` with :math:`\delta_i = \max(\log \mathrm{high}_i^{\,p} - \log y_i,\ \log y_i - \log \mathrm{low}_i^{\,p})`.
    ``power = 0.5`` turns variance estimates into standard deviations. Every ``low`` must be > 0.
    """
    x = torch.as_tensor(x, dtype=torch.float64)
    estimates = list(estimates)
    if x.dim() != 1 or x.numel() < 2 or x.numel() != len(estimates):
        raise ValueError(f"x must be 1-D with one entry per estimate (at least 2), got x of shape "
                         f"{tuple(x.shape)} and {len(estimates)} estimates")
    if not all(isinstance(e, Estimate) for e in estimates):
        raise ValueError("estimates must be attnref.analysis.stats.Estimate objects")
    if (x <= 0).any():
        raise ValueError("x must be positive for a log–log slope")
    if not math.isfinite(power) or power <= 0:
        raise ValueError(f"power must be a finite number > 0, got {power!r}")
    lows = [e.low for e in estimates]
    if min(lows) <= 0:
        raise ValueError(f"every estimate's interval must lie above 0 for a log–log slope, got lows {lows}")
    log_y = torch.tensor([power * math.log(e.value) for e in estimates], dtype=torch.float64)       # log y_i
    log_low = torch.tensor([power * math.log(e.low) for e in estimates], dtype=torch.float64)
    log_high = torch.tensor([power * math.log(e.high) for e in estimates], dtype=torch.float64)
    centred = x.log() - x.log().mean()                          # log x_i − mean
    w = centred / (centred ** 2).sum()                          # w_i
    slope = (w * log_y).sum().item()                            # Σ w_i log y_i
    spread = torch.maximum(log_high - log_y, log_y - log_low)   # δ_i
    bound = (w.abs() * spread).sum().item()                     # Σ |w_i| δ_i
    return Estimate(slope, bound, min(e.samples for e in estimates), estimates[0].z)
