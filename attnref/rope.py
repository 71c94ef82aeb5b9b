r"""Rotary position embeddings (RoPE), in the convention of transformers' Llama.

Rotary embeddings (Su et al., RoFormer) encode the position :math:`t` of a token by rotating
its query and key vectors, pair of coordinates by pair of coordinates, through angles
proportional to :math:`t`. With :math:`d_k` even and :math:`p = 0, \dots, d_k/2 - 1`:

.. math::

    \theta_p = b^{-2p/d_k}                       \qquad\text{(frequencies, base } b = 10000\text{)}

    \operatorname{rotate}(x, t)_p           = x_p \cos(t\theta_p) - x_{p + d_k/2} \sin(t\theta_p)

    \operatorname{rotate}(x, t)_{p + d_k/2} = x_{p + d_k/2} \cos(t\theta_p) + x_p \sin(t\theta_p)

**Convention.** Coordinate :math:`p` is paired with :math:`p + d_k/2` (the first half with the
second half), as ``rotate_half`` and ``apply_rotary_pos_emb`` of
``transformers.models.llama.modeling_llama`` and GPT-NeoX do. The RoFormer paper pairs
:math:`(2p, 2p + 1)` instead; the two conventions differ by a fixed permutation of the
coordinates (applied to :math:`W_Q` and :math:`W_K` alike), so they give the same scores for
correspondingly permuted weights but not for the same weights.

**Matrices.** :math:`R_t \in \mathbb{R}^{d_k\times d_k}` (:func:`rotation_matrix`) is the rotation
that acts on a *column* vector: :math:`(R_t)_{pp} = (R_t)_{\bar p\bar p} = \cos t\theta_p`,
:math:`(R_t)_{p\bar p} = -\sin t\theta_p`, :math:`(R_t)_{\bar p p} = \sin t\theta_p` with
:math:`\bar p = p + d_k/2`. Tokens are row vectors in attnref, so
:math:`\operatorname{rotate}(x, t) = x R_t^\top`, and the rotated score of query :math:`q_i`
at position :math:`i` and key :math:`k_j` at position :math:`j` is

.. math::

    \operatorname{rotate}(q_i, i)\, \operatorname{rotate}(k_j, j)^\top
    = q_i R_i^\top R_j k_j^\top = q_i R_{j - i} k_j^\top ,

because :math:`R_a^\top = R_{-a}` and :math:`R_a R_b = R_{a + b}`: it depends on the positions
only through the offset :math:`j - i`.

Functions
---------
:func:`frequencies`      :math:`\theta_p`, shape ``(d_k/2,)``
:func:`angles`           :math:`t\,\theta_p` for every position, shape ``(..., n, d_k/2)``
:func:`cos_sin`          the ``cos``/``sin`` tables in Llama's layout ``[θ, θ]``, ``(..., n, d_k)``
:func:`rotate_half`      :math:`(x_1, x_2) \mapsto (-x_2, x_1)` on the two halves
:func:`rotate`           :math:`\operatorname{rotate}(x, t)` for ``x`` of shape ``(..., n, d_k)``
:func:`rotation_matrix`  :math:`R_t`, shape ``(d_k, d_k)``, for an offset ``t``

Every function builds its tensors on the device and in the dtype of its input (or of the
``dtype``/``device`` arguments), never on the CPU behind the caller's back.

**Half precision.** float16 cannot tell position 4097 from 4096, and a float16 angle
:math:`t\theta_p` at :math:`t = 2048` is off by up to 1 radian. For float16/bfloat16 the positions,
angles and ``cos``/``sin`` tables are therefore computed in float64, :func:`rotate` multiplies in
float32 and rounds the result once to the input's dtype; tables asked for in a half dtype
(:func:`angles`, :func:`cos_sin`) are computed in float64 and rounded once. float32 and float64
are computed in their own dtype.

**NaN.** NaN or ±inf in ``x`` or in the positions raise ``ValueError`` (attnref does not propagate NaN).
"""

from __future__ import annotations

import numbers

import torch

from attnref import _validate as check

Tensor = torch.Tensor

__all__ = ["frequencies", "angles", "cos_sin", "rotate_half", "rotate", "rotation_matrix"]


# --- validation ------------------------------------------------------------------------------

def _head_width(d_k) -> int:
    """``d_k`` must be a positive even int: the coordinates come in pairs."""
    check.positive_int("d_k", d_k)
    if d_k % 2:
        raise ValueError(f"d_k must be even (rotary embeddings rotate pairs of coordinates), got d_k = {d_k}")
    return int(d_k)


def _base(base) -> float:
    """``base`` must be a finite real number > 0 (not a bool; a tensor only with 0 dimensions)."""
    base = float(check.real_number("base", base))
    if base <= 0:
        raise ValueError(f"base must be > 0, got {base!r}")
    return base


def _floating_dtype(name: str, dtype) -> torch.dtype:
    """``dtype``, or torch's default dtype for ``None``: a floating ``torch.dtype``."""
    return check.floating_dtype(name, torch.get_default_dtype() if dtype is None else dtype)


def _table_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the tables are computed in: float64 for float16/bfloat16, else ``dtype`` itself."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float64


def _positions(positions, n: int | None, dtype: torch.dtype, device) -> Tensor:
    """Positions as a floating tensor of shape ``(..., n)`` on ``device``; ``None`` → ``0 … n−1``."""
    if positions is None:
        if n is None:
            raise ValueError("positions must be given when the number of tokens is unknown")
        return torch.arange(n, dtype=dtype, device=device)                     # (n,)
    if isinstance(positions, numbers.Real) and not isinstance(positions, bool):
        positions = torch.tensor([float(positions)], dtype=dtype, device=device)
    if not isinstance(positions, torch.Tensor):
        raise ValueError(f"positions must be a torch.Tensor of shape (..., n), got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise ValueError(f"positions must hold integer or real positions, got dtype {positions.dtype} "
                         f"with shape {tuple(positions.shape)}")
    if positions.dim() == 0:
        positions = positions.reshape(1)
    if device is not None and positions.device != torch.device(device):
        raise ValueError(f"positions is on {positions.device} but the input is on {device}: "
                         f"move positions (shape {tuple(positions.shape)}) to {device}")
    if n is not None and positions.shape[-1] not in (n, 1):
        raise ValueError(f"positions of shape {tuple(positions.shape)} do not match the n = {n} tokens "
                         f"of x (its last dimension must be {n})")
    positions = positions.to(dtype)
    if check.has_values(positions) and not torch.isfinite(positions).all():   # a value check (attnref.checks)
        raise ValueError(f"positions must be finite, got shape {tuple(positions.shape)} with NaN or ±inf")
    return positions


# --- the tables --------------------------------------------------------------------------------

def frequencies(d_k: int, base: float = 10000.0, *, dtype: torch.dtype | None = None,
                device: torch.device | str | None = None) -> Tensor:
    r""":math:`\theta_p = b^{-2p/d_k}` for :math:`p = 0, \dots, d_k/2 - 1`, shape ``(d_k/2,)``.

    Distinct for every ``base ≠ 1`` (strictly decreasing for ``base > 1``); computed in
    float64 and returned in ``dtype`` (default: torch's default dtype).
    """
    d_k = _head_width(d_k)
    base = _base(base)
    dtype = _floating_dtype("dtype", dtype)
    exponents = torch.arange(0, d_k, 2, dtype=torch.float64, device=device) / d_k   # (d_k/2,): 2p/d_k
    return (base ** -exponents).to(dtype)                                         # (d_k/2,)


def angles(positions: Tensor, d_k: int, base: float = 10000.0, *, dtype: torch.dtype | None = None,
           device: torch.device | str | None = None) -> Tensor:
    r""":math:`t\,\theta_p` for each position :math:`t`: ``positions`` ``(..., n)`` → ``(..., n, d_k/2)``.

    ``dtype`` and ``device`` default to those of ``positions`` (if floating) or torch's default dtype.
    """
    if isinstance(positions, torch.Tensor):
        device = positions.device if device is None else device
        if dtype is None and positions.is_floating_point():
            dtype = positions.dtype
    dtype = _floating_dtype("dtype", dtype)
    work = _table_dtype(dtype)
    positions = _positions(positions, None, work, device)                           # (..., n)
    theta = frequencies(d_k, base, dtype=work, device=positions.device)            # (d_k/2,)
    return (positions[..., None] * theta).to(dtype)                                 # (..., n, 1)(d_k/2,) -> (..., n, d_k/2)


def cos_sin(positions: Tensor, d_k: int, base: float = 10000.0, *, dtype: torch.dtype | None = None,
            device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    r"""The tables :math:`\cos(t\theta)` and :math:`\sin(t\theta)` in Llama's layout: each of shape
    ``(..., n, d_k)``, the angles of the ``d_k/2`` pairs repeated as ``[θ_0 … θ_{d_k/2−1}, θ_0 …]``
    (what ``LlamaRotaryEmbedding.forward`` returns, and ``apply_rotary_pos_emb`` takes)."""
    if isinstance(positions, torch.Tensor) and dtype is None and positions.is_floating_point():
        dtype = positions.dtype
    dtype = _floating_dtype("dtype", dtype)
    half = angles(positions, d_k, base, dtype=_table_dtype(dtype), device=device)  # (..., n, d_k/2)
    both = torch.cat((half, half), dim=-1)                                          # (..., n, d_k)
    return both.cos().to(dtype), both.sin().to(dtype)


# --- the rotation --------------------------------------------------------------------------------

def rotate_half(x: Tensor) -> Tensor:
    r""":math:`(x_{:d_k/2},\ x_{d_k/2:}) \mapsto (-x_{d_k/2:},\ x_{:d_k/2})` on the last dimension."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise ValueError(f"x must be a torch.Tensor with a last dimension d_k, got {type(x).__name__}")
    _head_width(x.shape[-1])
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]                                    # (..., d_k/2) each
    return torch.cat((-second, first), dim=-1)                                      # (..., d_k)


def rotate(x: Tensor, positions: Tensor | None = None, base: float = 10000.0) -> Tensor:
    r""":math:`\operatorname{rotate}(x, t) = x \odot \cos(t\theta) + \operatorname{rotate\_half}(x)
    \odot \sin(t\theta) = x R_t^\top`, row by row.

    ``x``: ``(..., n, d_k)`` queries or keys (``d_k`` even, floating). ``positions``: ``(n,)``
    or ``(..., n)`` broadcasting with ``x``'s leading dimensions (integer or real); default
    ``0, …, n − 1``. The result has ``x``'s shape, dtype and device. The cos/sin tables are
    computed in ``x``'s dtype (float64 in every check of the book) — for float16/bfloat16 in
    float64, with the rotation in float32 and one rounding to ``x``'s dtype. NaN or ±inf in ``x``
    raise ``ValueError``.
    """
    check.floating("x", x, min_dim=2)                  # a finite floating (..., n, d_k): NaN or ±inf raise
    d_k = x.shape[-1]
    if d_k == 0 or d_k % 2:
        raise ValueError(f"x must have an even last dimension d_k > 0 (pairs of coordinates), got shape "
                         f"{tuple(x.shape)}")
    table = _table_dtype(x.dtype)                                                   # float64 for half precision
    positions = _positions(positions, x.shape[-2], table, x.device)               # (..., n)
    batch = tuple(positions.shape[:-1])
    leading = tuple(x.shape[:-2])
    if len(batch) > len(leading) or any(p not in (1, l) for p, l in zip(reversed(batch), reversed(leading))):
        raise ValueError(f"positions of shape {tuple(positions.shape)} do not broadcast with x of shape "
                         f"{tuple(x.shape)} (leading dimensions {leading})")
    cos, sin = cos_sin(positions, d_k, base)                                        # (..., n, d_k) each
    if table != x.dtype:                                                            # half precision
        work, cos, sin = x.float(), cos.float(), sin.float()
        return (work * cos + rotate_half(work) * sin).to(x.dtype)                   # (..., n, d_k), one rounding
    return x * cos + rotate_half(x) * sin                                           # (..., n, d_k)


def rotation_matrix(offset, d_k: int, base: float = 10000.0, *, dtype: torch.dtype | None = None,
                    device: torch.device | str | None = None) -> Tensor:
    r""":math:`R_t`, the ``(d_k, d_k)`` rotation by the offset :math:`t` (acting on column vectors):
    a 2 × 2 block :math:`\begin{bmatrix}\cos t\theta_p & -\sin t\theta_p\\ \sin t\theta_p &
    \cos t\theta_p\end{bmatrix}` on the coordinates :math:`(p, p + d_k/2)` for every pair.

    ``rotate(x, t) = x @ R_t.T``, and ``q_i R_{j−i} k_jᵀ`` is the rotary score of query ``q_i``
    at position ``i`` and key ``k_j`` at position ``j``. ``offset``: an int, a real number or a
    one-element tensor (its device and floating dtype are used unless given).
    """
    if isinstance(offset, torch.Tensor):
        if offset.numel() != 1:
            raise ValueError(f"offset must be one number, got a tensor of shape {tuple(offset.shape)}")
        device = offset.device if device is None else device
        if dtype is None and offset.is_floating_point():
            dtype = offset.dtype
        offset = offset.item()
    offset = float(check.real_number("offset", offset))
    d_k = _head_width(d_k)
    dtype = _floating_dtype("dtype", dtype)
    half = d_k // 2
    theta = offset * frequencies(d_k, base, dtype=torch.float64, device=device)    # (d_k/2,): t θ_p
    cos, sin = theta.cos().to(dtype), theta.sin().to(dtype)                         # (d_k/2,) each
    index = torch.arange(half, device=device)                                       # p
    matrix = torch.zeros(d_k, d_k, dtype=dtype, device=device)                      # (d_k, d_k)
    matrix[index, index] = cos                                                      # (p, p)
    matrix[index + half, index + half] = cos                                        # (p̄, p̄)
    matrix[index, index + half] = -sin                                              # (p, p̄)
    matrix[index + half, index] = sin                                               # (p̄, p)
    return matrix
