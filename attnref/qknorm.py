r"""QK-norm: each head's queries and keys RMS-normalised before the scaled dot product.

.. math::

    \operatorname{norm}(x) = \frac{x}{\sqrt{\tfrac1{d_k} \sum_a x_a^2 + \varepsilon}} \odot (1 + w)
    \qquad\text{(per head, over the head width } d_k\text{; ε inside the square root)}

    \operatorname{QKNormAttention}(Q, K, V) = \operatorname{softmax}\!\left(
        \frac{\operatorname{norm}_Q(Q)\,\operatorname{norm}_K(K)^\top}{\sqrt{d_k}}\right) V

The gain is Gemma's: the stored weight :math:`w` multiplies as :math:`1 + w` (``Gemma3RMSNorm``
of transformers, initialised at :math:`w = 0`), so that a zero weight is the plain RMSNorm;
``unit_offset=False`` multiplies by :math:`w` itself (Llama's and OLMo-2's convention). One gain
of width ``d_k`` is shared by every head (as Gemma 3's ``q_norm`` and ``k_norm``). As in Gemma,
the statistic, the normalisation and the gain are computed in float32 or wider and rounded once
to the input's dtype. Rows whose squares overflow (entries beyond about 1.8e19 in float32) are
rescaled by their largest entry first (:func:`attnref.decoder.rms_normalise`).

After the normalisation every query and key has RMS :math:`\approx 1` (times the gain), so a
score :math:`q \cdot k / \sqrt{d_k}` is bounded by :math:`\sqrt{d_k}\,\max(1 + w)^2`: the
logits cannot grow without bound during training (Dehghani et al., 2023; Wortsman et al.,
2023), whatever the size of :math:`W_Q` and :math:`W_K`.

Functions
---------
:func:`qk_rms_norm`        the per-head RMSNorm with the (1 + w) gain, ``(..., n, d_k)``
:func:`qk_norm_attention`  QK-norm then scaled dot-product attention, the SDPA call shape
:func:`qk_norm`            a per-head attention with the gains bound, for ``attention=`` of
                           :func:`attnref.multi_head_attention` and the layers
"""

from __future__ import annotations

from typing import Callable

import torch

from attnref import _validate as check
from attnref.attention import AttentionResult, scaled_dot_product_attention
from attnref.decoder import rms_normalise

Tensor = torch.Tensor


def qk_rms_norm(x: Tensor, weight: Tensor | None = None, *, eps: float = 1e-6,
                unit_offset: bool = True) -> Tensor:
    r"""Per-head RMSNorm :math:`x / \sqrt{\operatorname{mean}(x^2) + \varepsilon} \odot (1 + w)` over the
    last axis of ``x (..., n, d_k)``; ``weight`` ``(d_k,)`` or ``None`` (:math:`w = 0`, gain 1).

    ``unit_offset=False``: the gain is ``weight`` itself. Computed in float32 for float16/bfloat16
    (gain included, as Gemma), in the input's dtype otherwise; the result in the input's dtype.
    """
    check.floating("x", x, min_dim=1)
    if x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last dimension (the head width d_k), got shape {check.shape_of(x)}")
    eps = check.real_number("eps", eps, nonnegative=True)
    check.boolean("unit_offset", unit_offset)
    check.vector("weight", weight, x.shape[-1], x, "x")
    work = x.float() if x.dtype in check.HALF_PRECISION else x
    normalised = rms_normalise(work, eps)                     # (..., n, d_k), RMS ≈ 1
    if weight is not None:
        gain = weight.to(work.dtype)
        normalised = normalised * (1.0 + gain if unit_offset else gain)   # ⊙ (1 + w)
    elif not unit_offset:
        raise ValueError("unit_offset=False multiplies by the weight itself: pass weight=")
    return normalised.to(x.dtype)


def qk_norm_attention(query: Tensor, key: Tensor, value: Tensor, *, query_weight: Tensor | None = None,
                      key_weight: Tensor | None = None, eps: float = 1e-6, unit_offset: bool = True,
                      mask: Tensor | None = None, key_mask: Tensor | None = None, causal: bool = False,
                      scale: float | None = None, need_weights: bool = True) -> AttentionResult:
    r"""QK-norm attention: :math:`\operatorname{softmax}(\operatorname{norm}_Q(Q)\operatorname{norm}_K(K)^\top
    \cdot \mathrm{scale})\, V`, ``scale`` default :math:`1/\sqrt{d_k}`.

    ``query (..., n, d_k)``, ``key (..., m, d_k)``, ``value (..., m, d_v)``; ``query_weight`` and
    ``key_weight`` ``(d_k,)`` (Gemma's :math:`w`, gain :math:`1 + w`; ``None``: gain 1). Masks as in
    :func:`attnref.scaled_dot_product_attention`, which computes the rest (``need_weights=False``:
    no weights, block by block, as SDPA).
    """
    check.floating("query", query, min_dim=2)
    check.floating("key", key, min_dim=2)
    check.dim_equal("query and key must have the same width d_k", "query", query, -1, "key", key, -1)
    q = qk_rms_norm(query, query_weight, eps=eps, unit_offset=unit_offset)   # (..., n, d_k)
    k = qk_rms_norm(key, key_weight, eps=eps, unit_offset=unit_offset)       # (..., m, d_k)
    return scaled_dot_product_attention(q, k, value, mask=mask, key_mask=key_mask, causal=causal, scale=scale,
                                        need_weights=need_weights)


def qk_norm(query_weight: Tensor | None = None, key_weight: Tensor | None = None, *, eps: float = 1e-6,
            unit_offset: bool = True, scale: float | None = None) -> Callable[..., AttentionResult]:
    """QK-norm attention with its gains bound: ``f(query, key, value, *, mask=None, key_mask=None,
    causal=False, need_weights=True)``, a kernel (the contract of :mod:`attnref.multihead`) that
    :func:`attnref.multi_head_attention`, the layers and the training models take as ``attention=``. The weights may be ``torch.nn.Parameter`` s
    (they are read at every call, so a training step updates what the function uses)."""
    check.real_number("eps", eps, nonnegative=True)
    check.boolean("unit_offset", unit_offset)

    def attention(query: Tensor, key: Tensor, value: Tensor, *, mask: Tensor | None = None,
                  key_mask: Tensor | None = None, causal: bool = False, need_weights: bool = True) -> AttentionResult:
        return qk_norm_attention(query, key, value, query_weight=query_weight, key_weight=key_weight, eps=eps,
                                 unit_offset=unit_offset, mask=mask, key_mask=key_mask, causal=causal, scale=scale,
                                 need_weights=need_weights)

    attention.__name__ = attention.__qualname__ = "qk_norm_attention"
    return attention
