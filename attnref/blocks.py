r"""Transformer layers built from attnref's parts, and the one place where layer variants are defined.

A residual layer has two sublayers, attention then a feed-forward network, each with a
normalisation and a skip connection. *Where* the normalisation sits, whether there is a skip,
whether there is an FFN and what follows each sum is a :class:`Variant`; :func:`residual_block`
is the one function that puts a layer's parts together in a variant — the layers here
(LayerNorm, multi-head attention, FFN), the Llama-style block of :mod:`attnref.decoder`
(RMSNorm, grouped-query attention, SwiGLU) and the training models of
:mod:`attnref.training.models` (other attentions through :attr:`Variant.attention`) all go
through it. The named variants are :data:`VARIANTS`:

* ``"post-LN"`` — Vaswani et al. (2017): :math:`y = \mathrm{LN}_1(x + \mathrm{MHA}(x))`,
  :math:`z = \mathrm{LN}_2(y + \mathrm{FFN}(y))` (``torch.nn.TransformerEncoderLayer(norm_first=False)``).
* ``"pre-LN"`` — Xiong et al. (2020), the pre-activation residual block of He et al. (2016):
  :math:`y = x + \mathrm{MHA}(\mathrm{LN}_1(x))`, :math:`z = y + \mathrm{FFN}(\mathrm{LN}_2(y))`
  (``norm_first=True``). The residual stream is never normalised. With ``causal=True`` it is the
  decoder-only (GPT) layer: query ``i`` attends keys ``j ≤ i`` only.
* ``"pre-LN, ReLU after the sums"``, ``"post-LN, ReLU after the sums"`` — a ReLU on the stream
  after each sublayer (after the sum; after the Add & Norm in post-LN), as after a ResNet block.
* ``"attention"``, ``"attention + skip"``, ``"attention + FFN"``, ``"attention + LayerNorm"`` —
  the stripped layers of chapter 7 (no skip, no FFN or no normalisation).

Functions (the call shape of the package: ``f(x, *, weights, mask=None, key_mask=None,
causal=False, attention=None)``, ``attention`` the per-head attention of multi-head attention —
the one hook for a new attention, see :mod:`attnref.multihead`; each returns an :class:`~attnref.attention.AttentionResult` whose ``output`` is
``(..., n, d)``, ``weights`` the attention weights of every head ``(..., h, n, n)`` and ``trace``
a :class:`LayerTrace` of the intermediates):

* :func:`encoder_layer` — the layer in the variant ``variant`` names (default: the placement
  ``weights.norm_first`` names); :func:`post_ln_layer` and :func:`pre_ln_layer` fix the placement.
* :func:`stack_layers` — layers applied in turn, every intermediate kept.
* :class:`TrainableLayer` — a ``torch.nn.Module`` holding one layer's tensors as parameters and
  computing it with :func:`encoder_layer`, so that a model can be trained from attnref's parts.

Weights may be a batch of layers (:mod:`attnref.layers`): draw ``b`` is applied to
``x[..., b, :, :]``. Masks as in :func:`attnref.multi_head_attention`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, NamedTuple, Sequence

import torch

from attnref import _validate as check
from attnref.attention import AttentionResult
from attnref.layers import EncoderLayer, LayerNormParams, feed_forward, layer_norm, named_tensors, relu, replace_tensors
from attnref.multihead import AttentionFunction, _attention_function, multi_head_attention

Tensor = torch.Tensor


@dataclass(frozen=True)
class Variant:
    """How a residual layer puts its parts together.

    ``norm``: ``"pre"`` normalises each sublayer's input (:math:`x + f(\\mathrm{N}(x))`), ``"post"``
    the sum (:math:`\\mathrm{N}(x + f(x))`), ``None`` nowhere. ``skip``: the sublayer's input is
    added to its output (without it :math:`f(\\mathrm{N}(x))` or :math:`\\mathrm{N}(f(x))`).
    ``ffn``: the FFN sublayer follows the attention (without it the layer ends after attention).
    ``activation``: ``"relu"`` is applied to the stream after each sublayer (after the sum, after
    the normalisation in ``"post"``), ``"identity"`` leaves it. ``branch_input``: ``"relu"`` is
    applied to each branch's input (after the pre-norm in ``"pre"``): :math:`x + f(\\mathrm{ReLU}(x))`
    keeps the identity path linear. ``attention``: the attention
    sublayer, a function ``(x, *, weights, mask, key_mask, causal) -> AttentionResult`` of the
    layer's attention weights (default :func:`attnref.multi_head_attention`) — the hook for other
    attentions (cosine scores, activations on q, k, v, …).
    """

    norm: Literal["pre", "post"] | None = "pre"
    skip: bool = True
    ffn: bool = True
    activation: Literal["identity", "relu"] = "identity"
    attention: Callable[..., AttentionResult] | None = None
    branch_input: Literal["identity", "relu"] = "identity"

    def __post_init__(self) -> None:
        if self.norm not in ("pre", "post", None):
            raise ValueError(f"norm must be 'pre', 'post' or None, got {self.norm!r}")
        check.boolean("skip", self.skip)
        check.boolean("ffn", self.ffn)
        if not isinstance(self.activation, str) or self.activation not in ("identity", "relu"):
            raise ValueError(f"activation must be 'identity' or 'relu', got {self.activation!r}")
        if not isinstance(self.branch_input, str) or self.branch_input not in ("identity", "relu"):
            raise ValueError(f"branch_input must be 'identity' or 'relu', got {self.branch_input!r}")
        if self.attention is not None and not callable(self.attention):
            raise ValueError(f"attention must be a function or None, got {type(self.attention).__name__}")


POST_LN = Variant(norm="post")
PRE_LN = Variant(norm="pre")

#: The named variants (the layers of the book's chapters), each a :class:`Variant`.
VARIANTS: dict[str, Variant] = {
    "post-LN": POST_LN,                                                  # LN(x + SA(x)), LN(y + FFN(y))
    "pre-LN": PRE_LN,                                                    # x + SA(LN(x)), y + FFN(LN(y))
    "pre-LN, ReLU after the sums": Variant(norm="pre", activation="relu"),
    "post-LN, ReLU after the sums": Variant(norm="post", activation="relu"),
    "post-LN, ReLU inside the branches": Variant(norm="post", branch_input="relu"),   # LN(x + SA(ReLU(x))), …
    "attention": Variant(norm=None, skip=False, ffn=False),              # SA(x)
    "attention + skip": Variant(norm=None, ffn=False),                   # x + SA(x)
    "attention + FFN": Variant(norm=None, skip=False),                   # FFN(SA(x))
    "attention + LayerNorm": Variant(norm="post", skip=False, ffn=False),  # LN(SA(x))
}


class LayerTrace(NamedTuple):
    """A layer's intermediates (the ``trace`` of its :class:`~attnref.attention.AttentionResult`)."""

    attention: AttentionResult     # the attention sublayer's own result (output before the sum)
    hidden: Tensor                 # (..., n, d)  y: the stream after the attention sublayer
    ffn_update: Tensor | None      # (..., n, d)  the FFN branch's output, before the sum (None: no FFN)

    @property
    def attention_update(self) -> Tensor:
        """The attention branch's output, before the sum: ``(..., n, d)``."""
        return self.attention.output


def residual_block(x: Tensor, *, attention: Callable[[Tensor], AttentionResult],
                   ffn: Callable[[Tensor], Tensor] | None, norm_1: Callable[[Tensor], Tensor] | None,
                   norm_2: Callable[[Tensor], Tensor] | None, variant: Variant) -> AttentionResult:
    r"""The one place a residual layer is assembled: ``attention``, ``ffn`` and the norms are
    functions of the stream ``x (..., n, d)`` (already bound to their weights), ``variant`` says
    how they are combined. For ``variant.norm = "pre"`` with a skip:
    :math:`y = \phi(x + A(N_1(x)))`, :math:`z = \phi(y + F(N_2(y)))`; for ``"post"``:
    :math:`y = \phi(N_1(x + A(x)))`, :math:`z = \phi(N_2(y + F(y)))`, with :math:`\phi` the
    variant's activation (and :math:`A(\mathrm{ReLU}(\cdot))`, :math:`F(\mathrm{ReLU}(\cdot))` with
    ``branch_input = "relu"``). Returns ``z``, the attention weights and a :class:`LayerTrace`.
    """
    act = relu if variant.activation == "relu" else (lambda t: t)

    def sublayer(stream: Tensor, branch: Callable[[Tensor], object], norm: Callable[[Tensor], Tensor] | None,
                 ) -> tuple[Tensor, object]:
        inner = norm(stream) if variant.norm == "pre" else stream        # pre: N(x) into the branch
        if variant.branch_input == "relu":
            inner = relu(inner)                                          # ReLU inside the branch
        result = branch(inner)
        update = result.output if isinstance(result, AttentionResult) else result
        summed = stream + update if variant.skip else update             # the skip connection
        if variant.norm == "post":
            summed = norm(summed)                                        # post: N(x + f(x))
        return act(summed), result

    y, attended = sublayer(x, attention, norm_1)
    if not variant.ffn or ffn is None:
        return AttentionResult(y, attended.weights, trace=LayerTrace(attended, y, None))
    z, update = sublayer(y, ffn, norm_2)
    return AttentionResult(z, attended.weights, trace=LayerTrace(attended, y, update))


def _weights(weights: object, name: str = "weights") -> EncoderLayer:
    if not isinstance(weights, EncoderLayer):
        raise ValueError(f"{name} must be an attnref.EncoderLayer, got {type(weights).__name__}")
    return weights


def _input(x: Tensor, weights: EncoderLayer) -> Tensor:
    """``x (..., n, d)``, checked under its own name before the sublayers see it (as ``query``)."""
    check.floating("x", x, min_dim=2)
    if x.shape[-1] != weights.d:
        raise ValueError(f"x has shape {check.shape_of(x)}, expected width d = {weights.d} of the layer "
                         f"(attention.w_q {check.shape_of(weights.attention.w_q)})")
    check.same_dtype(x=x, **{"attention.w_q": weights.attention.w_q})
    return x


def encoder_layer(x: Tensor, *, weights: EncoderLayer, mask: Tensor | None = None,
                  key_mask: Tensor | None = None, causal: bool = False,
                  variant: Variant | str | None = None, attention: AttentionFunction | None = None) -> AttentionResult:
    r"""One Transformer layer in a variant: ``variant`` a :class:`Variant`, the name of one in
    :data:`VARIANTS`, or ``None`` for the placement ``weights.norm_first`` names (post-LN or pre-LN).

    ``x (..., n, d)``; ``mask``, ``key_mask`` and ``causal`` as in :func:`attnref.multi_head_attention`;
    ``attention`` the per-head attention inside it (default scaled dot-product; e.g.
    :func:`attnref.qknorm.qk_norm`). A variant with its own attention sublayer
    (:attr:`Variant.attention`) receives it as ``attention=`` too.
    Returns the output ``z (..., n, d)``, the attention weights of every head ``(..., h, n, n)``
    and a :class:`LayerTrace`.
    """
    weights = _weights(weights)
    _input(x, weights)
    if variant is None:
        variant = PRE_LN if weights.norm_first else POST_LN
    elif isinstance(variant, str):
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        variant = VARIANTS[variant]
    elif not isinstance(variant, Variant):
        raise ValueError(f"variant must be a Variant, a name in VARIANTS or None, got {type(variant).__name__}")
    if attention is not None:
        _attention_function(attention)           # a clear error before any computation
    if variant.attention is None:
        def attend(t: Tensor) -> AttentionResult:
            return multi_head_attention(t, weights=weights.attention, mask=mask, key_mask=key_mask, causal=causal,
                                        attention=attention)
    elif attention is None:
        def attend(t: Tensor) -> AttentionResult:
            return variant.attention(t, weights=weights.attention, mask=mask, key_mask=key_mask, causal=causal)
    else:
        def attend(t: Tensor) -> AttentionResult:
            return variant.attention(t, weights=weights.attention, mask=mask, key_mask=key_mask, causal=causal,
                                     attention=attention)
    return residual_block(
        x,
        attention=attend,
        ffn=lambda t: feed_forward(t, weights.ffn),
        norm_1=lambda t: layer_norm(t, weights.norm_1),
        norm_2=lambda t: layer_norm(t, weights.norm_2),
        variant=variant)


def post_ln_layer(x: Tensor, *, weights: EncoderLayer, mask: Tensor | None = None, key_mask: Tensor | None = None,
                  causal: bool = False, attention: AttentionFunction | None = None) -> AttentionResult:
    r"""Post-LN layer: :math:`y = \mathrm{LN}_1(x + \mathrm{MHA}(x))`, :math:`z = \mathrm{LN}_2(y + \mathrm{FFN}(y))`."""
    return encoder_layer(x, weights=weights, mask=mask, key_mask=key_mask, causal=causal, variant=POST_LN,
                         attention=attention)


def pre_ln_layer(x: Tensor, *, weights: EncoderLayer, mask: Tensor | None = None, key_mask: Tensor | None = None,
                 causal: bool = False, attention: AttentionFunction | None = None) -> AttentionResult:
    r"""Pre-LN layer: :math:`y = x + \mathrm{MHA}(\mathrm{LN}_1(x))`, :math:`z = y + \mathrm{FFN}(\mathrm{LN}_2(y))`.

    With ``causal=True`` the decoder-only (GPT) layer: output ``i`` depends on tokens ``1..i`` only."""
    return encoder_layer(x, weights=weights, mask=mask, key_mask=key_mask, causal=causal, variant=PRE_LN,
                         attention=attention)


class StackTrace(NamedTuple):
    """What :func:`stack_layers` computed besides its output."""

    hidden: tuple[Tensor, ...]            # L + 1 tensors (..., n, d): x, then each layer's output
    layers: tuple[AttentionResult, ...]   # every layer's result (weights (..., h, n, n), trace)


def stack_layers(x: Tensor, *, weights: Sequence[EncoderLayer], mask: Tensor | None = None,
                 key_mask: Tensor | None = None, causal: bool = False, variant: Variant | str | None = None,
                 final_norm: LayerNormParams | None = None, attention: AttentionFunction | None = None) -> AttentionResult:
    """The layers applied in turn, ``x₀ = x``, ``x_l = layer_l(x_{l−1})``, each in ``variant``
    (as in :func:`encoder_layer`: ``None`` runs each layer in the placement its ``norm_first``
    names). ``weights`` is a list or tuple of :class:`EncoderLayer` (one layer: ``[layer]``);
    ``final_norm`` (a :class:`LayerNormParams`) is applied to the last output, as the pre-LN
    Transformer's final LayerNorm (Xiong et al., 2020).

    Returns the final output, the last layer's attention weights (``None`` for no layer) and a
    :class:`StackTrace` (every layer's output and result; ``hidden`` ends with the output before
    ``final_norm``).
    """
    if not isinstance(weights, (list, tuple)):
        raise ValueError(f"weights must be a list or tuple of attnref.EncoderLayer, got {type(weights).__name__}"
                         + (" (one layer: pass [layer])" if isinstance(weights, EncoderLayer) else ""))
    for i, layer in enumerate(weights):
        _weights(layer, f"weights[{i}]")
    if final_norm is not None:
        check.instance("final_norm", final_norm, LayerNormParams)
    check.floating("x", x, min_dim=2)
    check.boolean("causal", causal)
    hidden, results = [x], []
    for layer in weights:
        result = encoder_layer(hidden[-1], weights=layer, mask=mask, key_mask=key_mask, causal=causal,
                               variant=variant, attention=attention)
        hidden.append(result.output)
        results.append(result)
    output = hidden[-1] if final_norm is None else layer_norm(hidden[-1], final_norm)
    return AttentionResult(output, results[-1].weights if results else None,
                           trace=StackTrace(tuple(hidden), tuple(results)))


class TrainableLayer(torch.nn.Module):
    """One layer as a ``torch.nn.Module``: the tensors of an :class:`EncoderLayer` as parameters
    (named like ``attention__w_q``, ``norm_1__gain``), the forward pass attnref's own
    :func:`encoder_layer` in ``variant`` (default: the placement ``norm_first`` names; a
    :class:`Variant` with its own ``attention`` sublayer). ``attention``: the per-head attention of
    its multi-head attention (default scaled dot-product; parameters that it reads, such as QK-norm's
    gains, belong to the caller's module). ``causal=True`` for a decoder.
    """

    def __init__(self, weights: EncoderLayer, variant: Variant | str | None = None,
                 attention: AttentionFunction | None = None):
        super().__init__()
        self._template = _weights(weights)
        if variant is not None and not isinstance(variant, (Variant, str)):
            raise ValueError(f"variant must be a Variant, a name in VARIANTS or None, got {type(variant).__name__}")
        self.variant = variant
        self.attention_function = None if attention is None else _attention_function(attention)
        self._names = tuple(named_tensors(weights))
        for name, tensor in named_tensors(weights).items():
            self.register_parameter(name.replace(".", "__"), torch.nn.Parameter(tensor.detach().clone()))

    def weights(self) -> EncoderLayer:
        """The current parameters as an :class:`EncoderLayer` (differentiable: they are the parameters)."""
        return replace_tensors(self._template, {n: getattr(self, n.replace(".", "__")) for n in self._names})

    def forward(self, x: Tensor, *, mask: Tensor | None = None, key_mask: Tensor | None = None,
                causal: bool = False) -> AttentionResult:
        return encoder_layer(x, weights=self.weights(), mask=mask, key_mask=key_mask, causal=causal,
                             variant=self.variant, attention=self.attention_function)
