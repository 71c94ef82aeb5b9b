r"""The parts of a Llama-style decoder: RMSNorm, SwiGLU, grouped-query attention with rotary
positions, and the pre-norm causal block they make.

Row vectors, as everywhere in attnref: a token is a row :math:`x \in \mathbb{R}^d`, and a weight
``w`` of shape ``(in, out)`` maps it to :math:`x W`. (``torch.nn.Linear`` and the checkpoint files
store ``(out, in)``: the loaders transpose.)

.. math::

    \operatorname{RMSNorm}(x) = \frac{x}{\sqrt{\tfrac1d \sum_a x_a^2 + \varepsilon}} \odot g
    \qquad\text{(no centring, unlike LayerNorm)}

    \operatorname{SwiGLU}(x) = \big(\operatorname{silu}(x W_\text{gate}) \odot x W_\text{up}\big)\, W_\text{down},
    \qquad \operatorname{silu}(z) = z\,\sigma(z)

    \text{block:}\quad y = x + \operatorname{GQA}(\operatorname{RMSNorm}_1(x)),\qquad
    z = y + \operatorname{SwiGLU}(\operatorname{RMSNorm}_2(y))

Grouped-query attention has :math:`h` query heads and :math:`h_{kv}` key/value heads
(:math:`h_{kv}` divides :math:`h`); query head :math:`i` uses key/value head
:math:`\lfloor i / (h / h_{kv}) \rfloor`. Queries and keys are rotated (:mod:`attnref.rope`)
before the scaled dot product; with ``causal=True`` (as the decoder runs) token :math:`i` sees
tokens :math:`j \le i`.

The call shape is the package's: ``f(x, *, weights, config, positions=None, mask=None,
key_mask=None, causal=False)`` (``causal`` defaults to False here as everywhere; a decoder
passes ``causal=True``), and the result an :class:`~attnref.attention.AttentionResult`:
grouped-query attention's ``trace`` is a :class:`GroupedQueryTrace` (queries and keys before and
after rotation), the block's a :class:`attnref.blocks.LayerTrace` (the block is assembled by
:func:`attnref.blocks.residual_block`, the one place residual layers are put together).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import NamedTuple

import torch

from attnref import _validate as check
from attnref import rope
from attnref.attention import AttentionResult
from attnref.blocks import PRE_LN, residual_block
from attnref.multihead import AttentionFunction, _attend_heads, _attention_function

Tensor = torch.Tensor


def rms_norm(x: Tensor, gain: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    r""":math:`x / \sqrt{\operatorname{mean}(x^2) + \varepsilon} \odot g` over the last dimension.

    As in Llama, the statistic is computed in at least float32 (a float16/bfloat16 input is
    upcast for it, the normalised row rounded to the input's dtype before the gain).

    NaN or ±inf in ``x`` raise ``ValueError`` (attnref does not propagate NaN), and so does a
    zero row with ``eps = 0`` (0/0, as :func:`attnref.layer_norm` with a constant row).
    """
    return _rms_norm(x, gain, eps, "gain")


def _rms_norm(x: Tensor, gain: Tensor | None, eps: float, gain_name: str) -> Tensor:
    """:func:`rms_norm` with the gain named as the caller knows it (``attention_norm``, ``ffn_norm``)."""
    check.floating("x", x)
    if x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last dimension, got shape {tuple(x.shape)}")
    eps = check.real_number("eps", eps, nonnegative=True)
    check.vector(gain_name, gain, x.shape[-1], x, "x")
    work = x if x.dtype in (torch.float32, torch.float64) else x.float()
    normalised = rms_normalise(work, eps).to(x.dtype)                    # (..., n, d)
    return normalised if gain is None else normalised * gain


def rms_normalise(work: Tensor, eps: float) -> Tensor:
    r""":math:`x / \sqrt{\operatorname{mean}(x^2) + \varepsilon}` of checked rows ``(..., d)`` in their own
    (working) dtype, without overflow or underflow of the squares (no gain, no rounding).

    ``x²`` overflows beyond about 1.8e19 in float32 (1.3e154 in float64): the plain mean square
    is then ``inf`` and the row would become zeros. Such rows are computed as LayerNorm computes
    its spread (:func:`attnref.layer_norm`): with :math:`s = \max_a |x_a|`,
    :math:`x/\sqrt{\operatorname{mean}(x^2) + \varepsilon} = (x/s)/\sqrt{\operatorname{mean}((x/s)^2)
    + (\sqrt\varepsilon/s)^2}`, entries of :math:`x/s` in ``[-1, 1]``. Squares that underflow
    (rows below about 1e-19 in float32) matter only when ε is as small as they are; then those
    rows are rescaled too. Every other row keeps the plain formula bit for bit. The choice is
    made element by element (``torch.where``): no host synchronisation. A zero row with
    ``eps = 0`` is 0/0 and raises ``ValueError`` while value checks are on (:func:`attnref.checks`).
    """
    spread = work.abs().amax(dim=-1, keepdim=True)                       # s = max|x_a|: (..., n, 1)
    if eps == 0 and check.any_true(spread == 0):
        raise ValueError(f"x of shape {check.shape_of(work)} has a zero row: RMSNorm with eps = 0 divides 0 by 0")
    mean_square = work.pow(2).mean(dim=-1, keepdim=True)                # (..., n, 1)
    plain = work * torch.rsqrt(mean_square + eps)                        # (..., n, d)
    info = torch.finfo(work.dtype)
    suspect = ~torch.isfinite(mean_square)                               # x² overflowed: (..., n, 1)
    if eps < info.tiny / info.eps:                                       # ε too small to hide an underflow
        suspect = suspect | (mean_square < info.tiny / info.eps)
    spread = torch.where(spread > 0, spread, torch.ones_like(spread))    # a zero row: s = 1
    unit = work / spread                                                 # x/s, entries in [-1, 1]
    unit_square = (unit * unit).mean(dim=-1, keepdim=True)               # mean(x²)/s²
    eps_term = (math.sqrt(eps) / spread) ** 2                            # ε/s², without squaring s
    rescaled = unit * torch.rsqrt(unit_square + eps_term)                # (x/s)/√(mean(x²)/s² + ε/s²)
    return torch.where(suspect, rescaled, plain)


def silu(z: Tensor) -> Tensor:
    r""":math:`\operatorname{silu}(z) = z\,\sigma(z)` (also called swish)."""
    return z * torch.sigmoid(z)


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    r""":math:`(\operatorname{silu}(x W_\text{gate}) \odot x W_\text{up}) W_\text{down}`; weights ``(in, out)``,
    all four tensors of one dtype."""
    check.floating("x", x)
    d = x.shape[-1]
    for name, w, rows in (("w_gate", w_gate, d), ("w_up", w_up, d)):
        check.floating(name, w)
        if w.dim() != 2 or w.shape[0] != rows:
            raise ValueError(f"{name} must have shape ({rows}, d_ff) for x of width {d}, got {tuple(w.shape)}")
    if w_gate.shape != w_up.shape:
        raise ValueError(f"w_gate and w_up must have the same shape, got {tuple(w_gate.shape)} and {tuple(w_up.shape)}")
    check.floating("w_down", w_down)
    if w_down.dim() != 2 or tuple(w_down.shape) != (w_gate.shape[1], d):
        raise ValueError(f"w_down must have shape ({w_gate.shape[1]}, {d}) = (d_ff, d), got {tuple(w_down.shape)}")
    check.same_dtype(x=x, w_gate=w_gate, w_up=w_up, w_down=w_down)
    gate = silu(x @ w_gate)                  # (..., n, d) @ (d, d_ff) -> (..., n, d_ff)
    up = x @ w_up                            # (..., n, d_ff)
    output = (gate * up) @ w_down            # (..., n, d_ff) @ (d_ff, d) -> (..., n, d)
    if check.has_values(output) and not check.all_finite(output):     # one reduction when all is well
        raise ValueError(f"swiglu of x {check.shape_of(x)} overflows {x.dtype} (±inf or inf − inf in the "
                         "products): the inputs are too large for this dtype")
    return output


@dataclass(frozen=True)
class DecoderLayerWeights:
    """One pre-norm decoder block, validated on construction (one layer: no batch axes).
    Projections are ``(in, out)``: ``w_q`` is ``(d, h·d_k)``, ``w_k`` and ``w_v`` are
    ``(d, h_kv·d_k)``, ``w_o`` is ``(h·d_k, d)``; every tensor finite, of one floating dtype and
    device. (``h``, ``h_kv`` and ``d_k`` are the :class:`DecoderConfig`'s, checked when the block runs.)"""

    attention_norm: Tensor     # (d,)   gain of the RMSNorm before attention
    w_q: Tensor                # (d, h·d_k)
    w_k: Tensor                # (d, h_kv·d_k)
    w_v: Tensor                # (d, h_kv·d_k)
    w_o: Tensor                # (h·d_k, d)
    ffn_norm: Tensor           # (d,)   gain of the RMSNorm before the FFN
    w_gate: Tensor             # (d, d_ff)
    w_up: Tensor               # (d, d_ff)
    w_down: Tensor             # (d_ff, d)

    def __post_init__(self) -> None:
        for f in fields(self):
            check.floating(f.name, getattr(self, f.name), exact_dim=1 if f.name.endswith("norm") else 2)
        check.same_dtype(**{f.name: getattr(self, f.name) for f in fields(self)})
        d, q_width = self.w_q.shape
        kv_width, d_ff = self.w_k.shape[1], self.w_gate.shape[1]
        expected = {"attention_norm": (d,), "ffn_norm": (d,), "w_k": (d, kv_width), "w_v": (d, kv_width),
                    "w_o": (q_width, d), "w_gate": (d, d_ff), "w_up": (d, d_ff), "w_down": (d_ff, d)}
        for name, shape in expected.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"{name} has shape {check.shape_of(getattr(self, name))}, expected {shape} for "
                                 f"w_q (d = {d}, h·d_k = {q_width}), w_k (d, h_kv·d_k = {kv_width}) and "
                                 f"w_gate (d, d_ff = {d_ff})")

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "DecoderLayerWeights":
        """The same weights on another device and/or in another floating dtype."""
        if dtype is not None:
            check.floating_dtype("dtype", dtype)
        return DecoderLayerWeights(**{f.name: getattr(self, f.name).to(device=device, dtype=dtype)
                                      for f in fields(self)})


@dataclass(frozen=True)
class DecoderConfig:
    d: int                     # model width
    h: int                     # query heads
    h_kv: int                  # key/value heads (h_kv divides h)
    d_k: int                   # head width
    rope_base: float = 10000.0
    eps: float = 1e-6          # RMSNorm ε

    def __post_init__(self):
        for name in ("d", "h", "h_kv", "d_k"):
            check.positive_int(name, getattr(self, name))
        if check.real_number("rope_base", self.rope_base) <= 0:
            raise ValueError(f"rope_base must be > 0, got {self.rope_base!r}")
        check.real_number("eps", self.eps, nonnegative=True)
        if self.h % self.h_kv:
            raise ValueError(f"h_kv must divide h, got h = {self.h}, h_kv = {self.h_kv}")


class GroupedQueryTrace(NamedTuple):
    """What grouped-query attention computed besides its output and weights (its result's ``trace``)."""

    query: Tensor              # (..., h, n, d_k) before rotation
    key: Tensor                # (..., h_kv, n, d_k) before rotation
    rotated_query: Tensor      # (..., h, n, d_k)
    rotated_key: Tensor        # (..., h_kv, n, d_k)


def grouped_query_attention(x: Tensor, *, weights: DecoderLayerWeights, config: DecoderConfig,
                            positions: Tensor | None = None, mask: Tensor | None = None,
                            key_mask: Tensor | None = None, causal: bool = False,
                            attention: AttentionFunction | None = None) -> AttentionResult:
    r"""Grouped-query attention with rotary positions, on normalised inputs ``x`` (..., n, d).

    ``causal=True`` for a decoder (token ``i`` sees ``j ≤ i``); ``mask`` (boolean, True = may
    attend, or additive) broadcasts to the scores ``(..., n, n)`` and is shared by every head;
    ``key_mask`` (..., n) bool: ``True`` = a real token (padding keys get weight 0).
    ``positions`` default to ``0 … n−1``; float16/bfloat16 inputs are rotated with float64
    tables (:func:`attnref.rope.rotate`) and attended in float32, results in the input dtype.
    ``attention``: the per-head attention (the hook of :mod:`attnref.multihead`, default scaled
    dot-product), called once with the rotated heads ``(..., h, n, d_k)``, the mask with
    ``key_mask`` folded in, and ``causal``.
    """
    attend = _attention_function(attention)
    check.instance("weights", weights, DecoderLayerWeights)
    layer = weights
    check.instance("config", config, DecoderConfig)
    check.floating("x", x, min_dim=2)
    if x.shape[-1] != config.d:
        raise ValueError(f"x must have width d = {config.d}, got shape {tuple(x.shape)}")
    check.boolean("causal", causal)
    n = x.shape[-2]
    h, h_kv, d_k = config.h, config.h_kv, config.d_k
    for name, rows, columns in (("w_q", config.d, h * d_k), ("w_k", config.d, h_kv * d_k),
                                ("w_v", config.d, h_kv * d_k), ("w_o", h * d_k, config.d)):
        w = check.floating(name, getattr(layer, name), exact_dim=2)
        if tuple(w.shape) != (rows, columns):
            raise ValueError(f"{name} has shape {check.shape_of(w)}, expected ({rows}, {columns}) for "
                             f"d = {config.d}, h = {h}, h_kv = {h_kv}, d_k = {d_k}")
        check.same_dtype(x=x, **{name: w})
    q = (x @ layer.w_q).unflatten(-1, (h, d_k)).transpose(-3, -2)        # (..., n, h·d_k) -> (..., h, n, d_k)
    k = (x @ layer.w_k).unflatten(-1, (h_kv, d_k)).transpose(-3, -2)     # (..., h_kv, n, d_k)
    v = (x @ layer.w_v).unflatten(-1, (h_kv, d_k)).transpose(-3, -2)     # (..., h_kv, n, d_k)
    if positions is None:
        positions = torch.arange(n, device=x.device)                     # int64: exact at any n
    if not isinstance(positions, torch.Tensor) or positions.dim() == 0 or positions.shape[-1] != n:
        raise ValueError(f"positions must be a tensor (..., n) with n = {n} (the tokens of x "
                         f"{check.shape_of(x)}), got {getattr(positions, 'shape', positions)!r}")
    per_head = positions.unsqueeze(-2) if positions.dim() > 1 else positions   # (..., 1, n) or (n,)
    q_rot = rope.rotate(q, per_head, config.rope_base)
    k_rot = rope.rotate(k, per_head, config.rope_base)
    group = h // h_kv
    k_shared = k_rot.repeat_interleave(group, dim=-3)                    # (..., h, n, d_k): head i uses kv head i // group
    v_shared = v.repeat_interleave(group, dim=-3)                        # (..., h, n, d_k)
    keep = None
    if key_mask is not None:                                             # (..., n) -> every head's keys (..., 1, 1, n)
        keep = check.key_mask(key_mask, "x", x, tuple(x.shape[:-2]) + (n, n)).unsqueeze(-3)
    if mask is not None:                                                 # (..., n, n), the same for every head
        check.mask(mask, tuple(x.shape[:-2]) + (n, n), x.dtype, x.device)
        mask = mask.unsqueeze(-3) if mask.dim() >= 3 else mask           # (..., 1, n, n)
    mask = check.combine_masks(mask, keep)                               # key_mask folded in: (..., 1, n, n)
    heads = _attend_heads(attend, q_rot, k_shared, v_shared, mask, causal, need_weights=True)
    concatenated = heads.output.transpose(-3, -2).flatten(-2)            # (..., h, n, d_k) -> (..., n, h·d_k)
    return AttentionResult(concatenated @ layer.w_o, heads.weights,
                           trace=GroupedQueryTrace(q, k, q_rot, k_rot))


def decoder_block(x: Tensor, *, weights: DecoderLayerWeights, config: DecoderConfig,
                  positions: Tensor | None = None, mask: Tensor | None = None, key_mask: Tensor | None = None,
                  causal: bool = False, attention: AttentionFunction | None = None) -> AttentionResult:
    r"""Pre-norm block: :math:`y = x + \operatorname{GQA}(\operatorname{RMSNorm}(x))`,
    :math:`z = y + \operatorname{SwiGLU}(\operatorname{RMSNorm}(y))` (:func:`attnref.blocks.residual_block`
    in the pre-LN variant). ``causal=True`` for a decoder. Returns ``z``, the attention weights
    ``(..., h, n, n)`` and a :class:`attnref.blocks.LayerTrace` (its ``attention`` is
    grouped-query attention's result, with a :class:`GroupedQueryTrace`). ``attention``: the per-head
    attention of :func:`grouped_query_attention`."""
    check.instance("weights", weights, DecoderLayerWeights)
    check.instance("config", config, DecoderConfig)
    check.floating("x", x, min_dim=2)
    if x.shape[-1] != config.d:
        raise ValueError(f"x must have width d = {config.d}, got shape {tuple(x.shape)}")
    # the FFN weights are checked once, by swiglu (their shapes against x's width d)
    return residual_block(
        x,
        attention=lambda t: grouped_query_attention(t, weights=weights, config=config, positions=positions,
                                                    mask=mask, key_mask=key_mask, causal=causal, attention=attention),
        ffn=lambda t: swiglu(t, weights.w_gate, weights.w_up, weights.w_down),
        norm_1=lambda t: _rms_norm(t, weights.attention_norm, config.eps, "attention_norm"),
        norm_2=lambda t: _rms_norm(t, weights.ffn_norm, config.eps, "ffn_norm"),
        variant=PRE_LN)
