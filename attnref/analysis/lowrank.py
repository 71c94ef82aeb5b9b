r"""Ranks of fused score matrices and of attention logits: exact, numerical, and modulo row shifts.

A head's fused matrix :math:`W_i = W_i^Q W_i^{K\top}` and its logit matrix
:math:`S = X_q W_i X_k^\top` both factor through :math:`d_k` dimensions, so their rank is at
most :math:`d_k`. Softmax forgets one number per row (:math:`\mathrm{softmax}(s + c\,\mathbf 1) =
\mathrm{softmax}(s)`), so what an attention pattern :math:`P` pins down is its log-weights
:math:`\log P` *up to per-row shifts* :math:`c\,\mathbf 1^\top`; the smallest rank among
them is the rank of :math:`(\log P) J` with the centring matrix
:math:`J = I - \tfrac1m \mathbf 1 \mathbf 1^\top`.
"""

from __future__ import annotations

import math
from typing import Sequence

import sympy as sp
import torch
from sympy.polys.matrices import DomainMatrix

from attnref import _validate as check

Tensor = torch.Tensor


def exact_rank(matrix: sp.MatrixBase) -> int:
    """The exact rank of a sympy matrix with rational or polynomial entries.

    Entries that are polynomials in symbols are treated as elements of the field of rational
    functions, so the result is the *generic* rank: the rank for all values of the symbols
    outside a set of measure zero (where some minors vanish). Integer or rational entries give
    the ordinary exact rank. No floating point is involved.
    """
    if not isinstance(matrix, sp.MatrixBase):
        raise ValueError(f"matrix must be a sympy Matrix, got {type(matrix).__name__}")
    if matrix.rows == 0 or matrix.cols == 0:
        raise ValueError(f"matrix must not be empty, got shape {matrix.shape}")
    expanded = matrix.applyfunc(sp.expand)
    if not all(entry.is_polynomial() for entry in expanded):
        raise ValueError("matrix entries must be polynomials in their symbols (rational coefficients)")
    return DomainMatrix.from_Matrix(expanded).to_field().rank()


def rank_tolerance(singular_values: Tensor, shape: tuple[int, int]) -> float:
    r"""The SVD rank threshold :math:`\sigma_1 \cdot \max(\text{rows}, \text{cols}) \cdot \varepsilon`.

    A backward-stable SVD returns the exact singular values of :math:`A + E` with
    :math:`\lVert E\rVert_2 \lesssim \max(\text{rows}, \text{cols})\,\varepsilon\,\lVert A\rVert_2`,
    so a singular value below this threshold cannot be told apart from zero (the rule of
    ``numpy.linalg.matrix_rank`` and of LAPACK's rank-revealing routines).
    """
    return singular_values.max().item() * max(shape) * torch.finfo(singular_values.dtype).eps


def numerical_rank(matrix: Tensor) -> int:
    r"""Number of singular values above :func:`rank_tolerance` (``matrix``: ``(rows, cols)``)."""
    check.floating("matrix", matrix, exact_dim=2)
    singular_values = torch.linalg.svdvals(matrix)    # (min(rows, cols),), descending
    if singular_values.max() == 0:
        return 0
    return int((singular_values > rank_tolerance(singular_values, tuple(matrix.shape))).sum())


def centre_rows(logits: Tensor) -> Tensor:
    r""":math:`L J`: each row of ``logits`` ``(..., n, m)`` minus its mean, the representative of
    :math:`L` modulo per-row shifts :math:`L + c\,\mathbf 1^\top`."""
    check.floating("logits", logits, min_dim=2)
    return logits - logits.mean(dim=-1, keepdim=True)   # L − (L 1/m) 1ᵀ = L J


def min_rank_over_row_shifts(logits: Tensor) -> int:
    r""":math:`\min_c \operatorname{rank}(L + c\,\mathbf 1^\top) = \operatorname{rank}(L J)`.

    ``≥``: :math:`(L + c\mathbf 1^\top) J = L J` and multiplying by :math:`J` cannot raise the
    rank. ``≤``: the shift :math:`c = -L\mathbf 1/m` gives :math:`L J` itself.
    """
    check.floating("logits", logits, exact_dim=2)
    return numerical_rank(centre_rows(logits))


def distance_to_rank_modulo_row_shifts(logits: Tensor, rank: int) -> float:
    r""":math:`\min \lVert L - M - c\,\mathbf 1^\top\rVert_F` over :math:`\operatorname{rank} M \le r` and
    :math:`c \in \mathbb{R}^n`: :math:`\sqrt{\textstyle\sum_{i > r} \sigma_i(LJ)^2}`.

    Lower bound: :math:`\lVert L - M - c\mathbf 1^\top\rVert_F \ge \lVert (L - M - c\mathbf 1^\top) J\rVert_F
    = \lVert LJ - MJ\rVert_F` and :math:`\operatorname{rank}(MJ) \le r` (Eckart–Young). It is
    attained by the truncated SVD of :math:`LJ` and :math:`c = L\mathbf 1/m`.
    """
    check.floating("logits", logits, exact_dim=2)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a non-negative int, got {rank!r}")
    singular_values = torch.linalg.svdvals(centre_rows(logits))   # (min(n, m),), descending
    return math.sqrt((singular_values[rank:] ** 2).sum().item())


def fit_single_head(target: Tensor, d_k: int | Sequence[int], steps: int = 300, lr: float = 0.05,
                    generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    r"""Fit one head's attention pattern to a target by Adam on the cross-entropy.

    The head's logits are :math:`S = Q K^\top / \sqrt{d_k}` with free :math:`Q, K \in
    \mathbb{R}^{n\times d_k}` — every logit matrix of one head on any input :math:`X` with
    :math:`d \ge n` and full row rank (:math:`Q = X W^Q` reaches every :math:`n\times d_k`
    matrix). The loss is the mean over rows of
    :math:`\mathrm{KL}(P_i \,\Vert\, \mathrm{softmax}(S_i)) = \sum_j P_{ij} (\log P_{ij} - \log A_{ij})`.

    Several widths ``d_k = (w_1, …, w_r)`` are fitted as ``r`` independent heads in one batched
    run: each head has ``max(w)`` columns of which the last ``max(w) − w_b`` are multiplied by
    zero, and the total loss is the sum of the heads' losses, so (Adam being elementwise) each
    head follows exactly the steps it would follow alone.

    Args:
        target: ``(n, m)`` row-stochastic with positive entries.
        d_k: one head width, or a sequence of widths.
    Returns the fitted logits ``(n, m)`` and the loss after every step ``(steps,)`` for one
    width; ``(r, n, m)`` and ``(steps, r)`` for a sequence of ``r`` widths.
    """
    check.floating("target", target, exact_dim=2)
    single = isinstance(d_k, int) and not isinstance(d_k, bool)
    widths = [d_k] if single else list(d_k)
    if not widths:
        raise ValueError("d_k must be a positive int or a non-empty sequence of positive ints, got []")
    for width in widths:
        check.positive_int("d_k", width)
    check.positive_int("steps", steps)
    if (target <= 0).any() or ((target.sum(dim=-1) - 1).abs() > 1e-9).any():
        raise ValueError(f"target {check.shape_of(target)} must have positive entries and rows summing to 1")
    n, m = target.shape
    r, width_max = len(widths), max(widths)
    log_target = target.log()                                                  # (n, m)
    column = torch.arange(width_max)
    keep = (column < torch.tensor(widths)[:, None]).to(target.dtype)[:, None, :]   # (r, 1, w_max): 1 = used column
    scale = torch.tensor(widths, dtype=target.dtype).rsqrt()[:, None, None]        # (r, 1, 1): 1/√d_k
    queries = (torch.randn(r, n, width_max, generator=generator, dtype=target.dtype) * 0.1).requires_grad_()
    keys = (torch.randn(r, m, width_max, generator=generator, dtype=target.dtype) * 0.1).requires_grad_()

    def logits_of() -> Tensor:
        return (queries * keep) @ (keys * keep).transpose(-2, -1) * scale      # (r, n, w) @ (r, w, m) -> (r, n, m)

    # Adam (Kingma & Ba, 2015) written out, elementwise: m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g²,
    # θ ← θ − lr · (m/(1−β₁ᵗ)) / (√(v/(1−β₂ᵗ)) + ε). (torch.optim.Adam computes the same steps, but
    # constructing it imports torch._dynamo, which costs about a second.)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    parameters = (queries, keys)
    first = [torch.zeros_like(p) for p in parameters]
    second = [torch.zeros_like(p) for p in parameters]
    losses = torch.empty(steps, r, dtype=target.dtype)
    for step in range(1, steps + 1):
        log_weights = torch.log_softmax(logits_of(), dim=-1)                  # log A: (r, n, m)
        loss = (target * (log_target - log_weights)).sum(dim=-1).mean(dim=-1)   # (r,): mean_i KL(P_i ‖ A_i)
        gradients = torch.autograd.grad(loss.sum(), parameters)
        with torch.no_grad():
            for p, g, m1, m2 in zip(parameters, gradients, first, second):
                m1.mul_(beta1).add_(g, alpha=1 - beta1)
                m2.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                step_size = lr / (1 - beta1 ** step)
                denominator = (m2 / (1 - beta2 ** step)).sqrt_().add_(eps)
                p.addcdiv_(m1, denominator, value=-step_size)
        losses[step - 1] = loss.detach()
    with torch.no_grad():
        logits = logits_of()                                                    # (r, n, m)
    if single:
        return logits[0], losses[:, 0]
    return logits, losses
