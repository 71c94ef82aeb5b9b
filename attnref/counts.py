r"""Parameter counts of attention layers and whole encoder/decoder Transformers, and
multiply–add counts of the score computation.

Every count is a sum of matrix sizes written out term by term, so that it can be checked
against ``sum(p.numel() for p in module.parameters())`` of the torch module. The
multiply–add counts are read off the shapes of the matrix products, one product per line;
they accept sympy symbols as well as ints, so the notebook derives the formulas with the
same functions that it evaluates on numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnref import _validate as check


def _optional_sizes(**sizes: int | None) -> None:
    """``d_k``/``d_v``: ``None`` (the default ``d / h``) or a positive int."""
    for name, size in sizes.items():
        if size is not None:
            check.positive_int(name, size)


def attention_parameter_count(d: int, h: int, d_k: int | None = None, d_v: int | None = None,
                              bias: bool = True) -> int:
    r"""Parameters of one multi-head attention layer: :math:`h(2 d d_k + d d_v) + h d_v d` (+ biases).

    With :math:`d_k = d_v = d/h` this is :math:`4d^2 + 4d` (``torch.nn.MultiheadAttention``).
    Sizes are positive ints and ``bias`` a bool (every count here), or ``ValueError``.
    """
    check.positive_int("d", d)
    check.positive_int("h", h)
    _optional_sizes(d_k=d_k, d_v=d_v)
    check.boolean("bias", bias)
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
    check.positive_int("d", d)
    check.positive_int("d_ff", d_ff)
    check.boolean("bias", bias)
    return 2 * d * d_ff + ((d_ff + d) if bias else 0)


def layer_norm_parameter_count(d: int, bias: bool = True) -> int:
    """Gain and bias: ``2d`` (``d`` without the bias, as ``torch.nn.LayerNorm(bias=False)``)."""
    check.positive_int("d", d)
    check.boolean("bias", bias)
    return 2 * d if bias else d


def encoder_layer_parameter_count(d: int, h: int, d_ff: int, d_k: int | None = None,
                                  d_v: int | None = None, bias: bool = True) -> int:
    """Self-attention + FFN + two LayerNorms (``torch.nn.TransformerEncoderLayer``)."""
    return (attention_parameter_count(d, h, d_k, d_v, bias) + feed_forward_parameter_count(d, d_ff, bias)
            + 2 * layer_norm_parameter_count(d, bias))


def decoder_layer_parameter_count(d: int, h: int, d_ff: int, d_k: int | None = None,
                                  d_v: int | None = None, bias: bool = True) -> int:
    """Self-attention + cross-attention + FFN + three LayerNorms (``torch.nn.TransformerDecoderLayer``)."""
    return (2 * attention_parameter_count(d, h, d_k, d_v, bias) + feed_forward_parameter_count(d, d_ff, bias)
            + 3 * layer_norm_parameter_count(d, bias))


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
    bias: bool = True            # biases of every Linear and LayerNorm (torch's `bias=` flag)

    def __post_init__(self) -> None:
        for name in ("n_layers", "d", "d_ff", "h"):
            check.positive_int(name, getattr(self, name))
        if isinstance(self.vocab, bool) or not isinstance(self.vocab, int) or self.vocab < 0:
            raise ValueError(f"vocab must be an int ≥ 0 (0: no embeddings), got {self.vocab!r}")
        _optional_sizes(d_k=self.d_k, d_v=self.d_v)
        for name in ("shared_embeddings", "final_layer_norms", "bias"):
            check.boolean(name, getattr(self, name))


def transformer_parameter_count(config: TransformerConfig) -> dict[str, int]:
    """Parameters of an encoder–decoder Transformer, by part, with the total under ``"total"``.

    ``"embeddings"`` is ``vocab · d`` for one shared matrix (source embedding = target
    embedding = pre-softmax weight), ``3 · vocab · d`` for three separate ones. Positional
    encodings are sinusoidal: no parameters.
    """
    c = check.instance("config", config, TransformerConfig)
    parts = {
        "embeddings": c.vocab * c.d * (1 if c.shared_embeddings else 3),
        "encoder": c.n_layers * encoder_layer_parameter_count(c.d, c.h, c.d_ff, c.d_k, c.d_v, c.bias),
        "decoder": c.n_layers * decoder_layer_parameter_count(c.d, c.h, c.d_ff, c.d_k, c.d_v, c.bias),
        "final_layer_norms": 2 * layer_norm_parameter_count(c.d, c.bias) if c.final_layer_norms else 0,
    }
    parts["total"] = sum(parts.values())
    return parts


# --- published counts ------------------------------------------------------------------------

@dataclass(frozen=True)
class PublishedCount:
    """One row of Vaswani et al. (2017), Table 3, with its published parameter count."""

    row: str                   # the row as the table labels it
    config: TransformerConfig  # the row's architecture (unlisted entries are the base model's)
    millions: int | None       # the "params ×10⁶" column; None where the table leaves it blank


#: The rows of Table 3 of Vaswani et al. (2017) that change the architecture. Rows (A) keep
#: h·d_k = d and the table lists no parameter count for them; rows (D) and (E) change only
#: dropout, label smoothing or the positional encoding and are left out.
VASWANI2017_TABLE3: tuple[PublishedCount, ...] = (
    PublishedCount("base", TransformerConfig(), 65),
    PublishedCount("(A) h=1", TransformerConfig(h=1, d_k=512, d_v=512), None),
    PublishedCount("(A) h=4", TransformerConfig(h=4, d_k=128, d_v=128), None),
    PublishedCount("(A) h=16", TransformerConfig(h=16, d_k=32, d_v=32), None),
    PublishedCount("(A) h=32", TransformerConfig(h=32, d_k=16, d_v=16), None),
    PublishedCount("(B) d_k=16", TransformerConfig(d_k=16, d_v=64), 58),
    PublishedCount("(B) d_k=32", TransformerConfig(d_k=32, d_v=64), 60),
    PublishedCount("(C) N=2", TransformerConfig(n_layers=2), 36),
    PublishedCount("(C) N=4", TransformerConfig(n_layers=4), 50),
    PublishedCount("(C) N=8", TransformerConfig(n_layers=8), 80),
    PublishedCount("(C) d=256", TransformerConfig(d=256, d_k=32, d_v=32), 28),
    PublishedCount("(C) d=1024", TransformerConfig(d=1024, d_k=128, d_v=128), 168),
    PublishedCount("(C) d_ff=1024", TransformerConfig(d_ff=1024), 53),
    PublishedCount("(C) d_ff=4096", TransformerConfig(d_ff=4096), 90),
    PublishedCount("big", TransformerConfig(d=1024, d_ff=4096, h=16), 213),
)


def implied_vocabulary(config: TransformerConfig, millions: int) -> tuple[float, float]:
    r"""The embedding sizes ``vocab`` for which ``config``'s total rounds to ``millions`` · 10⁶.

    With :math:`P(V) = P_0 + k V d` (``k`` = 1 shared or 3 separate embedding matrices, ``P_0``
    everything else), :math:`|P(V) - M\cdot 10^6| \le \tfrac12 10^6` gives
    :math:`V \in [((M - \tfrac12) 10^6 - P_0)/(k d),\ ((M + \tfrac12) 10^6 - P_0)/(k d)]`.
    """
    check.instance("config", config, TransformerConfig)
    check.positive_int("millions", millions)
    parts = transformer_parameter_count(config)
    rest = parts["total"] - parts["embeddings"]                  # P_0
    per_token = config.d * (1 if config.shared_embeddings else 3)  # k d
    low = ((millions - 0.5) * 1e6 - rest) / per_token
    high = ((millions + 0.5) * 1e6 - rest) / per_token
    return low, high


# --- multiply–add counts ---------------------------------------------------------------------

def _size(name: str, value):
    """A matrix dimension: a positive int, or a sympy expression not known to be ≤ 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    import sympy as sp   # only symbolic callers pay for the import
    if isinstance(value, sp.Expr) and value.is_positive is not False and not value.is_number:
        return value
    if isinstance(value, sp.Integer) and value > 0:
        return int(value)
    raise ValueError(f"{name} must be a positive int or a sympy symbol, got {value!r}")


def matmul_multiply_adds(a_shape: tuple, b_shape: tuple) -> int:
    r"""Multiply–adds of one product :math:`(p \times q)(q \times r)`: :math:`p\,q\,r`.

    ``a_shape = (p, q)``, ``b_shape = (q, r)``; entries may be ints or sympy symbols.
    """
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ValueError(f"a_shape and b_shape must be (rows, cols) pairs, got {a_shape} and {b_shape}")
    p, q = (_size("a_shape", s) for s in a_shape)
    q_b, r = (_size("b_shape", s) for s in b_shape)
    if q != q_b:
        raise ValueError(f"inner dimensions differ: a_shape {tuple(a_shape)} and b_shape {tuple(b_shape)} "
                         f"({q} != {q_b})")
    return p * q * r


def score_multiply_adds(n, d, d_k, m=None, fused: bool = False, project_keys: bool = True,
                        absorbed: bool = False):
    r"""Multiply–adds of one head's score matrix :math:`S \in \mathbb{R}^{n \times m}`, in one of
    three orders of evaluation.

    Factored (the default), :math:`S = (X_q W_i^Q)(X_k W_i^K)^\top`:
    :math:`n d d_k + m d d_k + n m d_k` (:math:`2 n d d_k + n^2 d_k` in self-attention). With
    ``project_keys=False`` the keys :math:`K_i = X_k W_i^K` are already at hand (a cache of
    projected keys) and their :math:`m d d_k` is not counted.

    Absorbed (``absorbed=True``), the factors evaluated as :math:`S = ((X_q W_i^Q) W_i^{K\top})
    X_k^\top`: :math:`2 n d d_k + n m d`. :math:`W_i^K` is "absorbed" into the query, which then
    meets the raw key inputs :math:`X_k`: no key is projected, and no :math:`d \times d` matrix
    is stored.

    Fused (``fused=True``), :math:`S = (X_q W_i) X_k^\top` with the stored
    :math:`W_i = W_i^Q W_i^{K\top} \in \mathbb{R}^{d\times d}`: :math:`n d^2 + n m d`
    (:math:`n d^2 + n^2 d`). It also reads the raw key inputs. Forming :math:`W_i` itself
    (:math:`d^2 d_k`, once per weight update) is not included.

    ``project_keys`` applies to the factored order only; ``fused`` and ``absorbed`` exclude each
    other. ``m`` defaults to ``n``. The orders that start from the keys
    (:math:`X_q (W_i X_k^\top)` …) are these counts with ``n`` and ``m`` exchanged
    (:math:`S^\top = X_k W_i^\top X_q^\top`).

    Fused minus absorbed is :math:`n d (d - 2 d_k)`: with :math:`d_k \le d/2` (every layer of
    :math:`h \ge 2` heads of width :math:`d/h`) the fused matrix is never cheaper than the best
    order of the factors (chapter 5, H4).
    """
    for name, flag in (("project_keys", project_keys), ("fused", fused), ("absorbed", absorbed)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be a bool, got {flag!r}")
    if fused and absorbed:
        raise ValueError("fused and absorbed are two different orders: pass at most one")
    m = n if m is None else m
    n, m, d, d_k = _size("n", n), _size("m", m), _size("d", d), _size("d_k", d_k)
    if absorbed:
        queries = matmul_multiply_adds((n, d), (d, d_k))     # Q_i = X_q W_i^Q: (n, d)(d, d_k)
        absorbed_q = matmul_multiply_adds((n, d_k), (d_k, d))   # Q_i W_i^Kᵀ: (n, d_k)(d_k, d)
        scores = matmul_multiply_adds((n, d), (d, m))        # (Q_i W_i^Kᵀ) X_kᵀ: (n, d)(d, m)
        return queries + absorbed_q + scores
    if not fused:
        queries = matmul_multiply_adds((n, d), (d, d_k))     # Q_i = X_q W_i^Q: (n, d)(d, d_k)
        keys = matmul_multiply_adds((m, d), (d, d_k)) if project_keys else 0   # K_i = X_k W_i^K: (m, d)(d, d_k)
        scores = matmul_multiply_adds((n, d_k), (d_k, m))    # Q_i K_iᵀ: (n, d_k)(d_k, m)
        return queries + keys + scores
    projected = matmul_multiply_adds((n, d), (d, d))         # X_q W_i: (n, d)(d, d)
    scores = matmul_multiply_adds((n, d), (d, m))            # (X_q W_i) X_kᵀ: (n, d)(d, m)
    return projected + scores
