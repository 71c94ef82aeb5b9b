r"""The linear layers that attention is compared with: per token, over a window, across tokens.

Row form, as everywhere in attnref: ``x (..., n, d_in)``, one token per row.

* :func:`position_wise_linear` — the same matrix on every token, :math:`y_i = x_i W + b`
  (a kernel-size-1 convolution).
* :func:`sliding_window_linear` — one matrix per offset of a window of ``w`` tokens,
  :math:`y_i = b + \sum_{t=0}^{w-1} x_{i+t} W_t` (a kernel-size-``w`` convolution, no padding).
* :func:`token_mixing_linear` — a fixed ``n × n`` matrix that mixes tokens,
  :math:`y_i = \sum_j M_{ij} x_j`: a weighted sum like attention's, with weights that do not
  depend on the input.

``torch.nn.Conv1d`` works on ``(batch, channels, length)`` — the transpose of the book's
``(n, d)`` — and stores its weight as ``(out, in, kernel)``; :func:`to_conv1d_weight` and
:func:`from_conv1d_weight` convert between that layout and the row form ``(w, d_in, d_out)``.
"""

from __future__ import annotations

import torch

from attnref import _validate as check
from attnref.attention import AttentionResult

Tensor = torch.Tensor


def position_wise_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    r"""The same linear map applied to every token: :math:`y_i = x_i W + b`.

    Args:
        x: ``(..., n, d_in)``.
        weight: ``(d_in, d_out)`` in row form (torch's ``Linear.weight`` transposed).
        bias: ``(d_out,)`` or ``None``.

    Returns ``(..., n, d_out)``. Token ``i`` of the output depends on token ``i`` of the input only.
    """
    check.floating("x", x, min_dim=2)
    check.floating("weight", weight, exact_dim=2)
    check.same_dtype(x=x, weight=weight)
    check.dim_equal("x width must match weight rows (d_in)", "x", x, -1, "weight", weight, 0)
    check.vector("bias", bias, weight.shape[1], weight, "weight")
    output = x @ weight                   # (..., n, d_in) @ (d_in, d_out) -> (..., n, d_out)
    if bias is not None:
        output = output + bias            # + b on every token
    return output


def sliding_window_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    r"""A linear map of each window of ``w`` consecutive tokens: :math:`y_i = b + \sum_{t=0}^{w-1} x_{i+t} W_t`.

    Equivalently: concatenate the window into one row of length ``w·d_in`` and multiply by the
    stacked ``(w·d_in, d_out)`` matrix :math:`[W_0; W_1; \dots; W_{w-1}]`. No padding: there are
    ``n - w + 1`` windows, as in ``torch.nn.Conv1d(d_in, d_out, kernel_size=w)``.

    Args:
        x: ``(..., n, d_in)`` with ``n ≥ w``.
        weight: ``(w, d_in, d_out)``: ``weight[t]`` is :math:`W_t`, applied to the token at offset ``t``.
        bias: ``(d_out,)`` or ``None``.

    Returns ``(..., n - w + 1, d_out)``.
    """
    check.floating("x", x, min_dim=2)
    check.floating("weight", weight, exact_dim=3)
    check.same_dtype(x=x, weight=weight)
    check.dim_equal("x width must match the weight's d_in", "x", x, -1, "weight", weight, 1)
    w, d_in, d_out = weight.shape
    if x.shape[-2] < w:
        raise ValueError(f"x has n = {x.shape[-2]} tokens (shape {check.shape_of(x)}), fewer than the "
                         f"window w = {w} of weight {check.shape_of(weight)}")
    check.vector("bias", bias, d_out, weight, "weight")
    windows = x.unfold(-2, w, 1)                  # (..., n - w + 1, d_in, w): token i + t in [..., i, :, t]
    windows = windows.transpose(-2, -1)           # (..., n - w + 1, w, d_in)
    windows = windows.flatten(-2)                 # (..., n - w + 1, w·d_in): [x_i, x_{i+1}, …, x_{i+w-1}]
    stacked = weight.reshape(w * d_in, d_out)     # (w, d_in, d_out) -> (w·d_in, d_out): [W_0; …; W_{w-1}]
    output = windows @ stacked                    # (..., n - w + 1, w·d_in) @ (w·d_in, d_out) -> (..., n - w + 1, d_out)
    if bias is not None:
        output = output + bias
    return output


def token_mixing_linear(value: Tensor, *, mixing: Tensor) -> AttentionResult:
    r"""A fixed linear mixing of tokens, :math:`y_i = \sum_j M_{ij} v_j`, i.e. :math:`Y = M V`.

    The same weighted sum as attention's :math:`y_i = \sum_j \alpha_{ij}(X) v_j`, with weights
    :math:`M_{ij}` that are parameters: they do not depend on the input.

    Args:
        value: ``(..., m, d_v)``.
        mixing: ``(n, m)``, the weights.

    Returns the output ``(..., n, d_v)`` and the weights ``(n, m)`` (the parameter itself).
    """
    check.floating("value", value, min_dim=2)
    check.floating("mixing", mixing, exact_dim=2)
    check.same_dtype(value=value, mixing=mixing)
    check.dim_equal("mixing columns must match the number of values m", "mixing", mixing, 1, "value", value, -2)
    output = mixing @ value               # (n, m) @ (..., m, d_v) -> (..., n, d_v)
    return AttentionResult(output, mixing)


def to_conv1d_weight(weight: Tensor) -> Tensor:
    r"""Row-form window weights ``(w, d_in, d_out)`` → ``torch.nn.Conv1d``'s ``(d_out, d_in, w)``.

    ``Conv1d`` computes the cross-correlation
    :math:`\mathrm{out}[o, i] = b_o + \sum_c \sum_t K[o, c, t]\, \mathrm{in}[c, i + t]`, so
    :math:`K[:, :, t] = W_t^\top`: a transpose of each :math:`W_t` and the offset moved last.
    """
    check.floating("weight", weight, exact_dim=3)
    return weight.permute(2, 1, 0).contiguous()   # (w, d_in, d_out) -> (d_out, d_in, w)


def from_conv1d_weight(kernel: Tensor) -> Tensor:
    """``torch.nn.Conv1d``'s ``(d_out, d_in, w)`` → row-form window weights ``(w, d_in, d_out)``."""
    check.floating("kernel", kernel, exact_dim=3)
    return kernel.permute(2, 1, 0).contiguous()   # (d_out, d_in, w) -> (w, d_in, d_out)
