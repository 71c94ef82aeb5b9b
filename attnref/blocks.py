r"""Transformer layers built from attnref's parts: post-LN, pre-LN and the causal decoder-only layer.

One set of weights, :class:`attnref.layers.EncoderLayer`, serves every placement of the
LayerNorms; the functions here name the placement they compute:

* :func:`post_ln_layer` — Vaswani et al. (2017): :math:`y = \mathrm{LN}_1(x + \mathrm{MHA}(x))`,
  :math:`z = \mathrm{LN}_2(y + \mathrm{FFN}(y))` (``torch.nn.TransformerEncoderLayer(norm_first=False)``).
* :func:`pre_ln_layer` — Xiong et al. (2020), the pre-activation residual block of He et al.
  (2016): :math:`y = x + \mathrm{MHA}(\mathrm{LN}_1(x))`, :math:`z = y + \mathrm{FFN}(\mathrm{LN}_2(y))`
  (``torch.nn.TransformerEncoderLayer(norm_first=True)``). The residual stream is never normalised.
* :func:`decoder_layer` — the decoder-only (GPT) layer: pre-LN with causal self-attention, query
  ``i`` attending keys ``j ≤ i`` only (torch: ``norm_first=True`` with a causal mask).
* :func:`stack_layers` — layers applied in turn, every intermediate output kept.
* :class:`TrainableLayer` — a ``torch.nn.Module`` holding one layer's tensors as parameters and
  computing it with the functions above, so that a model can be trained from attnref's parts.

Each returns an :class:`~attnref.attention.AttentionResult`: the output ``(..., n, d)`` and the
attention weights of every head ``(..., h, n, n)``. Masks as in
:func:`attnref.multi_head_attention` (``mask``, per-head masks, ``key_mask``, ``causal``).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from attnref import _validate as check
from attnref.attention import AttentionResult
from attnref.layers import (EncoderLayer, encoder_layer, feed_forward, layer_norm, named_tensors,
                            replace_tensors)
from attnref.multihead import multi_head_attention

Tensor = torch.Tensor


def _layer(layer: object, name: str = "layer") -> EncoderLayer:
    if not isinstance(layer, EncoderLayer):
        raise ValueError(f"{name} must be an attnref.EncoderLayer, got {type(layer).__name__}")
    return layer


def _input(x: Tensor, layer: EncoderLayer) -> Tensor:
    """``x (..., n, d)``, checked under its own name before the sublayers see it (as ``query``)."""
    check.floating("x", x, min_dim=2)
    if x.shape[-1] != layer.d:
        raise ValueError(f"x has shape {check.shape_of(x)}, expected width d = {layer.d} of the layer "
                         f"(attention.w_q {check.shape_of(layer.attention.w_q)})")
    check.same_dtype(x=x, **{"attention.w_q": layer.attention.w_q})
    return x


def post_ln_layer(x: Tensor, layer: EncoderLayer, mask: Tensor | None = None, key_mask: Tensor | None = None,
                  causal: bool = False) -> AttentionResult:
    r"""Post-LN layer: :math:`y = \mathrm{LN}_1(x + \mathrm{MHA}(x))`, :math:`z = \mathrm{LN}_2(y + \mathrm{FFN}(y))`."""
    layer = _layer(layer)
    _input(x, layer)
    attended = multi_head_attention(x, layer.attention, mask=mask, key_mask=key_mask, causal=causal)
    y = layer_norm(x + attended.output, layer.norm_1)            # residual sum, then LayerNorm
    z = layer_norm(y + feed_forward(y, layer.ffn), layer.norm_2)
    return AttentionResult(z, attended.weights)


def pre_ln_layer(x: Tensor, layer: EncoderLayer, mask: Tensor | None = None, key_mask: Tensor | None = None,
                 causal: bool = False) -> AttentionResult:
    r"""Pre-LN layer: :math:`y = x + \mathrm{MHA}(\mathrm{LN}_1(x))`, :math:`z = y + \mathrm{FFN}(\mathrm{LN}_2(y))`."""
    layer = _layer(layer)
    _input(x, layer)
    normalised = layer_norm(x, layer.norm_1)                     # LN₁(x): (..., n, d)
    attended = multi_head_attention(normalised, layer.attention, mask=mask, key_mask=key_mask, causal=causal)
    y = x + attended.output                                      # identity path untouched
    z = y + feed_forward(layer_norm(y, layer.norm_2), layer.ffn)
    return AttentionResult(z, attended.weights)


def decoder_layer(x: Tensor, layer: EncoderLayer, *, mask: Tensor | None = None,
                  key_mask: Tensor | None = None) -> AttentionResult:
    r"""Decoder-only (GPT) layer: :func:`pre_ln_layer` with causal self-attention.

    :math:`y = x + \mathrm{MHA}_\text{causal}(\mathrm{LN}_1(x))`, :math:`z = y + \mathrm{FFN}(\mathrm{LN}_2(y))`;
    output ``i`` depends on tokens ``1..i`` only. ``key_mask`` marks padding keys; ``mask`` is
    combined with the causal mask.
    """
    return pre_ln_layer(x, layer, mask=mask, key_mask=key_mask, causal=True)


class StackResult(NamedTuple):
    """What :func:`stack_layers` returns: the final output and every layer's output and weights."""

    output: Tensor                 # (..., n, d): the last layer's output (x itself for no layer)
    hidden: tuple[Tensor, ...]     # L + 1 tensors (..., n, d): x, then each layer's output
    weights: tuple[Tensor, ...]    # L tensors (..., h, n, n)


def stack_layers(x: Tensor, layers: Sequence[EncoderLayer], mask: Tensor | None = None,
          key_mask: Tensor | None = None, causal: bool = False, norm_first: bool | None = None) -> StackResult:
    """The layers applied in turn, ``x₀ = x``, ``x_l = layer_l(x_{l−1})``.

    ``norm_first=None`` runs each layer in the placement its ``norm_first`` names; ``True`` or
    ``False`` runs every layer pre-LN or post-LN (one set of weights, both placements).
    ``layers`` is a list or tuple of :class:`EncoderLayer` (one layer: ``[layer]``).
    """
    if norm_first is not None and not isinstance(norm_first, bool):
        raise ValueError(f"norm_first must be True, False or None, got {norm_first!r}")
    if not isinstance(layers, (list, tuple)):
        raise ValueError(f"layers must be a list or tuple of attnref.EncoderLayer, got {type(layers).__name__}"
                         + (" (one layer: pass [layer])" if isinstance(layers, EncoderLayer) else ""))
    for i, layer in enumerate(layers):
        _layer(layer, f"layers[{i}]")
    check.floating("x", x, min_dim=2)
    check.boolean("causal", causal)
    hidden, weights = [x], []
    for layer in layers:
        first = _layer(layer).norm_first if norm_first is None else norm_first
        run = pre_ln_layer if first else post_ln_layer
        result = run(hidden[-1], layer, mask=mask, key_mask=key_mask, causal=causal)
        hidden.append(result.output)
        weights.append(result.weights)
    return StackResult(hidden[-1], tuple(hidden), tuple(weights))


class TrainableLayer(torch.nn.Module):
    """One layer as a ``torch.nn.Module``: the tensors of an :class:`EncoderLayer` as parameters
    (named like ``attention__w_q``, ``norm_1__gain``), the forward pass attnref's own
    (:func:`pre_ln_layer`, :func:`post_ln_layer` by ``norm_first``; ``causal=True`` for a decoder).
    """

    def __init__(self, weights: EncoderLayer):
        super().__init__()
        self._template = _layer(weights, "weights")
        self._names = tuple(named_tensors(weights))
        for name, tensor in named_tensors(weights).items():
            self.register_parameter(name.replace(".", "__"), torch.nn.Parameter(tensor.detach().clone()))

    def weights(self) -> EncoderLayer:
        """The current parameters as an :class:`EncoderLayer` (differentiable: they are the parameters)."""
        return replace_tensors(self._template, {n: getattr(self, n.replace(".", "__")) for n in self._names})

    def forward(self, x: Tensor, mask: Tensor | None = None, key_mask: Tensor | None = None,
                causal: bool = False) -> Tensor:
        return encoder_layer(x, self.weights(), mask=mask, key_mask=key_mask, causal=causal)
