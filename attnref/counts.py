r"""Parameter counts of attention layers and whole encoder/decoder Transformers.

Every count is a sum of matrix sizes written out term by term, so that it can be checked
against ``sum(p.numel() for p in module.parameters())`` of the torch module.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnref import _validate as check


def attention_parameter_count(d: int, h: int, d_k: int | None = None, d_v: int | None = None,
                              bias: bool = True) -> int:
    r"""Parameters of one multi-head attention layer: :math:`h(2 d d_k + d d_v) + h d_v d` (+ biases).

    With :math:`d_k = d_v = d/h` this is :math:`4d^2 + 4d` (``torch.nn.MultiheadAttention``).
    """
    check.positive_int("d", d)
    check.positive_int("h", h)
    if d_k is None or d_v is None:
        if d % h:
            raise ValueError(f"d_model = {d} is not divisible by the number of heads h = {h}")
    d_k = d // h if d_k is None else d_k
    d_v = d // h if d_v is None else d_v
    projections = h * (d * d_k + d * d_k + d * d_v)   # W_i^Q, W_i^K, W_i^V for every head
    output = h * d_v * d                              # W^O
    biases = h * (d_k + d_k + d_v) + d if bias else 0
    return projections + output + biases


def feed_forward_parameter_count(d: int, d_ff: int, bias: bool = True) -> int:
    r""":math:`2 d\, d_{ff}` weights + :math:`d_{ff} + d` biases."""
    return 2 * d * d_ff + ((d_ff + d) if bias else 0)


def layer_norm_parameter_count(d: int) -> int:
    """Gain and bias: ``2d``."""
    return 2 * d


def encoder_layer_parameter_count(d: int, h: int, d_ff: int, d_k: int | None = None,
                                  d_v: int | None = None) -> int:
    """Self-attention + FFN + two LayerNorms (``torch.nn.TransformerEncoderLayer``)."""
    return (attention_parameter_count(d, h, d_k, d_v) + feed_forward_parameter_count(d, d_ff)
            + 2 * layer_norm_parameter_count(d))


def decoder_layer_parameter_count(d: int, h: int, d_ff: int, d_k: int | None = None,
                                  d_v: int | None = None) -> int:
    """Self-attention + cross-attention + FFN + three LayerNorms (``torch.nn.TransformerDecoderLayer``)."""
    return (2 * attention_parameter_count(d, h, d_k, d_v) + feed_forward_parameter_count(d, d_ff)
            + 3 * layer_norm_parameter_count(d))


@dataclass(frozen=True)
class TransformerConfig:
    """An encoder–decoder Transformer as in Vaswani et al. (2017), Table 3."""

    n_layers: int = 6            # N: encoder layers (and as many decoder layers)
    d: int = 512                 # d_model
    d_ff: int = 2048
    h: int = 8
    d_k: int | None = None       # default d / h
    d_v: int | None = None       # default d / h
    vocab: int = 37000           # shared source–target BPE vocabulary (EN–DE)
    shared_embeddings: bool = True   # one matrix for both embeddings and the pre-softmax layer
    final_layer_norms: bool = False  # torch.nn.Transformer adds one LayerNorm after each stack


def transformer_parameter_count(config: TransformerConfig) -> dict[str, int]:
    """Parameters of an encoder–decoder Transformer, by part, with the total under ``"total"``."""
    c = config
    parts = {
        "embeddings": c.vocab * c.d * (1 if c.shared_embeddings else 3),
        "encoder": c.n_layers * encoder_layer_parameter_count(c.d, c.h, c.d_ff, c.d_k, c.d_v),
        "decoder": c.n_layers * decoder_layer_parameter_count(c.d, c.h, c.d_ff, c.d_k, c.d_v),
        "final_layer_norms": 2 * layer_norm_parameter_count(c.d) if c.final_layer_norms else 0,
    }
    parts["total"] = sum(parts.values())
    return parts
