r"""Where a softmax weight underflows to exactly zero in finite precision.

In exact arithmetic every softmax weight is positive: for two logits :math:`[0, -g]` the
second weight is

.. math:: p_2(g) = \frac{e^{-g}}{1 + e^{-g}} = \frac{1}{1 + e^{g}} > 0 \quad\text{for every real } g.

A floating-point format has a smallest positive number :math:`\delta` (the smallest subnormal,
:math:`\delta = 2^{-149}` in float32 and :math:`2^{-1074}` in float64). With round-to-nearest,
:math:`e^{-g}` rounds to 0 once it falls below :math:`\delta/2`, so the weight becomes exactly 0 for
gaps beyond about

.. math:: g^\ast \approx -\ln(\delta/2) = -\ln\delta + \ln 2 .

:func:`softmax_underflow_gap` finds :math:`g^\ast` by bisection on the actual softmax
(:func:`attnref.softmax` by default), so that what is measured is the library's arithmetic,
not a formula about it.
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


def second_weight(gap: float, dtype: torch.dtype, softmax: Softmax = attnref_softmax) -> float:
    r"""The weight :math:`p_2 = \mathrm{softmax}([0, -g])_2` computed in ``dtype``."""
    _floating_dtype(dtype)
    if not math.isfinite(gap):
        raise ValueError(f"gap must be a finite number, got {gap!r}")
    logits = torch.tensor([0.0, -gap], dtype=dtype)   # (2,): the gap is rounded to dtype here
    weights = softmax(logits)                          # (2,)
    return weights[1].item()


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
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be ≥ 0, got {tolerance!r}")
    if second_weight(low, dtype, softmax) == 0.0:
        raise ValueError(f"the weight already underflows at low = {low} in {dtype}: lower the bracket")
    if second_weight(high, dtype, softmax) != 0.0:
        raise ValueError(f"the weight is still positive at high = {high} in {dtype}: raise the bracket")
    while high - low > tolerance:
        middle = 0.5 * (low + high)
        if middle in (low, high):          # the bracket is two adjacent float64 numbers
            break
        if second_weight(middle, dtype, softmax) == 0.0:
            high = middle                  # zero at the middle: the threshold is below it
        else:
            low = middle                   # positive at the middle: the threshold is above it
    return high
