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
``blockwise``        attention by the online softmax, one block of keys at a time (no ``n × m`` matrix;
                     what every attention asked for ``need_weights=False`` runs; chapter 9, claim F1)
``multihead``        multi-head attention per head and packed; conversion from/to torch
``layers``           LayerNorm, feed-forward network, the encoder layer's weights, positional encoding
``blocks``           the residual layer and its variants (post-LN, pre-LN, …: one place), stacks, and a
                     trainable ``torch.nn.Module`` built from them
``rope``             rotary position embeddings in transformers' Llama convention (coordinate ``p``
                     paired with ``p + d_k/2``); ``R_t`` acts on columns, so a row rotates as
                     ``x R_tᵀ`` and a rotated score is ``q_i R_{j−i} k_jᵀ``
``decoder``          RMSNorm, SwiGLU, grouped-query attention with rotary positions, the pre-norm
                     causal block of a Llama-style decoder
``qknorm``           QK-norm: per-head RMSNorm of queries and keys (Gemma's 1 + w gain) before the dot
                     product; ``qk_norm(...)`` is a per-head attention for ``attention=``
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
``training/``        chapter 8's controlled experiments: seeded synthetic ``tasks``, tiny ``models``
                     built from attnref's parts, a deterministic CPU loop ``train``, the ``experiments``
                     that ``make experiments`` runs (imported on demand only)
``book/``            the book's plumbing: ``claims`` (registry, evidence, verdicts), ``seeding``
                     (the one seeded source of randomness, ``ATTNREF_SEED``), ``plotting``

One call shape
--------------
Every attention function and every layer follows one rule:

* **Positional: the input tensors only**, in the order ``query, key, value``. Functions of one
  tensor that is query, key and value at once take ``x`` (``parameter_free_self_attention(x)``,
  layers ``f(x, …)``). Multi-head attention takes ``query, key=None, value=None`` (key and
  value default to the query: self-attention).
* **Everything else is keyword-only** (after ``*``): the parameters ``weights=`` (a frozen,
  validated weights dataclass: ``MultiHeadWeights`` for an attention, the layer's weights type
  for a layer), the masks ``mask=None, key_mask=None, causal=False`` — with these defaults
  everywhere, the decoder included — and the settings (``scale``; the inverse temperature is always ``beta``; …).

One hook for a new attention: multi-head attention, the layers, the decoder block and the training
models take the per-head attention as ``attention=``, any function with SDPA's call shape
``f(q, k, v, *, mask=None, causal=False) -> AttentionResult`` (see :mod:`attnref.multihead`).

So ``scaled_dot_product_attention(q, k, v, *, mask=None, key_mask=None, causal=False, scale=None)``
and ``multi_head_attention(query, key=None, value=None, *, weights, mask=None, key_mask=None,
causal=False)``. A positional extra (``scaled_dot_product_attention(q, k, v, None, 0.1)``, torch's
positional ``dropout_p``) is Python's ``TypeError: … takes 3 positional arguments but 5 were
given``, and the old ``multi_head_attention(x, weights)`` is ``TypeError: … missing 1 required
keyword-only argument: 'weights'``.

Masks mean the same everywhere: ``mask`` is boolean (True = may attend) or additive,
broadcastable to the scores ``(..., n, m)``; in multi-head attention a mask with one more axis
is per head, ``(..., h, n, m)``, and a mask whose leading axis could be either the heads or the
batch raises ``ValueError`` (spell it ``(1, h, n, m)`` or ``(B, 1, n, m)``). ``key_mask`` is
``(..., m)``, False = padding; ``causal`` is a bool.

One result type
---------------
Every attention and every layer returns an :class:`AttentionResult` with named fields:
``output`` (``(..., n, d_v)``, a layer's ``(..., n, d)``), ``weights`` (the normalised
attention weights, ``(..., n, m)`` or per head ``(..., h, n, m)``; ``None`` where nothing is
normalised, as in ``linear_attention``), ``scores`` (the scores before normalisation and masks,
where a function computes them: ``linear_attention``'s raw ``q_i·k_j``) and ``trace`` (a layer's
intermediates, ``None`` for a plain attention). Read fields by name. Weight dataclasses are
frozen, validated, have ``.to(device, dtype)`` and their constructors take ``dtype``/``device``.

Input policy
------------
Bad input raises ``ValueError`` naming the argument and the shapes: wrong rank, mismatched
widths or lengths, batch dimensions that do not broadcast, non-floating dtypes, mixed dtypes
or devices, NaN or ±inf in queries, keys, values or weights (additive masks may hold ``-inf``),
masks of the wrong shape, dtype or device, a ``causal`` that is not a bool, a ``scale``,
``beta`` or ``eps`` that is not a finite real of the right shape. A query row whose keys are
all masked out — or that has no key at all (``m = 0``) — gets all-zero weights and a zero
output (documented in :func:`attnref.attention.softmax`); ``n = 0`` queries give empty results.

The checks that read values (NaN/±inf scans, mask values, overflow) synchronise the host and stop
``torch.compile``/``torch.func.vmap``: ``with attnref.checks(False):`` (or ``attnref.set_checks``)
turns them off — they are off by themselves while ``torch.compile`` traces; shape, dtype and
device checks always run (:mod:`attnref._validate`). Chapter 8's training loop runs without them.

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
from attnref.sigmoid import sigmoid_attention
from attnref.blocks import TrainableLayer, Variant, encoder_layer, post_ln_layer, pre_ln_layer, stack_layers
from attnref.layers import (
    EncoderLayer,
    FeedForward,
    LayerNormParams,
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
from attnref._validate import checks, set_checks
from attnref.counts import (
    TransformerConfig,
    attention_parameter_count,
    encoder_layer_parameter_count,
    transformer_parameter_count,
)

__all__ = [
    "AttentionResult",
    "EncoderLayer",
    "FeedForward",
    "LayerNormParams",
    "MultiHeadWeights",
    "TrainableLayer",
    "Variant",
    "TransformerConfig",
    "additive_scores",
    "attention_from_scores",
    "attention_parameter_count",
    "checks",
    "cosine_attention",
    "cosine_scores",
    "encoder_layer",
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
    "set_checks",
    "sigmoid_attention",
    "sinusoidal_positional_encoding",
    "softmax",
    "stack_layers",
    "transformer_parameter_count",
]

from attnref import _extras  # noqa: E402
from attnref import blockwise, decoder, qknorm, rope  # noqa: E402  (modules: attnref.rope.rotate, attnref.decoder.rms_norm, …)

_extras.install()   # a missing optional package names its extra: pip install 'attnref[book]'
