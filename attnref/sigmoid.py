r"""Sigmoid attention: the softmax replaced by an elementwise logistic function (chapter 1, Q8).

.. math:: w_{ij} = \sigma\!\left(\frac{q_i \cdot k_j}{\sqrt{d_k}} + b\right), \qquad
          y_i = \sum_j w_{ij}\, v_j, \qquad b = -\log m \text{ by default}

(Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid Self-Attention").
Each weight depends on its own score only: nothing normalises a row, so a row's weights do not
sum to 1, and a constant added to every score changes every weight (softmax ignores it). The
bias :math:`b = -\log m` (``m`` keys) keeps a row's sum of order 1 as the sequence grows:
:math:`\sigma(z - \log m) = e^z / (m + e^z) \le e^z / m`, so the row sum is at most the mean of
:math:`e^{z_j}`; with :math:`b = 0` it is about :math:`m/2`. Chapter 1 derives both.

The call shape of every attention in attnref: tensors positional, the rest keyword-only, the
masks ``mask=None, key_mask=None, causal=False``; one more setting, ``bias``.
"""

from __future__ import annotations

import math

import torch

from attnref import _validate as check
from attnref.attention import AttentionResult, _check_qkv, _finite_scores, _upcast, combined_mask, scores_shape

Tensor = torch.Tensor


def sigmoid_attention(query: Tensor, key: Tensor, value: Tensor, *, bias: float | Tensor | None = None,
                      mask: Tensor | None = None, key_mask: Tensor | None = None, causal: bool = False,
                      scale: float | None = None, need_weights: bool = True) -> AttentionResult:
    r"""Sigmoid attention: :math:`Y = \sigma(Q K^\top \cdot \mathrm{scale} + b)\, V`, elementwise.

    Args:
        query: ``(..., n, d_k)``; key: ``(..., m, d_k)``; value: ``(..., m, d_v)``.
        bias: the constant :math:`b` added to every score, a finite real (or a 0-dimensional
            floating tensor, e.g. a learned one); default :math:`-\log m` with ``m`` the number
            of keys (Ramapuram et al. 2024).
        mask: boolean (True = may attend) or additive (added to the scores before the sigmoid;
            ``-inf`` removes), broadcastable to ``(..., n, m)``.
        key_mask: boolean ``(..., m)``, False for padding keys.
        causal: query ``i`` keeps key ``j`` only when ``j ≤ i``.
        scale: factor on the scores, default :math:`1/\sqrt{d_k}` (``d_k = 0`` then raises).
        need_weights: ``False`` returns ``weights=None`` (as attnref's SDPA; the multi-head hook
            passes it through).

    Returns an :class:`~attnref.attention.AttentionResult`: ``output (..., n, d_v)``; ``weights
    (..., n, m)``, the elementwise :math:`\sigma(\cdot)` — in :math:`(0, 1)`, a removed key's
    weight exactly 0, and **rows that need not sum to 1** (nothing normalises them); ``scores
    (..., n, m)``, the argument of the sigmoid before any mask, :math:`q_i\cdot k_j\,\mathrm{scale} + b`.
    ``m = 0`` gives empty weights and a zero output.

    Half precision: float16/bfloat16 inputs are computed in float32 and the results rounded to
    the input dtype. Bad input raises ``ValueError`` naming the argument and its shape.
    """
    _check_qkv(query, key, value)
    check.boolean("need_weights", need_weights)
    d_k, m = query.shape[-1], key.shape[-2]
    if scale is None and d_k == 0:
        raise ValueError(f"query {check.shape_of(query)} and key {check.shape_of(key)} have width d_k = 0: "
                         "the default scale 1/√d_k is undefined (pass scale=...)")
    scale = 1.0 / math.sqrt(d_k) if scale is None else check.real_number("scale", scale)
    if bias is None:
        bias = -math.log(m) if m > 0 else 0.0           # m = 0: no weight for a bias to act on
    else:
        bias = check.real_number("bias", bias)
        if isinstance(bias, Tensor) and (bias.device != query.device):
            raise ValueError(f"bias is on {bias.device}, query on {query.device}: put them on one device")
    full_mask = combined_mask(scores_shape(query, key), query.dtype, query.device, mask, key_mask, causal,
                              "key", key)
    dtype = query.dtype
    query, key, value = _upcast(query, key, value)   # float16/bfloat16 -> float32
    if isinstance(bias, Tensor):
        bias = bias.to(query.dtype)
    scores = query @ key.transpose(-2, -1)           # (..., n, d_k) @ (..., d_k, m) -> (..., n, m)
    scores = scores * scale + bias                   # z_ij = q_i·k_j · scale + b
    _finite_scores(scores, f"the scores query @ keyᵀ · scale + bias (query {check.shape_of(query)}, "
                           f"key {check.shape_of(key)}, scale = {float(scale):.4g})")
    if full_mask is None:
        weights = torch.sigmoid(scores)              # (..., n, m): each weight from its own score
    elif full_mask.dtype == torch.bool:
        weights = torch.where(full_mask, torch.sigmoid(scores), torch.zeros((), dtype=scores.dtype,
                                                                             device=scores.device))
    else:                                            # additive: σ(z + mask), σ(−∞) = 0 exactly
        masked = scores + full_mask
        if check.has_values(masked) and masked.numel() > 0 and bool(torch.isposinf(masked).any()):
            raise ValueError(f"the scores plus the additive mask overflow {scores.dtype} to +inf "
                             f"(scores of shape {check.shape_of(scores)})")
        weights = torch.sigmoid(masked)
    output = weights @ value                         # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)
    return AttentionResult(output.to(dtype), weights.to(dtype) if need_weights else None, scores=scores.to(dtype))
