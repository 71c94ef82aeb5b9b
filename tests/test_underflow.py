"""attnref.analysis.underflow: the logit gap at which a softmax weight becomes exactly 0 (claim L6)."""

from __future__ import annotations

import math

import pytest
import torch

from attnref.analysis import underflow


def test_smallest_subnormal_is_two_to_the_minimum_exponent():
    assert underflow.smallest_subnormal(torch.float32) == 2.0 ** -149
    assert underflow.smallest_subnormal(torch.float64) == 2.0 ** -1074
    assert underflow.smallest_subnormal(torch.float16) == 2.0 ** -24


def test_neg_log_smallest_subnormal_matches_the_exponent():
    assert underflow.neg_log_smallest_subnormal(torch.float32) == pytest.approx(149 * math.log(2), rel=1e-15)
    assert underflow.neg_log_smallest_subnormal(torch.float64) == pytest.approx(1074 * math.log(2), rel=1e-15)


def test_second_weight_is_the_logistic_of_minus_the_gap():
    for gap in (0.0, 1.0, 30.0, 700.0):
        assert underflow.second_weight(gap, torch.float64) == pytest.approx(1 / (1 + math.exp(gap)), rel=1e-12)
    assert underflow.second_weight(800.0, torch.float64) == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_underflow_gap_is_minus_log_of_half_the_smallest_subnormal(dtype):
    gap = underflow.softmax_underflow_gap(dtype)
    expected = underflow.neg_log_smallest_subnormal(dtype) + math.log(2)   # e^{-g} < s/2 rounds to 0
    assert abs(gap - expected) <= 4 * torch.finfo(dtype).eps * expected
    # It is a threshold: positive just below, zero just above.
    assert underflow.second_weight(gap * (1 - 1e-3), dtype) > 0
    assert underflow.second_weight(gap * (1 + 1e-3), dtype) == 0


def test_underflow_gap_of_torch_softmax_agrees():
    ours = underflow.softmax_underflow_gap(torch.float64)
    theirs = underflow.softmax_underflow_gap(torch.float64, softmax=lambda z: torch.softmax(z, dim=-1))
    assert ours == theirs


def test_underflow_gap_respects_a_tight_bracket():
    gap = underflow.softmax_underflow_gap(torch.float64, low=700.0, high=800.0, tolerance=1e-6)
    assert 700.0 < gap < 800.0


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex128])
def test_non_floating_dtype_is_rejected(dtype):
    with pytest.raises(ValueError, match="dtype"):
        underflow.smallest_subnormal(dtype)
    with pytest.raises(ValueError, match="dtype"):
        underflow.neg_log_smallest_subnormal(dtype)
    with pytest.raises(ValueError, match="dtype"):
        underflow.second_weight(1.0, dtype)
    with pytest.raises(ValueError, match="dtype"):
        underflow.softmax_underflow_gap(dtype)


@pytest.mark.parametrize("gap", [math.inf, -math.inf, math.nan])
def test_non_finite_gap_is_rejected(gap):
    with pytest.raises(ValueError, match="gap"):
        underflow.second_weight(gap, torch.float64)


@pytest.mark.parametrize("low, high", [(10.0, 5.0), (-1.0, 800.0), (0.0, math.inf), (math.nan, 800.0)])
def test_bad_bracket_is_rejected(low, high):
    with pytest.raises(ValueError, match="low"):
        underflow.softmax_underflow_gap(torch.float64, low=low, high=high)


def test_bracket_that_misses_the_threshold_is_rejected():
    with pytest.raises(ValueError, match="still positive at high"):
        underflow.softmax_underflow_gap(torch.float64, low=0.0, high=100.0)
    with pytest.raises(ValueError, match="already underflows at low"):
        underflow.softmax_underflow_gap(torch.float64, low=800.0, high=900.0)


@pytest.mark.parametrize("tolerance", [-1.0, math.nan])
def test_negative_tolerance_is_rejected(tolerance):
    with pytest.raises(ValueError, match="tolerance"):
        underflow.softmax_underflow_gap(torch.float64, tolerance=tolerance)


def test_spacing_is_the_gap_to_the_next_number():
    assert underflow.spacing(17.3, torch.float16) == 2.0 ** -6
    assert underflow.spacing(92.9, torch.bfloat16) == 0.5
    assert underflow.spacing(1.0, torch.float64) == 2.0 ** -52
    for value in (0.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="value"):
            underflow.spacing(value, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_underflow_gap_is_the_first_representable_gap_beyond_the_formula(dtype):
    gap = underflow.softmax_underflow_gap(dtype)
    expected = underflow.neg_log_smallest_subnormal(dtype) + math.log(2)
    assert abs(gap - expected) <= underflow.spacing(expected, dtype)
    assert underflow.second_weight(gap - underflow.spacing(gap, dtype), dtype) > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_top_weight_becomes_one_where_the_normaliser_rounds_to_one(dtype):
    gap = underflow.softmax_saturation_gap(dtype)
    # in the format: 1 + e^{-g} rounds to 1; float16/bfloat16 are computed in float32 and the
    # quotient rounded once: 1 − e^{-g} rounds to 1 below half the spacing under 1
    half = dtype in (torch.float16, torch.bfloat16)
    expected = math.log((4 if half else 2) / torch.finfo(dtype).eps)
    assert abs(gap - expected) <= underflow.spacing(expected, dtype)
    assert underflow.top_weight(gap, dtype) == 1.0
    assert underflow.top_weight(0.9 * gap, dtype) < 1.0


def test_torch_half_precision_softmax_saturates_later_than_one_rounding_in_the_format():
    # torch accumulates in float32 and rounds the quotient once: 1 - e^{-g} rounds to 1 only
    # below half the spacing under 1, i.e. beyond ln(4/eps).
    gap = underflow.softmax_saturation_gap(torch.float16, softmax=lambda z: torch.softmax(z, dim=-1))
    expected = math.log(4 / torch.finfo(torch.float16).eps)
    assert abs(gap - expected) <= underflow.spacing(expected, torch.float16)


def test_saturation_bracket_that_misses_the_threshold_is_rejected():
    with pytest.raises(ValueError, match="still below 1 at high"):
        underflow.softmax_saturation_gap(torch.float64, low=0.0, high=10.0)
    with pytest.raises(ValueError, match="already exactly 1 at low"):
        underflow.softmax_saturation_gap(torch.float64, low=50.0, high=60.0)
