r"""Tiny models for the recall task, built from attnref's parts.

A model embeds each pair as ``E_key[k] + E_value[v]`` and the query as ``E_query[q]`` (appended
last: the sequence has ``n + 1`` tokens, no positions), runs a body, and reads the answer from the
query position through a LayerNorm and a linear map to the ``values`` logits.

Bodies (``Spec.body``):

* ``"attention"`` — ``layers`` :class:`VariantLayer` s: attnref's :class:`~attnref.blocks.TrainableLayer`
  (one :class:`~attnref.layers.EncoderLayer` of parameters) with a chosen placement of the
  LayerNorms and a chosen attention:

  - ``placement``: ``"pre"`` (:func:`attnref.blocks.pre_ln_layer`), ``"post"``
    (:func:`attnref.blocks.post_ln_layer`), ``"post_relu"`` (post-LN with a ReLU after each
    Add & Norm, as after the addition of a ResNet block);
  - ``placement`` ``"post_branch_relu"``: post-LN with a ReLU at the start of each branch,
    LN(x + MHA(ReLU(x))) (the seed's second proposal: the ReLU inside the branch, not on the
    identity path);
  - ``qkv_activation``: σ ∈ {identity, relu, gelu} applied to the per-head q, k, v, or only to
    those named by ``sigma_on`` (``"q"``, ``"k"``, ``"v"``, ``"qkv"``);
  - ``gate``: a sigmoid gate on each head's output before W_O, σ(x W_g + b_g) ⊙ head
    (the value-path gate of Qiu et al. 2025);
  - ``scores``: ``"dot"`` (q·k/√d_k), ``"cosine"`` (β·cos(q, k) at the fixed scale
    ``cos_scale``), ``"cosine_learned"`` (β·cos(q, k) with a learned temperature β = e^s per
    head, QK-norm), ``"fused"`` (one full d × d matrix W per head: x_i W x_jᵀ/√d_k, no bias),
    ``"factored"`` (x_i U Vᵀ x_jᵀ/√d_k with U, V of rank ``score_rank``, no bias: the factored form
    without the key-bias term of biased projections), ``"qk_norm"`` (:mod:`attnref.qknorm`: per-head
    RMSNorm of q and k with learned gains 1 + w, then q·k/√d_k), ``"sigmoid"``
    (:mod:`attnref.sigmoid`: σ(q·k/√d_k − log m), rows not normalised);
  - every variant is attnref's multi-head attention with the variant as its per-head attention
    (``attention=`` of :func:`attnref.multihead.multi_head_attention_packed`); ``RecallModel(...,
    attention=f)`` puts any per-head attention ``f(q, k, v, *, mask=None, causal=False)`` in its place.
* ``"token_mlp"`` — the same MLP on every token (it reads the query token only: no context).
* ``"flat_mlp"`` — an MLP over the flattened sequence (fixed length ``n + 1``; a longer sequence
  is read through its last ``n + 1`` tokens, the window it was trained on).

Parameters are created in a fixed order (embeddings, readout, then the body), so that variants
built from the same seed share their initial weights wherever the shapes agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from attnref.attention import AttentionResult, attention_from_scores, cosine_attention, scaled_dot_product_attention
from attnref.blocks import TrainableLayer, Variant, encoder_layer
from attnref.layers import EncoderLayer, LayerNormParams, gelu, layer_norm, relu
from attnref.multihead import multi_head_attention, multi_head_attention_packed
from attnref.qknorm import qk_norm_attention, qk_rms_norm
from attnref.sigmoid import sigmoid_attention

Tensor = torch.Tensor

BODIES = ("attention", "token_mlp", "flat_mlp")
PLACEMENTS = ("pre", "post", "post_relu", "post_branch_relu")
ACTIVATIONS = ("identity", "relu", "gelu")
SCORES = ("dot", "cosine", "cosine_learned", "fused", "factored", "qk_norm", "sigmoid")
SIGMA_ON = ("q", "k", "v", "qkv")
# Every parameter is float32 whatever torch's default dtype is (the book's notebooks set float64).
DTYPE = torch.float32


@dataclass(frozen=True)
class Spec:
    """What to build: width ``d``, heads ``h``, ``layers``, FFN width ``d_ff`` and the variant."""

    d: int = 32
    h: int = 2
    layers: int = 1
    d_ff: int = 64
    body: str = "attention"
    placement: str = "pre"
    qkv_activation: str = "identity"
    scores: str = "dot"
    n: int = 8                      # pairs at training time (used by the flattened MLP only)
    sigma_on: str = "qkv"           # which of q, k, v get σ
    gate: bool = False              # sigmoid gate on the heads' outputs (Qiu et al. 2025)
    cos_scale: float = 1.0          # the fixed β of "cosine"
    score_rank: int = 0             # rank of "factored" scores (0: d_k)
    queries: int = 1                # keys asked at once (the task's; sets the embeddings)

    def __post_init__(self) -> None:
        for name, allowed in (("body", BODIES), ("placement", PLACEMENTS),
                              ("qkv_activation", ACTIVATIONS), ("scores", SCORES),
                              ("sigma_on", SIGMA_ON)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.d % self.h:
            raise ValueError(f"d = {self.d} is not divisible by h = {self.h}")


_SIGMA = {"identity": lambda t: t, "relu": relu, "gelu": gelu}
# Each placement as attnref's layer variant (attnref.blocks.Variant): the one place a residual
# layer is assembled; VariantLayer only swaps in its attention (Variant.attention).
_PLACEMENT = {
    "pre": dict(norm="pre"),                                   # x + MHA(LN(x)), y + FFN(LN(y))
    "post": dict(norm="post"),                                 # LN(x + MHA(x)), LN(y + FFN(y))
    "post_relu": dict(norm="post", activation="relu"),         # ReLU(LN(x + MHA(x))), …: ReLU after Add & Norm
    "post_branch_relu": dict(norm="post", branch_input="relu"),  # LN(x + MHA(ReLU(x))), …: ReLU inside the branch
}


class VariantLayer(TrainableLayer):
    """attnref's :class:`TrainableLayer` with a chosen LayerNorm placement and attention variant:
    the layer is attnref's :func:`~attnref.blocks.encoder_layer` in the :class:`~attnref.blocks.Variant`
    of ``spec.placement``, with :meth:`attention` as the variant's attention sublayer."""

    def __init__(self, weights: EncoderLayer, spec: Spec, generator: torch.Generator,
                 attention: Callable[..., AttentionResult] | None = None):
        super().__init__(weights)
        self.spec = spec
        self.custom_attention = attention           # a per-head attention replacing spec.scores
        self.variant = Variant(**_PLACEMENT[spec.placement], attention=self.attention)
        h, d, d_k = spec.h, spec.d, spec.d // spec.h
        if spec.scores == "cosine_learned":
            # QK-norm: a learned inverse temperature per head, β = e^s, initialised at β = √d_k
            self.log_beta = torch.nn.Parameter(torch.full((h, 1, 1), 0.5 * math.log(d_k), dtype=DTYPE))
        if spec.scores == "fused":
            # one full d × d matrix per head, N(0, 1/d) entries; W_Q, W_K are not used (frozen, not counted)
            draws = torch.randn(h, d, d, generator=generator, dtype=DTYPE)
            self.w_fused = torch.nn.Parameter(draws * d ** -0.5)
        if spec.scores == "factored":
            # U, V (h, d, r) with N(0, 1/d) entries: x U Vᵀ xᵀ has the variance of W_Q W_Kᵀ's at r = d_k
            r = spec.score_rank or d_k
            self.w_u = torch.nn.Parameter(torch.randn(h, d, r, generator=generator, dtype=DTYPE) * d ** -0.5)
            self.w_v_score = torch.nn.Parameter(torch.randn(h, d, r, generator=generator, dtype=DTYPE) * d ** -0.5)
        if spec.scores in ("fused", "factored"):
            for name in ("attention__w_q", "attention__w_k", "attention__b_q", "attention__b_k"):
                getattr(self, name).requires_grad_(False)
        if spec.scores == "qk_norm":
            # QK-norm (attnref.qknorm): Gemma's gains 1 + w per coordinate of a head, w = 0 at the start
            self.q_norm = torch.nn.Parameter(torch.zeros(d_k, dtype=DTYPE))
            self.k_norm = torch.nn.Parameter(torch.zeros(d_k, dtype=DTYPE))
        if spec.gate:
            # gate logits x W_g + b_g per head and coordinate, N(0, 1/d), bias 0 (σ = 1/2 at the start)
            self.w_gate = torch.nn.Parameter(torch.randn(d, d, generator=generator, dtype=DTYPE) * d ** -0.5)
            self.b_gate = torch.nn.Parameter(torch.zeros(d, dtype=DTYPE))
        self.record_scores = False        # keep the last scores (E6's logit and entropy measurements)
        self.last_scores: Tensor | None = None

    def attention(self, x: Tensor, *, weights, mask: Tensor | None = None, key_mask: Tensor | None = None,
                  causal: bool = False) -> AttentionResult:
        """The attention sublayer of the variant (``weights``: the layer's MultiHeadWeights): attnref's
        multi-head attention with :meth:`head_attention` as its per-head attention — output
        ``(B, n, d)`` after W_O, and the attention weights ``(B, h, n, n)``. The recall model
        attends over every token (:meth:`forward` refuses masks)."""
        if self._plain() and not self.record_scores:
            return multi_head_attention(x, weights=weights)                  # attnref's own MHA, head by head
        return multi_head_attention_packed(x, weights=weights, attention=self.head_attention(x))

    def _plain(self) -> bool:
        spec = self.spec
        return (self.custom_attention is None and spec.qkv_activation == "identity" and spec.scores == "dot"
                and not spec.gate)

    def head_attention(self, x: Tensor):
        """The per-head attention of this variant, ``f(q, k, v, *, mask=None, causal=False)`` on the heads
        ``(B, h, n, d_k)`` — σ on q, k, v, the score variant, the output gate — for attnref's
        :func:`~attnref.multihead.multi_head_attention_packed`. It closes over the layer input ``x``
        ``(B, n, d)``, which the fused and factored scores and the gate read."""
        spec = self.spec
        sigma = _SIGMA[spec.qkv_activation]
        d_k = spec.d // spec.h

        def attend(q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None,
                   causal: bool = False) -> AttentionResult:
            q, k, v = (sigma(t) if name in spec.sigma_on else t for name, t in (("q", q), ("k", k), ("v", v)))
            scores = None
            if self.custom_attention is not None:
                heads = self.custom_attention(q, k, v, mask=mask, causal=causal)
            elif spec.scores == "dot":
                heads = scaled_dot_product_attention(q, k, v, mask=mask, causal=causal)
            elif spec.scores == "cosine":
                heads = cosine_attention(q, k, v, beta=spec.cos_scale, mask=mask, causal=causal)
            elif spec.scores == "cosine_learned":
                heads = cosine_attention(q, k, v, beta=self.log_beta.exp(), mask=mask, causal=causal)
            elif spec.scores == "qk_norm":
                heads = qk_norm_attention(q, k, v, query_weight=self.q_norm, key_weight=self.k_norm, mask=mask,
                                          causal=causal)
            elif spec.scores == "sigmoid":
                heads = sigmoid_attention(q, k, v, mask=mask, causal=causal)
            else:                                                      # x_i W x_jᵀ / √d_k
                w = self.w_fused if spec.scores == "fused" else self.w_u @ self.w_v_score.transpose(-1, -2)
                scores = torch.einsum("bnd,hde,bme->bhnm", x, w, x) / math.sqrt(d_k)
                heads = attention_from_scores(scores, v, mask=mask, causal=causal)
            if self.record_scores:                                     # the logits the softmax saw
                if self.custom_attention is not None or spec.scores == "sigmoid":
                    logits = heads.scores                              # None where the attention has none
                elif spec.scores == "qk_norm":
                    logits = qk_rms_norm(q, self.q_norm) @ qk_rms_norm(k, self.k_norm).transpose(-1, -2) / math.sqrt(d_k)
                elif spec.scores == "dot":
                    logits = q @ k.transpose(-1, -2) / math.sqrt(d_k)
                elif spec.scores in ("cosine", "cosine_learned"):
                    unit = lambda t: t / t.norm(dim=-1, keepdim=True).clamp_min(1e-12)
                    beta = spec.cos_scale if spec.scores == "cosine" else self.log_beta.exp()
                    logits = beta * (unit(q) @ unit(k).transpose(-1, -2))
                else:
                    logits = scores
                self.last_scores = None if logits is None else logits.detach()
            if not spec.gate:
                return heads
            g = torch.sigmoid(x @ self.w_gate + self.b_gate)            # σ(x W_g + b_g): (B, n, d)
            gate = g.unflatten(-1, (spec.h, -1)).transpose(-3, -2)      # split into heads: (B, h, n, d_v)
            return AttentionResult(heads.output * gate, heads.weights)

        return attend

    def forward(self, x: Tensor, *, mask: Tensor | None = None, key_mask: Tensor | None = None,
                causal: bool = False) -> AttentionResult:
        # The parameters keep TrainableLayer's signature, but the recall model attends over
        # every token: a mask or causal flag would be ignored, so it is refused instead.
        for name, given in (("mask", mask is not None), ("key_mask", key_mask is not None),
                            ("causal", bool(causal))):
            if given:
                raise ValueError(f"VariantLayer does not support {name}: the recall model "
                                 "attends over every token")
        return encoder_layer(x, weights=self.weights(), variant=self.variant)


class RecallModel(torch.nn.Module):
    """Embeddings → body → LayerNorm → linear readout at the query position."""

    def __init__(self, spec: Spec, keys: int, values: int, seed: int, classes: int | None = None,
                 attention: Callable[..., AttentionResult] | None = None):
        super().__init__()
        self.spec = spec
        g = torch.Generator().manual_seed(int(seed))
        d = spec.d

        def normal(*shape: int, std: float = 1.0) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*shape, generator=g, dtype=DTYPE) * std)

        self.key_embedding = normal(keys, d)
        self.value_embedding = normal(values, d)
        self.query_embedding = normal(keys, d)
        if spec.queries > 1:                   # the second key asked (E7): its own embedding table
            self.query_embedding_2 = normal(keys, d)
        classes = values if classes is None else classes
        self.readout = normal(d, classes, std=d ** -0.5)
        self.readout_bias = torch.nn.Parameter(torch.zeros(classes, dtype=DTYPE))
        self.final_norm = torch.nn.ParameterDict({"gain": torch.nn.Parameter(torch.ones(d, dtype=DTYPE)),
                                                  "bias": torch.nn.Parameter(torch.zeros(d, dtype=DTYPE))})
        if spec.body == "attention":
            layers = []
            for _ in range(spec.layers):
                weights = EncoderLayer.random(d, spec.h, spec.d_ff, norm_first=spec.placement == "pre",
                                              generator=g, dtype=DTYPE)
                layers.append(VariantLayer(weights, spec, g, attention=attention))
            self.layers = torch.nn.ModuleList(layers)
        else:
            width = d if spec.body == "token_mlp" else d * (spec.n + 1)
            self.w_1 = normal(width, spec.d_ff, std=width ** -0.5)
            self.b_1 = torch.nn.Parameter(torch.zeros(spec.d_ff, dtype=DTYPE))
            self.w_2 = normal(spec.d_ff, d, std=spec.d_ff ** -0.5)
            self.b_2 = torch.nn.Parameter(torch.zeros(d, dtype=DTYPE))

    def embed(self, keys: Tensor, values: Tensor, query: Tensor) -> Tensor:
        pairs = self.key_embedding[keys] + self.value_embedding[values]        # (B, n, d)
        return torch.cat([pairs, self.query_embedding[query].unsqueeze(1)], 1)  # (B, n + 1, d)

    def forward(self, keys: Tensor, values: Tensor, query: Tensor) -> Tensor:
        """Logits ``(B, classes)`` of the answer (``query`` is ``(B,)``, or ``(B, 2)`` for two keys
        asked at once: the query token is then the sum of both keys' query embeddings)."""
        if query.dim() == 2:
            pairs = self.key_embedding[keys] + self.value_embedding[values]
            asked = self.query_embedding[query[:, 0]] + self.query_embedding_2[query[:, 1]]
            x = torch.cat([pairs, asked.unsqueeze(1)], 1)
        else:
            x = self.embed(keys, values, query)
        spec = self.spec
        if spec.body == "attention":
            for layer in self.layers:
                x = layer(x).output
            out = x[:, -1]                                             # the query position
        elif spec.body == "token_mlp":
            t = x[:, -1]                                               # per token: the query's own
            out = t + relu(t @ self.w_1 + self.b_1) @ self.w_2 + self.b_2
        else:
            window = x[:, -(spec.n + 1):].flatten(1)                   # (B, (n + 1)·d)
            out = x[:, -1] + relu(window @ self.w_1 + self.b_1) @ self.w_2 + self.b_2
        norm = LayerNormParams(gain=self.final_norm["gain"], bias=self.final_norm["bias"])
        return layer_norm(out, norm) @ self.readout + self.readout_bias

    def parameter_count(self) -> int:
        """Trainable parameters (frozen, unused tensors are not counted)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def attention_parameter_count(self) -> int:
        """Trainable parameters of the score maps (W_Q, W_K and their biases, or the fused W)."""
        total = 0
        for name, p in self.named_parameters():
            if p.requires_grad and any(s in name for s in ("w_q", "w_k", "b_q", "b_k", "w_fused", "w_u", "w_v_score",
                                                           "q_norm", "k_norm")):
                total += p.numel()
        return total

    def fused_spectra(self) -> list[list[float]]:
        """Singular values of each head's score matrix in the first layer: the fused W, or
        W_Q W_Kᵀ of the factored form (rank ≤ d_k)."""
        layer = self.layers[0]
        with torch.no_grad():
            if self.spec.scores == "fused":
                mats = layer.w_fused
            elif self.spec.scores == "factored":
                mats = layer.w_u @ layer.w_v_score.transpose(-1, -2)
            else:
                a = layer.weights().attention
                mats = torch.stack([a.fused_bilinear(i) for i in range(a.h)])
            return [torch.linalg.svdvals(m.double()).tolist() for m in mats]
