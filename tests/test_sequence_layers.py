"""attnref.sequence_layers: per-token, windowed and token-mixing linear layers against torch (float64)."""

from __future__ import annotations

import pytest
import torch

from attnref import sequence_layers as sl
from conftest import PARITY_ATOL, randn


def conv1d(kernel: torch.Tensor, bias: torch.Tensor | None) -> torch.nn.Conv1d:
    d_out, d_in, w = kernel.shape
    module = torch.nn.Conv1d(d_in, d_out, kernel_size=w, bias=bias is not None, dtype=torch.float64)
    with torch.no_grad():
        module.weight.copy_(kernel)
        if bias is not None:
            module.bias.copy_(bias)
    return module


def run_conv(module: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return module(x.transpose(-2, -1)).transpose(-2, -1)   # (..., n, d) -> (..., d, n) -> back


@pytest.mark.parametrize("bias", [True, False])
def test_position_wise_linear_matches_linear_and_kernel_one_conv(gen, bias):
    x = randn(gen, 3, 7, 5)
    weight = randn(gen, 5, 4)
    b = randn(gen, 4) if bias else None
    linear = torch.nn.Linear(5, 4, bias=bias, dtype=torch.float64)
    with torch.no_grad():
        linear.weight.copy_(weight.T)
        if bias:
            linear.bias.copy_(b)
        expected = linear(x)
    ours = sl.position_wise_linear(x, weight, b)
    assert (ours - expected).abs().max() < PARITY_ATOL
    kernel = sl.to_conv1d_weight(weight[None])             # (1, d_in, d_out) -> (d_out, d_in, 1)
    assert (ours - run_conv(conv1d(kernel, b), x)).abs().max() < PARITY_ATOL


@pytest.mark.parametrize("w", [1, 2, 3, 7])
@pytest.mark.parametrize("bias", [True, False])
def test_sliding_window_linear_matches_conv1d(gen, w, bias):
    x = randn(gen, 2, 7, 3)
    weight = randn(gen, w, 3, 4)
    b = randn(gen, 4) if bias else None
    ours = sl.sliding_window_linear(x, weight, b)
    assert ours.shape == (2, 7 - w + 1, 4)
    assert (ours - run_conv(conv1d(sl.to_conv1d_weight(weight), b), x)).abs().max() < PARITY_ATOL


def test_sliding_window_linear_is_the_sum_over_offsets(gen):
    x = randn(gen, 6, 2)
    weight = randn(gen, 3, 2, 5)
    expected = torch.stack([sum(x[i + t] @ weight[t] for t in range(3)) for i in range(4)])
    assert (sl.sliding_window_linear(x, weight) - expected).abs().max() < PARITY_ATOL


def test_conv1d_weight_round_trip(gen):
    weight = randn(gen, 3, 2, 5)
    kernel = sl.to_conv1d_weight(weight)
    assert kernel.shape == (5, 2, 3)
    assert torch.equal(kernel[:, :, 1], weight[1].T)
    assert torch.equal(sl.from_conv1d_weight(kernel), weight)


def test_token_mixing_linear_is_a_fixed_weighted_sum(gen):
    values = randn(gen, 2, 4, 3)
    mixing = randn(gen, 5, 4)
    result = sl.token_mixing_linear(values, mixing=mixing)
    assert result.output.shape == (2, 5, 3)
    assert result.weights is mixing
    expected = torch.einsum("ij,bjd->bid", mixing, values)
    assert (result.output - expected).abs().max() < PARITY_ATOL


def t(*shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype)


def test_position_wise_linear_width_mismatch():
    with pytest.raises(ValueError, match=r"x has shape \(3, 5\) and weight has shape \(4, 2\)"):
        sl.position_wise_linear(t(3, 5), t(4, 2))


def test_position_wise_linear_bad_bias():
    with pytest.raises(ValueError, match=r"bias has shape \(3,\), expected \(2,\) for weight \(4, 2\)"):
        sl.position_wise_linear(t(3, 4), t(4, 2), t(3))


def test_position_wise_linear_integer_input():
    with pytest.raises(ValueError, match=r"x must have a floating dtype .* torch.int64 with shape \(3, 4\)"):
        sl.position_wise_linear(torch.ones(3, 4, dtype=torch.long), t(4, 2))


def test_position_wise_linear_mixed_dtypes():
    with pytest.raises(ValueError, match="inputs must share one dtype"):
        sl.position_wise_linear(t(3, 4, dtype=torch.float32), t(4, 2))


def test_sliding_window_linear_wrong_weight_rank():
    with pytest.raises(ValueError, match=r"weight must have 3 dimensions, got shape \(4, 2\)"):
        sl.sliding_window_linear(t(5, 4), t(4, 2))


def test_sliding_window_linear_width_mismatch():
    with pytest.raises(ValueError, match=r"x has shape \(5, 4\) and weight has shape \(2, 3, 2\)"):
        sl.sliding_window_linear(t(5, 4), t(2, 3, 2))


def test_sliding_window_linear_sequence_shorter_than_window():
    with pytest.raises(ValueError, match=r"x has n = 2 tokens \(shape \(2, 4\)\), fewer than the window w = 3"):
        sl.sliding_window_linear(t(2, 4), t(3, 4, 2))


def test_sliding_window_linear_bad_bias():
    with pytest.raises(ValueError, match=r"bias has shape \(5,\), expected \(2,\) for weight \(2, 4, 2\)"):
        sl.sliding_window_linear(t(5, 4), t(2, 4, 2), t(5))


def test_token_mixing_linear_length_mismatch():
    with pytest.raises(ValueError, match=r"mixing has shape \(3, 5\) and value has shape \(4, 2\)"):
        sl.token_mixing_linear(t(4, 2), mixing=t(3, 5))


def test_token_mixing_linear_wrong_rank():
    with pytest.raises(ValueError, match=r"mixing must have 2 dimensions, got shape \(4,\)"):
        sl.token_mixing_linear(t(4, 2), mixing=t(4))


def test_conv1d_weight_wrong_rank():
    with pytest.raises(ValueError, match=r"weight must have 3 dimensions, got shape \(4, 2\)"):
        sl.to_conv1d_weight(t(4, 2))
    with pytest.raises(ValueError, match=r"kernel must have 3 dimensions, got shape \(4,\)"):
        sl.from_conv1d_weight(t(4))
