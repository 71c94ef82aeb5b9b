r"""Attention without the ``n × m`` matrix: the online softmax, block by block (claim F1).

Keys and values are read in blocks of ``block`` columns. Each query row keeps three running
quantities — the largest score seen so far :math:`m_i`, the sum of exponentials relative to it
:math:`\ell_i`, and the accumulated output :math:`a_i` — and updates them per block
:math:`B = [k_0, k_1)` (Milakov & Gimelshein 2018; Dao et al. 2022):

.. math::

    m_i' = \max(m_i, \max_{j \in B} s_{ij}), \qquad
    \alpha_i = e^{m_i - m_i'}, \qquad
    p_{ij} = e^{s_{ij} - m_i'} \; (j \in B),

    \ell_i' = \alpha_i \ell_i + \sum_{j \in B} p_{ij}, \qquad
    a_i' = \alpha_i a_i + \sum_{j \in B} p_{ij} v_j,

starting from :math:`m_i = -\infty`, :math:`\ell_i = 0`, :math:`a_i = 0`; at the end
:math:`y_i = a_i / \ell_i`, which is :math:`\sum_j \mathrm{softmax}_j(s_{ij})\, v_j` exactly in
real arithmetic (chapter 9 derives it). Only a ``(..., n, block)`` tile of scores exists at any
time: memory ``O(n · block)`` instead of ``O(n · m)``.

Masks that depend only on the positions (``causal``, a sliding ``window``) are built per block
from indices, and a block whose every pair is masked is skipped: under a causal mask the key block
``[k_0, k_1)`` is seen only by the queries ``i ≥ k_0``, a contiguous range of rows, so about half
of the tiles are never computed.

The gradient (:class:`_BlockwiseAttention`) recomputes each tile from the saved log-sum-exp
:math:`L_i = m_i + \log \ell_i` instead of storing the weights (FlashAttention's backward):
:math:`p_{ij} = e^{s_{ij} - L_i}`, :math:`D_i = \mathrm{d}y_i \cdot y_i`,
:math:`\mathrm{d}s_{ij} = p_{ij}(\mathrm{d}y_i \cdot v_j - D_i)`. A second derivative
(``create_graph=True``) is taken through the one-matrix formula.

Everything here receives checked inputs in the working dtype (float32 for half precision);
:func:`attnref.attention.scaled_dot_product_attention` with ``need_weights=False`` is the entry
point that checks, casts and calls :func:`blockwise_attention`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from attnref import _validate as check

Tensor = torch.Tensor

#: The tile of scores holds at most twice as many numbers as the output, or this many when that
#: is more (0.5 MiB of float32): beyond the output the memory stays a small multiple of it.
TILE_ELEMENTS = 2 ** 17
#: The narrowest key block the automatic choice takes (below it the loop's overhead dominates).
MIN_BLOCK = 32


class BlockPlan(NamedTuple):
    """Which tiles of the ``n × m`` score matrix the blockwise loop computes.

    ``steps``: one ``(k0, k1, r0, r1)`` per key block that is computed — keys ``[k0, k1)``
    against query rows ``[r0, r1)`` (every other row sees none of these keys).
    ``tiles_computed`` / ``tiles_total``: the ``block × block`` tiles of the score matrix the
    loop touches, and all of them; the difference is what the causal or window mask skips.
    """

    block: int
    steps: tuple[tuple[int, int, int, int], ...]
    tiles_computed: int
    tiles_total: int


def visible_rows(k0: int, k1: int, n: int, causal: bool, window: int | None) -> tuple[int, int]:
    """The query rows ``[r0, r1)`` that see at least one key of ``[k0, k1)``.

    ``causal``: key ``j`` is seen by the queries ``i ≥ j`` (top-left aligned), so rows from ``k0``.
    ``window`` (implies causal): key ``j`` is seen by ``j ≤ i < j + window``, so rows up to
    ``k1 − 1 + window``."""
    if window is not None:
        return min(k0, n), max(min(k0, n), min(n, k1 - 1 + window))
    if causal:
        return min(k0, n), n
    return 0, n


def plan(n: int, m: int, block: int, causal: bool = False, window: int | None = None) -> BlockPlan:
    """The :class:`BlockPlan` of an ``n × m`` score matrix read in key blocks of ``block``."""
    check.positive_int("block", block)
    steps = []
    tiles = 0
    for k0 in range(0, m, block):
        k1 = min(k0 + block, m)
        r0, r1 = visible_rows(k0, k1, n, causal, window)
        if r0 >= r1:
            continue                                   # no query sees these keys: skipped
        steps.append((k0, k1, r0, r1))
        tiles += (r1 - 1) // block - r0 // block + 1   # the block-row tiles [r0, r1) overlaps
    total = math.ceil(n / block) * math.ceil(m / block)
    return BlockPlan(block, tuple(steps), tiles, total)


def default_block(batch: int, n: int, m: int, d_v: int) -> int:
    """The key block width: a tile of ``batch × n × block`` scores within ``max(TILE_ELEMENTS,
    2 · batch · n · d_v)`` numbers (twice the output), at least :data:`MIN_BLOCK`, at most ``m``."""
    budget = max(TILE_ELEMENTS, 2 * batch * n * d_v)
    block = budget // max(1, batch * n)
    return max(1, min(m, max(MIN_BLOCK, block)))


def round_off_terms(d_k: int, sigma: float, block: int, blocks: int, *, scale: float,
                    exact_scores: bool = False) -> dict[str, float]:
    r"""The terms of claim F1's round-off bound, by error source (chapter 9 derives each):

    .. math:: |\hat y_{ic} - y_{ic}| \le c\, u \sum_j w_{ij} |v_{jc}|, \qquad c = \textstyle\sum \text{terms}

    to first order in the unit round-off ``u`` of the working dtype, for ``blocks`` = T key blocks of at
    most ``block`` = b keys, head width ``d_k`` and ``sigma`` ≥ every ``|s_ij|`` (``scale · max‖q‖ max‖k‖``).
    A perturbation that acts on the numerator and the denominator of a weight counts twice.

    * ``"score"`` 2 d_k σ — the dot product of length d_k (γ_{d_k} ≈ d_k u, relative to Σ_a |q_a k_a| ≤ σ);
    * ``"scale"`` 2σ — the rounding of ``(q·k) · scale``; 0 when the scale is a power of two (exact);
    * ``"shift"`` 4σ — ``s − m``, with ``|s − m| ≤ 2σ``;
    * ``"exp"`` 4 — one ulp (2u) of ``e^{s − m}``;
    * ``"alpha"`` (T − 1)(4σ + 4) — the rescale factor ``α_t = e^{m_{t−1} − m_t}`` of blocks 2 … T, rounded
      in its subtraction (2σu) and its exponential (2u). It multiplies ℓ and a alike, but only the
      terms of the blocks before ``t``: it does not cancel;
    * ``"block sums"`` 2b — the sums of b terms in ℓ and a;
    * ``"rescalings"`` 4T — T multiplications by α and T additions, in ℓ and in a;
    * ``"division"`` 1 — the final ``a / ℓ``.

    ``exact_scores``: the scores (and so ``s − m`` and ``m_{t−1} − m_t``) are computed exactly; the
    score, scale and shift terms and α's subtraction drop out.
    """
    T = blocks
    power_of_two = scale != 0 and math.frexp(abs(scale))[0] == 0.5
    exact = 0.0 if exact_scores else 1.0
    return {"score": exact * 2 * d_k * sigma,
            "scale": 0.0 if exact_scores or power_of_two else 2 * sigma,
            "shift": exact * 4 * sigma,
            "exp": 4.0,
            "alpha": (T - 1) * (exact * 4 * sigma + 4),
            "block sums": 2.0 * block,
            "rescalings": 4.0 * T,
            "division": 1.0}


def round_off_coefficient(d_k: int, sigma: float, block: int, blocks: int, *, scale: float,
                          exact_scores: bool = False) -> float:
    """The coefficient ``c`` of claim F1's bound: the sum of :func:`round_off_terms`,
    ``2 d_k σ + 2σ (0 for a power-of-two scale) + 4Tσ + 2b + 8T + 1``."""
    return sum(round_off_terms(d_k, sigma, block, blocks, scale=scale, exact_scores=exact_scores).values())


def hidden_mask(rows: tuple[int, int], cols: tuple[int, int], causal: bool, window: int | None,
                device: torch.device) -> Tensor:
    """``(rows, cols)`` boolean over queries ``rows[0] … rows[1] − 1`` and keys ``cols[0] … cols[1] − 1``:
    True where query ``i`` may not see key ``j`` — ``j > i`` (causal), or ``j ≤ i − window``."""
    i = torch.arange(rows[0], rows[1], device=device)[:, None]      # (rows, 1)
    j = torch.arange(cols[0], cols[1], device=device)[None, :]      # (1, cols)
    hidden = j > i if (causal or window is not None) else torch.zeros_like(j > i)
    if window is not None:
        hidden = hidden | (j <= i - window)
    return hidden


def _masked_row_ranges(k0: int, k1: int, r0: int, r1: int, causal: bool,
                       window: int | None) -> list[tuple[int, int]]:
    """The rows of ``[r0, r1)`` for which some key of ``[k0, k1)`` is hidden by the causal or
    window mask: below the diagonal's end (``i < k1 − 1``) or past the window's start
    (``i ≥ k0 + window``). The rows between see the whole block and need no mask."""
    if not causal and window is None:
        return []
    diagonal_end = min(r1, max(r0, k1 - 1))
    ranges = [(r0, diagonal_end)] if diagonal_end > r0 else []
    if window is not None:
        window_start = max(r0, k0 + window)
        if window_start < r1:
            if ranges and window_start <= ranges[-1][1]:
                ranges[-1] = (ranges[-1][0], r1)
            else:
                ranges.append((window_start, r1))
    return ranges


def _tile_mask(mask: Tensor, r0: int, r1: int, k0: int, k1: int) -> Tensor:
    """The part of a mask ``(..., n or 1, m or 1)`` over rows ``[r0, r1)`` and keys ``[k0, k1)``."""
    rows = slice(None) if mask.shape[-2] == 1 else slice(r0, r1)
    cols = slice(None) if mask.shape[-1] == 1 else slice(k0, k1)
    return mask[..., rows, cols]


def _scores_tile(q: Tensor, k: Tensor, scale: float, steps: tuple[int, int, int, int], buffer: Tensor,
                 batch_shape: tuple[int, ...], mask: Tensor | None, causal: bool,
                 window: int | None) -> Tensor:
    """The masked scores ``s_ij = (q_i · k_j) · scale`` of one step, ``(B, rows, cols)``, in
    ``buffer``'s memory; masked pairs are ``-inf``. The scale multiplies the products, as in the
    one-matrix path (the same two roundings, and nothing is computed that the caller's overflow
    guard does not bound: scaling the keys first could overflow where the scores do not)."""
    k0, k1, r0, r1 = steps
    B = q.shape[0]
    tile = buffer[: B * (r1 - r0) * (k1 - k0)].view(B, r1 - r0, k1 - k0)
    torch.bmm(q[:, r0:r1], k[:, k0:k1].transpose(1, 2), out=tile)   # (B, rows, d_k) @ (B, d_k, cols) -> (B, rows, cols)
    tile.mul_(scale)                                                  # s_ij = (q_i · k_j) · scale
    if mask is not None:
        part = _tile_mask(mask, r0, r1, k0, k1)                      # (..., rows or 1, cols or 1)
        shaped = tile.view(batch_shape + tile.shape[1:])             # (..., rows, cols)
        if part.dtype == torch.bool:
            shaped.masked_fill_(~part, float("-inf"))
        else:
            shaped.add_(part)
    for a, b in _masked_row_ranges(k0, k1, r0, r1, causal, window):
        hidden = hidden_mask((a, b), (k0, k1), causal, window, q.device)   # (rows', cols)
        tile[:, a - r0:b - r0].masked_fill_(hidden, float("-inf"))
    return tile


def _finite_shift(row_max: Tensor) -> Tensor:
    """The running maximum where it is finite, 0 where every score so far is masked (-inf), so
    that no ``-inf − (−inf) = NaN`` appears."""
    return torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))


def _forward(q: Tensor, k: Tensor, v: Tensor, scale: float, batch_shape: tuple[int, ...], mask: Tensor | None,
             causal: bool, window: int | None, block: int,
             log_sum_exp: bool = True) -> tuple[Tensor, Tensor | None]:
    """Output ``(B, n, d_v)`` and log-sum-exp ``(B, n, 1)`` (``None`` unless ``log_sum_exp``) of
    ``q (B, n, d_k)``, ``k (B, m, d_k)``, ``v (B, m, d_v)``."""
    B, n, _ = q.shape
    m, d_v = v.shape[1], v.shape[2]
    steps = plan(n, m, block, causal, window).steps
    if len(steps) == 1 and steps[0][2:] == (0, n):
        return _one_step(q, k, v, scale, batch_shape, mask, causal, window, steps[0], log_sum_exp)
    accumulator = q.new_zeros(B, n, d_v)                   # a_i: Σ_j e^{s_ij − m_i} v_j
    row_max = q.new_full((B, n, 1), float("-inf"))         # m_i: the largest score seen so far
    row_sum = q.new_zeros(B, n, 1)                         # ℓ_i: Σ_j e^{s_ij − m_i}
    largest = max(((r1 - r0) * (k1 - k0) for k0, k1, r0, r1 in steps), default=0)
    buffer = q.new_empty(B * largest)                      # one tile's memory, reused by every step
    for step in steps:
        k0, k1, r0, r1 = step
        tile = _scores_tile(q, k, scale, step, buffer, batch_shape, mask, causal, window)   # s_ij: (B, rows, cols)
        old_max = row_max[:, r0:r1]                                       # (B, rows, 1), a view
        new_max = torch.maximum(old_max, tile.amax(dim=-1, keepdim=True))  # m_i' = max(m_i, max_j s_ij)
        # without a mask every computed row sees a key of the block: m_i' is finite
        shift = new_max if mask is None else _finite_shift(new_max)
        rescale = torch.exp(old_max - shift)                              # α_i = e^{m_i − m_i'} (0 at the start)
        probabilities = tile.sub_(shift).exp_()                           # p_ij = e^{s_ij − m_i'}: (B, rows, cols)
        row_sum[:, r0:r1].mul_(rescale).add_(probabilities.sum(dim=-1, keepdim=True))   # ℓ_i' = α_i ℓ_i + Σ_j p_ij
        rows = accumulator[:, r0:r1]                                      # (B, rows, d_v), a view
        rows.mul_(rescale)                                                # α_i a_i
        rows.baddbmm_(probabilities, v[:, k0:k1])                         # + (B, rows, cols) @ (B, cols, d_v)
        old_max.copy_(new_max)                                            # m_i ← m_i'
    empty = row_sum == 0                                                  # every key masked (or m = 0)
    output = accumulator.div_(torch.where(empty, torch.ones_like(row_sum), row_sum))   # y_i = a_i / ℓ_i
    if not log_sum_exp:
        return output, None
    return output, torch.where(empty, torch.full_like(row_sum, float("-inf")),
                               _finite_shift(row_max) + torch.log(row_sum))            # L_i = m_i + log ℓ_i


def _one_step(q: Tensor, k: Tensor, v: Tensor, scale: float, batch_shape: tuple[int, ...], mask: Tensor | None,
              causal: bool, window: int | None, step: tuple[int, int, int, int],
              log_sum_exp: bool) -> tuple[Tensor, Tensor | None]:
    """:func:`_forward` when one block holds every key and every row: the loop's first step without
    the rescale of the empty start (``α = e^{−∞} = 0`` times ``ℓ = a = 0``), the same numbers bit for
    bit (``0 · 0 + x = x``; the product onto a zero accumulator is the plain product) and about half
    the operations — what a small call costs."""
    tile = _scores_tile(q, k, scale, step, q.new_empty(q.shape[0] * q.shape[1] * k.shape[1]), batch_shape, mask,
                        causal, window)                                  # s_ij: (B, n, m)
    row_max = tile.amax(dim=-1, keepdim=True)                             # m_i
    shift = row_max if mask is None else _finite_shift(row_max)
    probabilities = tile.sub_(shift).exp_()                               # p_ij = e^{s_ij − m_i}
    row_sum = probabilities.sum(dim=-1, keepdim=True)                     # ℓ_i
    output = torch.bmm(probabilities, v[:, step[0]:step[1]])              # a_i: (B, n, cols) @ (B, cols, d_v)
    empty = row_sum == 0                                                  # every key masked
    output = output.div_(torch.where(empty, torch.ones_like(row_sum), row_sum))   # y_i = a_i / ℓ_i
    if not log_sum_exp:
        return output, None
    return output, torch.where(empty, torch.full_like(row_sum, float("-inf")),
                               _finite_shift(row_max) + torch.log(row_sum))


def _backward(q: Tensor, k: Tensor, v: Tensor, scale: float, output: Tensor, log_sum_exp: Tensor,
              grad_output: Tensor, batch_shape: tuple[int, ...], mask: Tensor | None, causal: bool,
              window: int | None, block: int) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients with respect to ``q``, ``k`` and ``v``, tile by tile (nothing ``n × m``)."""
    B, n, _ = q.shape
    m = v.shape[1]
    steps = plan(n, m, block, causal, window).steps
    grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (grad_output * output).sum(dim=-1, keepdim=True)             # D_i = dy_i · y_i: (B, n, 1)
    # a fully masked row has L_i = -inf and zero output: +inf makes its p_ij = e^{-inf} = 0
    log_sum_exp = torch.where(torch.isfinite(log_sum_exp), log_sum_exp, torch.full_like(log_sum_exp, float("inf")))
    largest = max(((r1 - r0) * (k1 - k0) for k0, k1, r0, r1 in steps), default=0)
    buffer = q.new_empty(B * largest)
    for step in steps:
        k0, k1, r0, r1 = step
        tile = _scores_tile(q, k, scale, step, buffer, batch_shape, mask, causal, window)   # s_ij: (B, rows, cols)
        probabilities = tile.sub_(log_sum_exp[:, r0:r1]).exp_()           # p_ij = e^{s_ij − L_i}
        grad_rows = grad_output[:, r0:r1]                                  # dy_i: (B, rows, d_v)
        grad_v[:, k0:k1].baddbmm_(probabilities.transpose(1, 2), grad_rows)   # dv_j += Σ_i p_ij dy_i
        grad_p = torch.bmm(grad_rows, v[:, k0:k1].transpose(1, 2))        # dp_ij = dy_i · v_j: (B, rows, cols)
        grad_s = probabilities.mul_(grad_p.sub_(delta[:, r0:r1]))          # ds_ij = p_ij (dp_ij − D_i)
        grad_q[:, r0:r1].baddbmm_(grad_s, k[:, k0:k1])                     # dq_i += Σ_j ds_ij k_j (· scale below)
        grad_k[:, k0:k1].baddbmm_(grad_s.transpose(1, 2), q[:, r0:r1])     # dk_j += Σ_i ds_ij q_i (· scale below)
    return grad_q.mul_(scale), grad_k.mul_(scale), grad_v


def _one_matrix(q: Tensor, k: Tensor, v: Tensor, scale: float, batch_shape: tuple[int, ...], mask: Tensor | None,
                causal: bool, window: int | None) -> Tensor:
    """``softmax(scale · q kᵀ + masks) v``, differentiable twice (for ``create_graph``)."""
    scores = (q @ k.transpose(1, 2)) * scale                              # (B, n, m)
    n, m = scores.shape[-2:]
    shaped = scores.view(batch_shape + (n, m))
    if mask is not None:
        shaped = shaped.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else shaped + mask
    if causal or window is not None:
        shaped = shaped.masked_fill(hidden_mask((0, n), (0, m), causal, window, q.device), float("-inf"))
    scores = shaped.reshape(scores.shape)
    row_max = _finite_shift(scores.amax(dim=-1, keepdim=True)).detach()
    exps = torch.exp(scores - row_max)
    total = exps.sum(dim=-1, keepdim=True)
    weights = exps / torch.where(total > 0, total, torch.ones_like(total))
    return weights @ v


class _BlockwiseAttention(torch.autograd.Function):
    """Blockwise forward, recomputing backward; a second derivative goes through :func:`_one_matrix`."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, batch_shape, causal, window, block):
        output, log_sum_exp = _forward(q, k, v, scale, batch_shape, mask, causal, window, block)
        ctx.save_for_backward(q, k, v, output, log_sum_exp, mask)
        ctx.settings = (scale, batch_shape, causal, window, block)
        ctx.mark_non_differentiable(log_sum_exp)
        return output, log_sum_exp

    @staticmethod
    def backward(ctx, grad_output, _grad_log_sum_exp):
        q, k, v, output, log_sum_exp, mask = ctx.saved_tensors
        scale, batch_shape, causal, window, block = ctx.settings
        if torch.is_grad_enabled():            # create_graph=True: differentiate the one-matrix formula
            with torch.enable_grad():
                again = _one_matrix(q, k, v, scale, batch_shape, mask, causal, window)
                grads = torch.autograd.grad(again, (q, k, v), grad_output, create_graph=True, allow_unused=True)
            return (*grads, None, None, None, None, None, None)
        grad_q, grad_k, grad_v = _backward(q, k, v, scale, output, log_sum_exp, grad_output.contiguous(),
                                           batch_shape, mask, causal, window, block)
        return grad_q, grad_k, grad_v, None, None, None, None, None, None


def blockwise_attention(query: Tensor, key: Tensor, value: Tensor, *, scale: float, mask: Tensor | None = None,
                        causal: bool = False, window: int | None = None, block: int | None = None,
                        return_log_sum_exp: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    r"""``softmax(scale · Q Kᵀ + mask) V`` by the online softmax, ``(..., n, d_v)``.

    Inputs are checked by the caller and in the working dtype (float32 or float64): query
    ``(..., n, d_k)``, key ``(..., m, d_k)``, value ``(..., m, d_v)`` with broadcastable batch
    axes; ``mask`` boolean (True = may attend) or additive, broadcastable to ``(..., n, m)``
    (``key_mask`` folded in); ``causal`` keeps ``j ≤ i``; ``window`` keeps ``i − window < j ≤ i``.
    ``block``: key block width (default :func:`default_block`). A query whose keys are all masked
    gets a zero output, as in :func:`attnref.attention.softmax`. ``return_log_sum_exp``: also
    :math:`L_i = \log \sum_j e^{s_{ij}}` (``-inf`` for a fully masked row), ``(..., n)``.
    """
    batch_shape = check.broadcast_shapes(tuple(query.shape[:-2]), tuple(key.shape[:-2]), tuple(value.shape[:-2]))
    if mask is not None:
        batch_shape = check.broadcast_shapes(batch_shape, tuple(mask.shape[:-2]))
    batch_shape = tuple(batch_shape)
    n, m, d_k, d_v = query.shape[-2], key.shape[-2], query.shape[-1], value.shape[-1]
    B = math.prod(batch_shape)
    q = query.expand(batch_shape + (n, d_k)).reshape(B, n, d_k)              # (B, n, d_k), a view when it can be
    k = key.expand(batch_shape + (m, d_k)).reshape(B, m, d_k)                # (B, m, d_k)
    v = value.expand(batch_shape + (m, d_v)).reshape(B, m, d_v)              # (B, m, d_v)
    block = default_block(B, n, m, d_v) if block is None else check.positive_int("block", block)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        output, log_sum_exp = _BlockwiseAttention.apply(q, k, v, mask, scale, batch_shape, causal, window, block)
    else:
        output, log_sum_exp = _forward(q, k, v, scale, batch_shape, mask, causal, window, block,
                                       log_sum_exp=return_log_sum_exp)
    output = output.view(batch_shape + (n, d_v))
    if return_log_sum_exp:
        return output, log_sum_exp.view(batch_shape + (n,))
    return output
