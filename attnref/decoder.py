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
before the scaled dot product, and a causal mask lets token :math:`i` see tokens :math:`j \le i`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from attnref import rope
from attnref.attention import softmax

Tensor = torch.Tensor


def _tensor(name: str, x) -> Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor, got dtype {x.dtype}")
    return x


def rms_norm(x: Tensor, gain: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    r""":math:`x / \sqrt{\operatorname{mean}(x^2) + \varepsilon} \odot g` over the last dimension.

    As in Llama, the statistic is computed in at least float32 (a float16 input is upcast for it).
    """
    _tensor("x", x)
    if x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last dimension, got shape {tuple(x.shape)}")
    if not (isinstance(eps, (int, float)) and eps >= 0 and eps == eps):
        raise ValueError(f"eps must be a number ≥ 0, got {eps!r}")
    if gain is not None:
        _tensor("gain", gain)
        if gain.shape != x.shape[-1:]:
            raise ValueError(f"gain must have shape ({x.shape[-1]},) for x of shape {tuple(x.shape)}, got {tuple(gain.shape)}")
    work = x if x.dtype in (torch.float32, torch.float64) else x.float()
    mean_square = work.pow(2).mean(dim=-1, keepdim=True)                 # (..., n, 1)
    normalised = (work * torch.rsqrt(mean_square + eps)).to(x.dtype)    # (..., n, d)
    return normalised if gain is None else normalised * gain


def silu(z: Tensor) -> Tensor:
    r""":math:`\operatorname{silu}(z) = z\,\sigma(z)` (also called swish)."""
    return z * torch.sigmoid(z)


def swiglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    r""":math:`(\operatorname{silu}(x W_\text{gate}) \odot x W_\text{up}) W_\text{down}`; weights ``(in, out)``."""
    _tensor("x", x)
    d = x.shape[-1]
    for name, w, rows in (("w_gate", w_gate, d), ("w_up", w_up, d)):
        _tensor(name, w)
        if w.dim() != 2 or w.shape[0] != rows:
            raise ValueError(f"{name} must have shape ({rows}, d_ff) for x of width {d}, got {tuple(w.shape)}")
    if w_gate.shape != w_up.shape:
        raise ValueError(f"w_gate and w_up must have the same shape, got {tuple(w_gate.shape)} and {tuple(w_up.shape)}")
    _tensor("w_down", w_down)
    if w_down.dim() != 2 or w_down.shape[0] != w_gate.shape[1]:
        raise ValueError(f"w_down must have shape ({w_gate.shape[1]}, d), got {tuple(w_down.shape)}")
    gate = silu(x @ w_gate)                  # (..., n, d) @ (d, d_ff) -> (..., n, d_ff)
    up = x @ w_up                            # (..., n, d_ff)
    return (gate * up) @ w_down              # (..., n, d_ff) @ (d_ff, d) -> (..., n, d)


@dataclass
class DecoderLayerWeights:
    """One pre-norm decoder block. Projections are ``(in, out)``: ``w_q`` is ``(d, h·d_k)``,
    ``w_k`` and ``w_v`` are ``(d, h_kv·d_k)``, ``w_o`` is ``(h·d_k, d)``."""

    attention_norm: Tensor     # (d,)   gain of the RMSNorm before attention
    w_q: Tensor                # (d, h·d_k)
    w_k: Tensor                # (d, h_kv·d_k)
    w_v: Tensor                # (d, h_kv·d_k)
    w_o: Tensor                # (h·d_k, d)
    ffn_norm: Tensor           # (d,)   gain of the RMSNorm before the FFN
    w_gate: Tensor             # (d, d_ff)
    w_up: Tensor               # (d, d_ff)
    w_down: Tensor             # (d_ff, d)

    def to(self, *args, **kwargs) -> "DecoderLayerWeights":
        """A copy with every tensor moved/cast like ``Tensor.to(*args, **kwargs)``."""
        return DecoderLayerWeights(**{f.name: getattr(self, f.name).to(*args, **kwargs) for f in fields(self)})


@dataclass(frozen=True)
class DecoderConfig:
    d: int                     # model width
    h: int                     # query heads
    h_kv: int                  # key/value heads (h_kv divides h)
    d_k: int                   # head width
    rope_base: float = 10000.0
    eps: float = 1e-6          # RMSNorm ε

    def __post_init__(self):
        if self.h % self.h_kv:
            raise ValueError(f"h_kv must divide h, got h = {self.h}, h_kv = {self.h_kv}")


@dataclass
class AttentionTrace:
    """What one grouped-query attention computed, for a reader to inspect."""

    output: Tensor             # (..., n, d)      after the output projection
    weights: Tensor            # (..., h, n, n)   softmax weights
    query: Tensor              # (..., h, n, d_k) before rotation
    key: Tensor                # (..., h_kv, n, d_k) before rotation
    rotated_query: Tensor      # (..., h, n, d_k)
    rotated_key: Tensor        # (..., h_kv, n, d_k)


def grouped_query_attention(x: Tensor, layer: DecoderLayerWeights, config: DecoderConfig,
                            positions: Tensor | None = None, key_mask: Tensor | None = None,
                            causal: bool = True) -> AttentionTrace:
    r"""Causal grouped-query attention with rotary positions, on normalised inputs ``x`` (..., n, d).

    ``key_mask`` (..., n) bool: ``True`` = a real token (padding keys get weight 0).
    """
    _tensor("x", x)
    if x.shape[-1] != config.d:
        raise ValueError(f"x must have width d = {config.d}, got shape {tuple(x.shape)}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    n = x.shape[-2]
    h, h_kv, d_k = config.h, config.h_kv, config.d_k
    q = (x @ layer.w_q).unflatten(-1, (h, d_k)).transpose(-3, -2)        # (..., n, h·d_k) -> (..., h, n, d_k)
    k = (x @ layer.w_k).unflatten(-1, (h_kv, d_k)).transpose(-3, -2)     # (..., h_kv, n, d_k)
    v = (x @ layer.w_v).unflatten(-1, (h_kv, d_k)).transpose(-3, -2)     # (..., h_kv, n, d_k)
    if positions is None:
        positions = torch.arange(n, dtype=x.dtype, device=x.device)
    q_rot = rope.rotate(q, positions.unsqueeze(-2) if positions.dim() > 1 else positions, config.rope_base)
    k_rot = rope.rotate(k, positions.unsqueeze(-2) if positions.dim() > 1 else positions, config.rope_base)
    group = h // h_kv
    k_shared = k_rot.repeat_interleave(group, dim=-3)                    # (..., h, n, d_k): head i uses kv head i // group
    v_shared = v.repeat_interleave(group, dim=-3)                        # (..., h, n, d_k)
    scores = q_rot @ k_shared.transpose(-2, -1)                          # (..., h, n, d_k) @ (..., h, d_k, n) -> (..., h, n, n)
    scores = scores / d_k ** 0.5
    keep = torch.ones(n, n, dtype=torch.bool, device=x.device)
    if causal:
        keep = torch.tril(keep)                                          # token i sees j ≤ i
    if key_mask is not None:
        if key_mask.dtype != torch.bool or key_mask.shape != x.shape[:-1]:
            raise ValueError(f"key_mask must be a bool tensor of shape {tuple(x.shape[:-1])}, got "
                             f"{key_mask.dtype} {tuple(key_mask.shape)}")
        keep = keep & key_mask.unsqueeze(-2).unsqueeze(-3)               # (..., 1, 1, n)
    scores = scores.masked_fill(~keep, float("-inf"))
    weights = softmax(scores)                                            # (..., h, n, n)
    heads = weights @ v_shared                                           # (..., h, n, d_k)
    concatenated = heads.transpose(-3, -2).flatten(-2)                   # (..., n, h·d_k)
    return AttentionTrace(concatenated @ layer.w_o, weights, q, k, q_rot, k_rot)


@dataclass
class BlockTrace:
    """What one pre-norm block computed: its output and the two updates it added to the stream."""

    output: Tensor             # (..., n, d)  z = x + attention update + FFN update
    attention_update: Tensor   # (..., n, d)
    ffn_update: Tensor         # (..., n, d)
    attention: AttentionTrace


def decoder_block(x: Tensor, layer: DecoderLayerWeights, config: DecoderConfig,
                  positions: Tensor | None = None, key_mask: Tensor | None = None) -> BlockTrace:
    r"""Pre-norm block: :math:`y = x + \operatorname{GQA}(\operatorname{RMSNorm}(x))`,
    :math:`z = y + \operatorname{SwiGLU}(\operatorname{RMSNorm}(y))`."""
    attention = grouped_query_attention(rms_norm(x, layer.attention_norm, config.eps), layer, config,
                                        positions, key_mask)
    y = x + attention.output                                             # the residual stream: nothing nonlinear on it
    ffn = swiglu(rms_norm(y, layer.ffn_norm, config.eps), layer.w_gate, layer.w_up, layer.w_down)
    return BlockTrace(y + ffn, attention.output, ffn, attention)
