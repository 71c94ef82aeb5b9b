"""attnref: small, hand-written reference implementations of attention and its parts.

Every function states its formula in its docstring and computes it one step per line,
with a shape comment on every product, so that a reader can put a finger on the term of
the equation each line computes. The notebooks of the book import this package; they never
define mechanisms of their own.

Notation (the same letters in the book, the package and the tests)
------------------------------------------------------------------
``n``    number of query tokens (rows of ``Q`` and of ``X``)
``m``    number of key/value tokens (``m = n`` in self-attention)
``d``    model width (``d_model``); a token is a row vector ``x ∈ ℝ^d``
``h``    number of heads
``d_k``  query/key width of one head (``d / h`` in the standard layer)
``d_v``  value width of one head (``d / h`` in the standard layer)
``d_ff`` hidden width of the position-wise feed-forward network
``...``  any number of leading batch dimensions

Conventions
-----------
* Row vectors: tokens are the rows of ``X`` (``n × d``) and ``Q = X W_Q`` with
  ``W_Q ∈ ℝ^{d × d_k}``. ``torch.nn.Linear`` stores its weight as ``(out, in)`` and computes
  ``x Wᵀ + b``: the ``from_torch``/``to_torch`` helpers transpose explicitly.
* Boolean masks mean "may attend" (``True`` = keep), as in
  ``torch.nn.functional.scaled_dot_product_attention``. (``torch.nn.MultiheadAttention``'s
  ``key_padding_mask`` and boolean ``attn_mask`` mean the opposite; attnref converts.)
* Checks run in float64. float32 inputs are accepted and computed in float32.

Layout
------
The attention math is at the top of the package; everything else has its own place.

``attention``        softmax and single-head attention in all its forms (scaled dot-product,
                     additive, Luong, cosine, parameter-free, linear/bra-ket, GAT, GATv2)
``multihead``        multi-head attention per head and packed; conversion from/to torch
``layers``           LayerNorm, feed-forward network, the encoder layer's weights, positional encoding
``blocks``           post-LN, pre-LN and causal decoder-only layers, stacks of layers, and a
                     trainable ``torch.nn.Module`` built from them
``rope``             rotary position embeddings in transformers' Llama convention (coordinate ``p``
                     paired with ``p + d_k/2``); ``R_t`` acts on columns, so a row rotates as
                     ``x R_tᵀ`` and a rotated score is ``q_i R_{j−i} k_jᵀ``
``decoder``          RMSNorm, SwiGLU, grouped-query attention with rotary positions, the pre-norm
                     causal block of a Llama-style decoder
``sequence_layers``  position-wise and sliding-window linear layers as Conv1d
``counts``           parameter and multiply–add counts, Vaswani et al. (2017) Table 3
``_validate``        the input checks (one per kind of argument)
``analysis/``        the chapters' analysis helpers, e.g. ``stats`` (bounds with a stated failure
                     probability), ``symbolic`` (sympy), ``series``, ``lowrank``, ``logit_scale``,
                     ``underflow``, ``hull``, ``references`` (the papers' formulas as loops),
                     ``trained`` (measurements on a trained model's tensors), ``texts`` (the
                     sentences the trained models read), ``decoder_measure`` (what ``make measure``
                     stores about the decoder)
``models/``          trained models rebuilt from attnref's parts, e.g. ``minilm`` (all-MiniLM-L6-v2),
                     ``smollm`` (SmolLM2-135M); imported on demand only
``book/``            the book's plumbing: ``claims`` (registry, evidence, verdicts), ``seeding``
                     (the one seeded source of randomness, ``ATTNREF_SEED``), ``plotting``

One vocabulary
--------------
Every attention takes ``query, key, value`` (``x`` where one tensor is all three), the inverse
temperature is ``beta``, and every attention accepts the same masks — ``mask`` (boolean, True =
may attend, or additive; per-head masks ``(..., h, n, m)`` in multi-head attention),
``key_mask`` (``(..., m)``, False = padding) and ``causal`` (a bool) — and returns an
:class:`AttentionResult` ``(output, weights)``. Weight dataclasses have ``.to(device, dtype)``
and their constructors take ``dtype``/``device``.

Input policy
------------
Bad input raises ``ValueError`` naming the argument and the shapes: wrong rank, mismatched
widths or lengths, batch dimensions that do not broadcast, non-floating dtypes, mixed dtypes
or devices, NaN or ±inf in queries, keys, values or weights (additive masks may hold ``-inf``),
masks of the wrong shape, dtype or device, a ``causal`` that is not a bool, a ``scale``,
``beta`` or ``eps`` that is not a finite real of the right shape. A query row whose keys are
all masked out — or that has no key at all (``m = 0``) — gets all-zero weights and a zero
output (documented in :func:`attnref.attention.softmax`); ``n = 0`` queries give empty results.

"""

from attnref.attention import (
    AttentionResult,
    additive_scores,
    attention_from_scores,
    cosine_attention,
    cosine_scores,
    gat_scores,
    gatv2_scores,
    linear_attention,
    luong_dot_scores,
    luong_general_scores,
    parameter_free_self_attention,
    scaled_dot_product_attention,
    softmax,
)
from attnref.blocks import StackResult, TrainableLayer, decoder_layer, post_ln_layer, pre_ln_layer, stack_layers
from attnref.layers import (
    EncoderLayer,
    FeedForward,
    LayerNormParams,
    encoder_layer,
    encoder_layer_with_weights,
    feed_forward,
    layer_norm,
    sinusoidal_positional_encoding,
)
from attnref.multihead import (
    MultiHeadWeights,
    head_projections,
    multi_head_attention,
    multi_head_attention_packed,
)
from attnref.counts import (
    TransformerConfig,
    attention_parameter_count,
    encoder_layer_parameter_count,
    transformer_parameter_count,
)

__all__ = [
    "AttentionResult",
    "StackResult",
    "EncoderLayer",
    "FeedForward",
    "LayerNormParams",
    "MultiHeadWeights",
    "TrainableLayer",
    "TransformerConfig",
    "additive_scores",
    "attention_from_scores",
    "attention_parameter_count",
    "cosine_attention",
    "cosine_scores",
    "decoder_layer",
    "encoder_layer",
    "encoder_layer_with_weights",
    "encoder_layer_parameter_count",
    "feed_forward",
    "gat_scores",
    "gatv2_scores",
    "head_projections",
    "layer_norm",
    "linear_attention",
    "luong_dot_scores",
    "luong_general_scores",
    "multi_head_attention",
    "multi_head_attention_packed",
    "parameter_free_self_attention",
    "post_ln_layer",
    "pre_ln_layer",
    "scaled_dot_product_attention",
    "sinusoidal_positional_encoding",
    "softmax",
    "stack_layers",
    "transformer_parameter_count",
]

from attnref import decoder, rope  # noqa: E402  (modules: attnref.rope.rotate, attnref.decoder.rms_norm, …)
