r"""Where a softmax weight underflows to exactly zero in finite precision.

In exact arithmetic every softmax weight is positive: for two logits :math:`[0, -g]` the
second weight is

.. math:: p_2(g) = \frac{e^{-g}}{1 + e^{-g}} = \frac{1}{1 + e^{g}} > 0 \quad\text{for every real } g.

A floating-point format has a smallest positive number :math:`\delta` (the smallest subnormal,
:math:`\delta = 2^{-149}` in float32 and :math:`2^{-1074}` in float64). With round-to-nearest,
:math:`e^{-g}` rounds to 0 once it falls below :math:`\delta/2`, so the weight becomes exactly 0 for
gaps beyond about

.. math:: g^\ast \approx -\ln(\delta/2) = -\ln\delta + \ln 2 .

At the other end the top weight :math:`p_1 = 1/(1 + e^{-g})` becomes exactly 1 once the
normaliser :math:`1 + e^{-g}` rounds to 1, i.e. for :math:`e^{-g} \le \varepsilon_\text{mach}/2`
(ties to even), gaps beyond :math:`g^{(1)} = \ln(2/\varepsilon_\text{mach})`, when the softmax is
computed in the format itself (:func:`attnref.softmax` in float32 and float64); an
implementation that accumulates in a wider format and rounds the quotient once (torch's and
attnref's half-precision softmax, which compute in float32) rounds :math:`1 - e^{-g}` to 1 only
below half the spacing under 1, beyond :math:`\ln(4/\varepsilon_\text{mach})`.

:func:`softmax_underflow_gap` and :func:`softmax_saturation_gap` find these gaps by bisection on
the actual softmax (:func:`attnref.softmax` by default), so that what is measured is the
library's arithmetic, not a formula about it. A gap is itself rounded to the format (the logits
``[0, -g]`` are stored in it), so a measured threshold agrees with its formula up to
:func:`spacing` at that gap.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from attnref.attention import softmax as attnref_softmax

Tensor = torch.Tensor
Softmax = Callable[[Tensor], Tensor]

#: The floating dtypes whose limits :func:`smallest_subnormal` knows.
FLOATING_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _floating_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype not in FLOATING_DTYPES:
        raise ValueError(f"dtype must be one of {FLOATING_DTYPES}, got {dtype!r}")
    return dtype


def smallest_subnormal(dtype: torch.dtype) -> float:
    r"""The smallest positive number of ``dtype``: :math:`\delta = \text{tiny} \cdot \varepsilon_\text{mach}`.

    ``tiny`` is the smallest positive *normal* number (:math:`2^{-126}` in float32) and the machine
    epsilon the spacing of the numbers just above 1 (:math:`2^{-23}`), so
    :math:`\delta = 2^{-126} \cdot 2^{-23} = 2^{-149}` in float32 and :math:`2^{-1022}\cdot 2^{-52} = 2^{-1074}`
    in float64.
    """
    info = torch.finfo(_floating_dtype(dtype))
    return info.tiny * info.eps          # 2^(e_min) · 2^(−mantissa bits)


def neg_log_smallest_subnormal(dtype: torch.dtype) -> float:
    r""":math:`-\ln\delta` for the smallest subnormal :math:`\delta` of ``dtype`` (≈ 103.28 in float32, ≈ 744.44 in float64).

    Computed as :math:`-(\ln \text{tiny} + \ln \varepsilon_\text{mach})` so that it never takes the
    logarithm of an underflowed number.
    """
    info = torch.finfo(_floating_dtype(dtype))
    return -(math.log(info.tiny) + math.log(info.eps))


def spacing(value: float, dtype: torch.dtype) -> float:
    r"""The distance from ``|value|`` (a normal number of ``dtype``) to the next larger number of
    ``dtype``: :math:`\varepsilon_\text{mach} \cdot 2^{\lfloor \log_2 |value| \rfloor}` (0.0156 at 17 in
    float16, 0.5 at 93 in bfloat16)."""
    info = torch.finfo(_floating_dtype(dtype))
    if not (math.isfinite(value) and abs(value) >= info.tiny):
        raise ValueError(f"value must be a finite normal number of {dtype}, got {value!r}")
    return info.eps * 2.0 ** math.floor(math.log2(abs(value)))


def second_weight(gap: float, dtype: torch.dtype, softmax: Softmax = attnref_softmax) -> float:
    r"""The weight :math:`p_2 = \mathrm{softmax}([0, -g])_2` computed in ``dtype``."""
    _floating_dtype(dtype)
    if not math.isfinite(gap):
        raise ValueError(f"gap must be a finite number, got {gap!r}")
    logits = torch.tensor([0.0, -gap], dtype=dtype)   # (2,): the gap is rounded to dtype here
    weights = softmax(logits)                          # (2,)
    return weights[1].item()


def top_weight(gap: float, dtype: torch.dtype, softmax: Softmax = attnref_softmax) -> float:
    r"""The weight :math:`p_1 = \mathrm{softmax}([0, -g])_1` computed in ``dtype``."""
    _floating_dtype(dtype)
    if not math.isfinite(gap):
        raise ValueError(f"gap must be a finite number, got {gap!r}")
    logits = torch.tensor([0.0, -gap], dtype=dtype)   # (2,)
    return softmax(logits)[0].item()


def _first_gap(reached, dtype: torch.dtype, low: float, high: float, tolerance: float,
               already: str, not_yet: str) -> float:
    """Bisection for the smallest gap at which ``reached(gap)`` is true (false at ``low``, true at ``high``)."""
    if not (math.isfinite(low) and math.isfinite(high) and 0.0 <= low < high):
        raise ValueError(f"need finite 0 ≤ low < high, got low = {low!r}, high = {high!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be ≥ 0, got {tolerance!r}")
    if reached(low):
        raise ValueError(f"{already} at low = {low} in {dtype}: lower the bracket")
    if not reached(high):
        raise ValueError(f"{not_yet} at high = {high} in {dtype}: raise the bracket")
    while high - low > tolerance:
        middle = 0.5 * (low + high)
        if middle in (low, high):          # the bracket is two adjacent float64 numbers
            break
        if reached(middle):
            high = middle                  # reached at the middle: the threshold is below it
        else:
            low = middle                   # not reached at the middle: the threshold is above it
    return high


def softmax_saturation_gap(dtype: torch.dtype, low: float = 0.0, high: float | None = None,
                           tolerance: float = 0.0, softmax: Softmax = attnref_softmax) -> float:
    r"""The smallest logit gap :math:`g` at which :math:`\mathrm{softmax}([0, -g])_1` is exactly 1 in ``dtype``.

    Bisection as in :func:`softmax_underflow_gap`; ``high`` defaults to :math:`\ln(8/\varepsilon_\text{mach}) + 10`.
    """
    _floating_dtype(dtype)
    if high is None:
        high = math.log(8.0 / torch.finfo(dtype).eps) + 10.0
    return _first_gap(lambda g: top_weight(g, dtype, softmax) == 1.0, dtype, low, high, tolerance,
                      "the top weight is already exactly 1", "the top weight is still below 1")


def softmax_underflow_gap(dtype: torch.dtype, low: float = 0.0, high: float | None = None,
                          tolerance: float = 0.0, softmax: Softmax = attnref_softmax) -> float:
    r"""The smallest logit gap :math:`g` at which :math:`\mathrm{softmax}([0, -g])_2` is exactly 0 in ``dtype``.

    Bisection on :math:`g` between ``low`` (weight still positive) and ``high`` (weight already 0;
    default :math:`2(-\ln\delta) + 10`): each step keeps the half whose ends disagree, until the bracket
    is at most ``tolerance`` wide (default 0: until its ends are adjacent float64 numbers, about
    60 steps). Returns the upper end of the bracket, the first gap found with a zero weight.
    ``softmax`` is the implementation to test (default :func:`attnref.softmax`).
    """
    _floating_dtype(dtype)
    if high is None:
        high = 2.0 * neg_log_smallest_subnormal(dtype) + 10.0
    if not (math.isfinite(low) and math.isfinite(high) and 0.0 <= low < high):
        raise ValueError(f"need finite 0 ≤ low < high, got low = {low!r}, high = {high!r}")
    return _first_gap(lambda g: second_weight(g, dtype, softmax) == 0.0, dtype, low, high, tolerance,
                      "the weight already underflows", "the weight is still positive")
