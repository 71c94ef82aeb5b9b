"""Chapter 10, claims W1–W4: attention weights that are negative or zero on purpose.

* Differential attention (Ye et al. 2024): ``(A₁ − λA₂) V`` with ``A₁``, ``A₂`` two softmax maps of
  one head (two query/key projections, one value projection). Its effective weights can be
  negative and each row sums to ``1 − λ``; a sink that both maps share cancels.
* The softmax with a null slot (Miller 2023, "softmax₁"): ``e^{s_j} / (1 + Σ_l e^{s_l})``, softmax
  over the keys plus one extra key of score 0 whose value is the zero vector: the mass it takes goes
  to nothing.

The sink rule of W2 (fixed before the per-row sink weights were measured, :data:`SINK_RULE`): in
every block whose mean share of attention on the first token exceeds ``sink_block`` (A1's sink
blocks), take the two heads with the largest sink mass, ``λ`` the ratio of their total sink masses
(the smaller over the larger, so ``λ ≤ 1``), and measure the share of the first head's sink weight
that remains in the differential map, ``Σ_t |m₁(t) − λ m₂(t)| / Σ_t m₁(t)`` over the rows ``t ≥ 1``;
the claim holds on a model when the median over its sink blocks is at most ``residual_max``.
"""

from __future__ import annotations

import torch

from attnref import _validate as check

Tensor = torch.Tensor

SINK_RULE = {"sink_block": 0.5, "residual_max": 0.25}


def differential_weights(first: Tensor, second: Tensor, lam: float | Tensor) -> Tensor:
    """``A₁ − λ A₂`` for two attention maps of the same shape ``(..., n, m)``."""
    check.floating("first", first, min_dim=2)
    check.floating("second", second, min_dim=2)
    if first.shape != second.shape:
        raise ValueError(f"first and second must have one shape, got {check.shape_of(first)} and "
                         f"{check.shape_of(second)}")
    return first - lam * second


def differential_attention(q1: Tensor, k1: Tensor, q2: Tensor, k2: Tensor, v: Tensor, lam: float | Tensor, *,
                           causal: bool = False, scale: float | None = None):
    """Differential attention of one head: ``(softmax(q₁k₁ᵀ s) − λ softmax(q₂k₂ᵀ s)) v`` with ``s`` the
    scale (default ``1/√d_k``), through :func:`attnref.scaled_dot_product_attention` twice. Returns
    ``(output (..., n, d_v), effective weights (..., n, m))``."""
    from attnref.attention import scaled_dot_product_attention
    one = scaled_dot_product_attention(q1, k1, v, causal=causal, scale=scale)
    two = scaled_dot_product_attention(q2, k2, v, causal=causal, scale=scale)
    return one.output - lam * two.output, differential_weights(one.weights, two.weights, lam)


def softmax_one(scores: Tensor, dim: int = -1) -> Tensor:
    """The softmax with a null slot, ``e^{s_j} / (1 + Σ_l e^{s_l})``, computed stably (the null slot's
    score 0 takes part in the maximum)."""
    check.floating("scores", scores, min_dim=1)
    top = scores.amax(dim=dim, keepdim=True).clamp_min(0.0)
    e = (scores - top).exp()
    return e / ((-top).exp() + e.sum(dim=dim, keepdim=True))


def null_slot_attention(q: Tensor, k: Tensor, v: Tensor, *, scale: float | None = None) -> Tensor:
    """Attention with softmax₁: ``softmax₁(q kᵀ s) v``, ``(..., n, d_v)``."""
    s = (q.shape[-1] ** -0.5) if scale is None else scale
    return softmax_one(q @ k.transpose(-1, -2) * s) @ v


def with_null_key(q: Tensor, k: Tensor, v: Tensor, *, scale: float | None = None):
    """The same layer as ordinary attention over one extra key whose score is 0 and whose value is 0:
    :func:`attnref.scaled_dot_product_attention` with the key ``0`` prepended (its score ``q·0 = 0``)."""
    from attnref.attention import scaled_dot_product_attention
    zero_k = k.new_zeros(*k.shape[:-2], 1, k.shape[-1])
    zero_v = v.new_zeros(*v.shape[:-2], 1, v.shape[-1])
    return scaled_dot_product_attention(q, torch.cat([zero_k, k], -2), torch.cat([zero_v, v], -2), scale=scale)


def sink_residual(sink_rows: Tensor, block_share: Tensor, rule: dict = SINK_RULE) -> tuple[Tensor, Tensor]:
    """W2's rule on one model: ``sink_rows (layers, h, rows)`` the weight each head's rows ``t ≥ 1`` put
    on the first token, ``block_share (layers,)`` the blocks' mean share. Returns the residual share
    per sink block and the sink blocks' indices (see the module docstring)."""
    blocks = (block_share > rule["sink_block"]).nonzero().flatten()
    residuals = []
    for layer in blocks.tolist():
        totals = sink_rows[layer].sum(-1)                                 # (h,)
        top = totals.topk(2).indices
        big, small = (top[0], top[1])
        lam = totals[small] / totals[big]                                 # ≤ 1
        first, second = sink_rows[layer, small], sink_rows[layer, big]    # λ-scaled: the larger map
        residuals.append((first - lam * second).abs().sum() / first.sum())
    out = torch.stack(residuals) if residuals else sink_rows.new_zeros(0)
    return out, blocks
