r"""Hugging Face decoders (``config.json`` + ``*.safetensors``), read **block by block**.

The directory's safetensors files (one ``model.safetensors``, or the shards that
``model.safetensors.index.json`` names) are opened memory-mapped with ``safetensors.safe_open``;
nothing is read until a tensor is asked for, and a tensor is read in the dtype it is stored in
(float32, float16, bfloat16) and converted to the compute dtype only then. The audit's pass over
its texts runs **every text through one block before it reads the next one** (:meth:`Layerwise.prepare`):
the block's tensors are read, applied to every text and freed, so the peak memory is about the
embedding rows the texts use, one block and the activations of the texts, whatever the depth
(``book/audit.md`` has the measurement). The rank recheck (:meth:`Layerwise.factors`) and D1's
attention-only path (:meth:`Layerwise.attention_branch`) read one block's attention at a time too.

A family adapter gives a :class:`DecoderSpec` (the sizes and which parts the block has) and a
function that reads block ``l``'s tensors into attnref's row form (``(in, out)`` projections);
the forward pass below is attnref's parts only: :func:`attnref.decoder.rms_norm`,
:func:`attnref.layers.layer_norm`, :func:`attnref.qknorm.qk_rms_norm`, :func:`attnref.rope.rotate`,
:func:`attnref.scaled_dot_product_attention` (causal, sliding window), :func:`attnref.decoder.swiglu`,
:func:`attnref.models.gemma3.geglu`. transformers serves only to read ``config.json`` (its
configuration classes fill the defaults and convert older fields) and, in the tests, as the oracle.

.. math::

    H^{(0)} &= s \cdot E[t_i] \;(+\, P[i]) \\
    Y &= H + N_2\big(\operatorname{Att}_l(N_1(H))\big) \qquad (N_2 = \text{identity unless sandwich}) \\
    H' &= Y + N_4\big(\operatorname{FFN}_l(N_3(Y))\big)

with :math:`\operatorname{Att}_l` grouped-query attention: projections (with biases where the
checkpoint has them), per-head QK-norm where it has one, rotary positions (rotate-half pairs,
the block's base, linear position scaling), the causal mask and the block's sliding window.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from attnref.audit.families import AuditError, Loaded, Run, missing_package, refuse

Tensor = torch.Tensor

#: Rotary variants the audit computes (transformers' ``rope_type``); others are refused by name.
ROPE_TYPES = ("default", "linear")


# --- the files --------------------------------------------------------------------------------------

class Checkpoint:
    """The tensors of a Hugging Face directory by name, memory-mapped, read one at a time."""

    def __init__(self, path: Path):
        try:
            from safetensors import safe_open
        except ImportError as error:
            raise missing_package(error, f"{path.name}: reading safetensors") from None
        self.path = path
        index = path / "model.safetensors.index.json"
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
                names = sorted(set(weight_map.values()))
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as error:
                raise AuditError(f"{path.name}/model.safetensors.index.json is not a valid shard index "
                                 f"({error.__class__.__name__})") from None
            absent = [n for n in names if not (path / n).is_file()]
            if absent:
                raise AuditError(f"{path.name}: the shard {absent[0]} that model.safetensors.index.json names is missing")
        elif (path / "model.safetensors").is_file():
            names = ["model.safetensors"]
        else:
            names = sorted(p.name for p in path.glob("*.safetensors"))
            if not names:
                other = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pth")]
                hint = (f" (found {other[0]}: save it again with save_pretrained, which writes safetensors)"
                        if other else "")
                raise AuditError(f"{path.name}: no model.safetensors or model.safetensors.index.json{hint}")
        self._open = safe_open
        self.where, self.dtypes = {}, set()
        for name in names:
            try:
                with safe_open(str(path / name), framework="pt") as handle:
                    keys = list(handle.keys())
                    self.dtypes.update(str(handle.get_slice(k).get_dtype()) for k in keys)
            except Exception as error:        # safetensors raises its own error types on a bad header or size
                raise AuditError(f"{path.name}/{name} is corrupt or truncated ({error.__class__.__name__}: "
                                 f"{_first_line(error)})") from None
            self.where.update(dict.fromkeys(keys, name))
        self.files = [path / name for name in names]

    def _handle(self, name: str):
        """The shard that holds tensor ``name``, memory-mapped for one read: opened per read and closed
        after it, so that the pages of the map that a block touched leave the process with the block
        (a map held open for the whole audit would end up holding the whole file in its resident set)."""
        if name not in self.where:
            raise AuditError(f"{self.path.name}: the checkpoint has no tensor {name}")
        return self._open(str(self.path / self.where[name]), framework="pt")

    def has(self, name: str) -> bool:
        return name in self.where

    def names(self) -> list[str]:
        return list(self.where)

    def get(self, name: str, dtype: torch.dtype | None = None, device=None) -> Tensor:
        """Tensor ``name`` as stored, then in ``dtype`` on ``device``."""
        try:
            with self._handle(name) as handle:
                # a copy of its own (never a view of the map), in the compute dtype
                tensor = handle.get_tensor(name).to(device=device, dtype=dtype, copy=True)
        except AuditError:
            raise
        except Exception as error:
            raise AuditError(f"{self.path.name}/{self.where[name]} is corrupt or truncated at {name} "
                             f"({error.__class__.__name__}: {_first_line(error)})") from None
        return tensor

    def rows(self, name: str, ids: list[int], dtype: torch.dtype, device=None) -> Tensor:
        """Rows ``ids`` (sorted, distinct) of the matrix ``name``, read as runs of consecutive rows:
        an embedding table is never read whole."""
        with self._handle(name) as handle:
            part = handle.get_slice(name)
            vocab, width = part.get_shape()[0], part.get_shape()[1]
            if ids and (ids[0] < 0 or ids[-1] >= vocab):
                raise AuditError(f"{self.path.name}: the tokenizer gives id {ids[-1]}, beyond the {vocab} rows of {name}")
            pieces, start = [], 0
            for i in range(1, len(ids) + 1):
                if i == len(ids) or ids[i] != ids[i - 1] + 1:
                    pieces.append(part[ids[start]:ids[i - 1] + 1].to(dtype=dtype, copy=True))
                    start = i
        return torch.cat(pieces).to(device) if pieces else torch.zeros(0, width, dtype=dtype, device=device)

    def stored_dtypes(self) -> list[str]:
        return sorted(self.dtypes)


def _first_line(error: Exception) -> str:
    text = str(error)
    return text.splitlines()[0] if text else error.__class__.__name__


def hf_config(path: Path, config: dict):
    """transformers' configuration object for ``config.json`` (defaults filled in, older rotary fields
    converted); for a multimodal checkpoint, its ``text_config``."""
    try:
        from transformers import AutoConfig
    except ImportError as error:
        raise missing_package(error, f"{path.name}: reading config.json") from None
    try:
        parsed = AutoConfig.from_pretrained(str(path))
    except Exception as error:
        raise AuditError(f"{path.name}/config.json: transformers cannot read it ({error.__class__.__name__}: "
                         f"{_first_line(error)})") from None
    return getattr(parsed, "text_config", None) or parsed


def rope_for(path: Path, family: str, c, layer_type: str | None = None) -> tuple[float, float]:
    """The rotary base and the linear position factor of a block (``layer_type``: Gemma 3's
    ``sliding_attention`` / ``full_attention``); other rotary variants refused by name."""
    params = getattr(c, "rope_parameters", None)
    if params is None:                                   # older transformers: rope_theta + rope_scaling
        params = {"rope_theta": getattr(c, "rope_theta", 10000.0), **(getattr(c, "rope_scaling", None) or {})}
    if layer_type is not None and isinstance(params, dict) and layer_type in params:
        params = params[layer_type]
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind not in ROPE_TYPES:
        raise refuse(path, family, f"rotary scaling {kind!r} (the audit computes {' and '.join(ROPE_TYPES)})")
    if getattr(c, "partial_rotary_factor", 1.0) not in (None, 1.0) or params.get("partial_rotary_factor", 1.0) != 1.0:
        raise refuse(path, family, "partial rotary embeddings")
    return float(params.get("rope_theta", 10000.0)), float(params.get("factor", 1.0)) if kind == "linear" else 1.0


def read_tokenizer(path: Path):
    """``tokenize(text) -> ids`` from the directory's ``tokenizer.json`` (special tokens added as the
    tokenizer's post-processor says), else transformers' tokenizer for the directory."""
    if (path / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError as error:
            raise missing_package(error, f"{path.name}: reading tokenizer.json") from None
        try:
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        except Exception as error:
            raise AuditError(f"{path.name}/tokenizer.json is not a tokenizer ({_first_line(error)})") from None
        return lambda text: list(tokenizer.encode(text).ids)
    try:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except ImportError as error:
        raise missing_package(error, f"{path.name}: reading the tokenizer") from None
    except Exception as error:
        raise AuditError(f"{path.name}: no usable tokenizer (tokenizer.json or what transformers reads: "
                         f"{error.__class__.__name__})") from None
    return lambda text: list(tokenizer(text)["input_ids"])


def prefix_of(checkpoint: Checkpoint, suffix: str, family: str, beside: str | None = None) -> str:
    """The name prefix of the decoder's tensors (``model.``, ``model.language_model.``, ``transformer.``…):
    the part before ``suffix`` (e.g. ``layers.0.self_attn.q_proj.weight``) of a name that has the
    tensor ``beside`` (e.g. ``embed_tokens.weight``) under the same prefix — a multimodal checkpoint's
    vision tower has ``layers.0.self_attn.q_proj.weight`` too, but no token embedding."""
    for name in sorted(checkpoint.names()):
        if name.endswith(suffix) and (name == suffix or name[: -len(suffix)].endswith(".")):
            prefix = name[: -len(suffix)]
            if beside is None or checkpoint.has(prefix + beside):
                return prefix
    raise AuditError(f"{checkpoint.path.name}: no tensor ending in {suffix}: not a {family} checkpoint the audit can read")


# --- the model -------------------------------------------------------------------------------------

RMS, RMS_1P, LAYER = "rms", "rms1p", "layer"          # gain g; Gemma's gain 1 + w; LayerNorm with bias
SWIGLU, GEGLU, GELU_MLP = "swiglu", "geglu", "gelu_mlp"


@dataclass
class DecoderSpec:
    family: str
    d: int
    h: int
    h_kv: int
    d_k: int
    layers: int
    context: int
    norm: str                          # RMS, RMS_1P or LAYER (every norm of the block and the final one)
    eps: float
    mlp: str                           # SWIGLU, GEGLU or GELU_MLP
    scale: float                       # the factor of q·k
    embedding: str                     # the token embedding's tensor name
    read_block: Callable               # (checkpoint, l, dtype, device, ffn: bool) -> dict of row-form tensors
    rope: list[tuple[float, float] | None] = field(default_factory=list)   # per block (base, linear factor) or None
    windows: list[int | None] = field(default_factory=list)               # per block: sliding window or None
    qk_norm: str | None = None         # None, RMS (Qwen3: gain w) or RMS_1P (Gemma 3: gain 1 + w)
    sandwich: bool = False             # norms after each branch too (Gemma 3)
    embed_scale: float | None = None   # Gemma: √d
    positions: str | None = None       # learned absolute positions: their tensor name (GPT-2's wpe)
    details: dict = field(default_factory=dict)


def _norm(spec: DecoderSpec, x: Tensor, gain: Tensor, bias: Tensor | None = None) -> Tensor:
    from attnref.decoder import rms_norm
    if spec.norm == RMS:
        return rms_norm(x, gain, spec.eps)
    if spec.norm == RMS_1P:
        from attnref.models.gemma3 import gemma_rms_norm
        return gemma_rms_norm(x, gain, spec.eps)
    from attnref.layers import LayerNormParams, layer_norm
    return layer_norm(x, LayerNormParams(gain, bias, spec.eps))


def _project(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    y = x @ w                                                   # (N, d) @ (d, out) -> (N, out)
    return y if b is None else y + b


def attention(spec: DecoderSpec, W: dict, x: Tensor, l: int, causal: bool = True, sizes: list[int] | None = None):
    """Block ``l``'s attention on normalised inputs ``x (N, d)``: the rows of one text, or of several
    texts one after the other (``sizes``: their lengths; the projections run on all rows at once, the
    attention within each text). Returns ``(output (N, d), weights, queries, keys)``, the last three
    lists with one entry per text: ``(h, n, n)``, ``(h, n, d_k)`` and ``(h_kv, n, d_k)``, queries and
    keys as the scores use them. Without the causal mask (``causal=False``, D1's control) every token
    sees every token (no window either)."""
    from attnref import rope as rotary
    from attnref.attention import scaled_dot_product_attention
    from attnref.qknorm import qk_rms_norm

    sizes = [x.shape[-2]] if sizes is None else sizes
    h, h_kv, d_k = spec.h, spec.h_kv, spec.d_k
    q_all = _project(x, W["w_q"], W.get("b_q")).unflatten(-1, (h, d_k))         # (N, h, d_k)
    k_all = _project(x, W["w_k"], W.get("b_k")).unflatten(-1, (h_kv, d_k))      # (N, h_kv, d_k)
    v_all = _project(x, W["w_v"], W.get("b_v")).unflatten(-1, (h_kv, d_k))
    if spec.qk_norm is not None:                                                 # per head, per row
        q_all = qk_rms_norm(q_all, W["q_norm"], eps=spec.eps, unit_offset=spec.qk_norm == RMS_1P)
        k_all = qk_rms_norm(k_all, W["k_norm"], eps=spec.eps, unit_offset=spec.qk_norm == RMS_1P)
    group = h // h_kv
    outputs, weights, queries, keys = [], [], [], []
    for q, k, v in zip(q_all.split(sizes), k_all.split(sizes), v_all.split(sizes)):
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)      # (heads, n, d_k)
        if spec.rope[l] is not None:
            base, factor = spec.rope[l]
            positions = torch.arange(q.shape[-2], device=x.device)              # each text from position 0
            if factor != 1.0:
                positions = positions.double() / factor
            q, k = rotary.rotate(q, positions, base), rotary.rotate(k, positions, base)
        heads = scaled_dot_product_attention(q, k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3),
                                             causal=causal, window=spec.windows[l] if causal else None, scale=spec.scale)
        outputs.append(heads.output.transpose(-3, -2).flatten(-2))              # (n, h·d_k)
        weights.append(heads.weights)
        queries.append(q)
        keys.append(k)
    out = _project(torch.cat(outputs), W["w_o"], W.get("b_o"))                  # (N, h·d_k) @ (h·d_k, d)
    return out, weights, queries, keys


def attention_update(spec: DecoderSpec, W: dict, x: Tensor, l: int, causal: bool = True, sizes=None):
    """What block ``l``'s attention branch adds to the residual stream ``x (N, d)`` (no skip)."""
    out, weights, q, k = attention(spec, W, _norm(spec, x, W["attention_norm"], W.get("attention_norm_bias")), l,
                                   causal, sizes)
    if spec.sandwich:
        out = _norm(spec, out, W["post_attention_norm"])
    return out, weights, q, k


def block(spec: DecoderSpec, W: dict, x: Tensor, l: int, sizes: list[int] | None = None):
    """Block ``l`` on the residual stream ``x (N, d)`` (one text, or several one after the other:
    ``sizes``): ``(H', weights, queries, keys)``, the last three per text."""
    update, weights, q, k = attention_update(spec, W, x, l, True, sizes)
    y = x + update
    f = _norm(spec, y, W["ffn_norm"], W.get("ffn_norm_bias"))
    if spec.mlp == SWIGLU:
        from attnref.decoder import swiglu
        f = swiglu(f, W["w_gate"], W["w_up"], W["w_down"])
    elif spec.mlp == GEGLU:
        from attnref.models.gemma3 import geglu
        f = geglu(f, W["w_gate"], W["w_up"], W["w_down"])
    else:
        from attnref.models.gemma3 import gelu_tanh
        f = gelu_tanh(f @ W["w_up"] + W["b_up"]) @ W["w_down"] + W["b_down"]
    if spec.sandwich:
        f = _norm(spec, f, W["post_ffn_norm"])
    return y + f, weights, q, k


def linear(checkpoint: Checkpoint, name: str, dtype, device, bias: bool | None = None):
    """``name.weight`` of a ``torch.nn.Linear`` (stored ``(out, in)``) in row form ``(in, out)``, and
    ``name.bias`` (``bias=None``: if the checkpoint has one)."""
    w = checkpoint.get(f"{name}.weight", dtype, device).T              # a transposed view: no second copy
    has = checkpoint.has(f"{name}.bias") if bias is None else bias
    return w, (checkpoint.get(f"{name}.bias", dtype, device) if has else None)


def read_llama_like(prefix: str, sandwich: bool = False, qk_norm: bool = False):
    """The block reader of the Llama layout (``{prefix}layers.{l}.self_attn.q_proj`` …, ``mlp.gate_proj`` …),
    which Mistral, Qwen2, Qwen3 and Gemma 3 share; biases read where the checkpoint has them."""
    def read(checkpoint: Checkpoint, l: int, dtype, device, ffn: bool = True) -> dict:
        p = f"{prefix}layers.{l}."
        W = {"attention_norm": checkpoint.get(p + "input_layernorm.weight", dtype, device)}
        for part, name in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "o_proj")):
            W[f"w_{part}"], W[f"b_{part}"] = linear(checkpoint, p + "self_attn." + name, dtype, device)
        if qk_norm:
            W["q_norm"] = checkpoint.get(p + "self_attn.q_norm.weight", dtype, device)
            W["k_norm"] = checkpoint.get(p + "self_attn.k_norm.weight", dtype, device)
        if sandwich:
            W["post_attention_norm"] = checkpoint.get(p + "post_attention_layernorm.weight", dtype, device)
        if ffn:
            W["ffn_norm"] = checkpoint.get(p + ("pre_feedforward_layernorm.weight" if sandwich
                                                else "post_attention_layernorm.weight"), dtype, device)
            if sandwich:
                W["post_ffn_norm"] = checkpoint.get(p + "post_feedforward_layernorm.weight", dtype, device)
            for part in ("gate", "up", "down"):
                W[f"w_{part}"], bias = linear(checkpoint, p + f"mlp.{part}_proj", dtype, device)
                if bias is not None:
                    raise AuditError(f"{checkpoint.path.name}: an MLP with biases (mlp.{part}_proj.bias) is not "
                                     "supported in this family")
        return W
    return read


DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Layerwise:
    """A Hugging Face decoder run block by block over all the audit's texts (see the module's docstring)."""

    def __init__(self, path: Path, checkpoint: Checkpoint, spec: DecoderSpec, tokenize, dtype=None, device=None):
        self.path, self.checkpoint, self.spec, self.tokenize = path, checkpoint, spec, tokenize
        self.dtype = dtype or torch.float32
        self.device = torch.device(device or "cpu")
        self.runs: dict[tuple[int, ...], Run] = {}
        self.seconds_per_block: list[float] = []
        self.progress = None                   # called with 1 after each block of prepare (the audit's bar)

    def embed(self, all_ids: list[list[int]]) -> list[Tensor]:
        rows = sorted({i for ids in all_ids for i in ids})
        table = self.checkpoint.rows(self.spec.embedding, rows, self.dtype, self.device)    # (len(rows), d)
        where = {token: r for r, token in enumerate(rows)}
        out = []
        for ids in all_ids:
            x = table[torch.tensor([where[i] for i in ids], device=self.device)]               # (n, d)
            if self.spec.embed_scale is not None:                  # Gemma: the factor in float32, then the dtype
                x = x * torch.tensor(self.spec.embed_scale, dtype=torch.float32).to(self.dtype)
            out.append(x)
        if self.spec.positions is not None:
            longest = max(len(ids) for ids in all_ids)
            positions = self.checkpoint.rows(self.spec.positions, list(range(longest)), self.dtype, self.device)
            out = [x + positions[: x.shape[0]] for x in out]
        return out

    def prepare(self, all_ids: list[list[int]]) -> None:
        """Run every text through the model, one block at a time (the block's tensors read, used, freed),
        and keep what :meth:`run` returns for each text."""
        import time
        todo = [list(ids) for ids in {tuple(ids): None for ids in all_ids} if tuple(ids) not in self.runs]
        if not todo:
            return
        xs = self.embed(todo)
        sizes = [x.shape[0] for x in xs]
        x = torch.cat(xs)                                    # (N, d): every text's rows, one text after the other
        hidden = [[part.cpu()] for part in x.split(sizes)]
        queries, keys, weights = [[] for _ in todo], [[] for _ in todo], [[] for _ in todo]
        for l in range(self.spec.layers):
            started = time.perf_counter()
            W = self.spec.read_block(self.checkpoint, l, self.dtype, self.device, True)
            x, w, q, k = block(self.spec, W, x, l, sizes)
            for s, part in enumerate(x.split(sizes)):
                hidden[s].append(part.cpu())
                queries[s].append(q[s].cpu())
                keys[s].append(k[s].cpu())
                weights[s].append(w[s].cpu())
            del W
            self.seconds_per_block.append(time.perf_counter() - started)
            if self.progress is not None:
                self.progress(1)
        group = self.spec.h // self.spec.h_kv
        for s, ids in enumerate(todo):
            self.runs[tuple(ids)] = Run(hidden=hidden[s], queries=queries[s],
                                        keys=[k.repeat_interleave(group, dim=0) for k in keys[s]], weights=weights[s])

    def run(self, ids: list[int]) -> Run:
        if tuple(ids) not in self.runs:
            self.prepare([ids])
        return self.runs[tuple(ids)]

    def factors(self):
        """Per block ``(W_Q, W_K)``, each ``(h, d, d_k)`` float64, query head ``i``'s key factor that of
        its key/value group ``i // (h / h_kv)``; one block read at a time."""
        s = self.spec
        group = s.h // s.h_kv
        for l in range(s.layers):
            W = s.read_block(self.checkpoint, l, torch.float64, "cpu", False)
            yield (W["w_q"].contiguous().reshape(s.d, s.h, s.d_k).permute(1, 0, 2),
                   W["w_k"].contiguous().reshape(s.d, s.h_kv, s.d_k).permute(1, 0, 2).repeat_interleave(group, dim=0))

    def attention_branch(self, l: int):
        """D1's attention-only step of block ``l`` in float64: ``(Y, causal) -> N_2(Att_l(N_1(Y)))``, what
        the block's attention adds to the residual stream, without the skip."""
        W = self.spec.read_block(self.checkpoint, l, torch.float64, "cpu", False)

        def branch(y: Tensor, causal: bool) -> Tensor:
            return attention_update(self.spec, W, y, l, causal)[0]
        return branch


def load(path: Path, spec: DecoderSpec, checkpoint: Checkpoint, *, name: str | None = None,
         dtype=None, device=None) -> Loaded:
    """A :class:`Loaded` model of a Hugging Face decoder: the rechecks' interface over :class:`Layerwise`."""
    model = Layerwise(path, checkpoint, spec, read_tokenizer(path), dtype, device)
    resolved = path.resolve()
    details = {"d": spec.d, "h": spec.h, "h_kv": spec.h_kv, "d_k": spec.d_k, "layers": spec.layers,
               **spec.details, "context_length": spec.context, "stored_dtypes": checkpoint.stored_dtypes(),
               "files": len(checkpoint.files)}
    loaded = Loaded(family=spec.family, name=name or resolved.name, files=list(checkpoint.files),
                    context=spec.context, causal=True, scale=spec.scale, layers=spec.layers, heads=spec.h,
                    d=spec.d, d_k=spec.d_k, tokenize=model.tokenize, run=model.run, factors=model.factors,
                    details=details, prepare=model.prepare, attention_branch=model.attention_branch)
    loaded.layerwise = model
    return loaded


def check_sizes(path: Path, family: str, d: int, h: int, h_kv: int, d_k: int) -> None:
    if h % h_kv:
        raise AuditError(f"{path.name}: {family} with {h} query heads and {h_kv} key/value heads: h_kv must divide h")
    if d_k % 2:
        raise refuse(path, family, f"an odd head width d_k = {d_k} (rotary positions pair coordinates)")


def context_of(c, default: int = 2048) -> int:
    value = getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", None) or default
    return int(value)


def scale_of(d_k: int) -> float:
    return 1.0 / math.sqrt(d_k)


def llama_like(path: Path, config: dict, family: str, *, dtype=None, device=None, qk_norm: str | None = None,
               sandwich: bool = False, norm: str = RMS, mlp: str = SWIGLU, windows=None, rope=None,
               embed_scale: float | None = None, scale: float | None = None, layout: str = "",
               activations: tuple[str, ...] = ("silu",)) -> Loaded:
    """A :class:`Loaded` model of a checkpoint in the Llama layout (Llama, Mistral, Qwen2, Qwen3, Gemma 3):
    ``windows`` and ``rope`` are functions of ``(c, l)`` (default: no window, the config's one rotary base)."""
    c = hf_config(path, config)
    act = getattr(c, "hidden_act", None) or getattr(c, "hidden_activation", None)
    if act not in activations:
        raise refuse(path, family, f"the activation {act!r} (the audit computes {', '.join(activations)})")
    if getattr(c, "mlp_bias", False):
        raise refuse(path, family, "biases in the MLP (mlp_bias)", "qwen2")
    d, h = int(c.hidden_size), int(c.num_attention_heads)
    h_kv = int(getattr(c, "num_key_value_heads", None) or h)
    d_k = int(getattr(c, "head_dim", None) or d // h)
    check_sizes(path, family, d, h, h_kv, d_k)
    L = int(c.num_hidden_layers)
    checkpoint = Checkpoint(path)
    prefix = prefix_of(checkpoint, "layers.0.self_attn.q_proj.weight", family, beside="embed_tokens.weight")
    spec = DecoderSpec(
        family=family, d=d, h=h, h_kv=h_kv, d_k=d_k, layers=L, context=context_of(c), norm=norm,
        eps=float(c.rms_norm_eps), mlp=mlp, scale=scale_of(d_k) if scale is None else scale,
        embedding=prefix + "embed_tokens.weight",
        read_block=read_llama_like(prefix, sandwich=sandwich, qk_norm=qk_norm is not None),
        rope=[(rope(c, l) if rope is not None else rope_for(path, family, c)) for l in range(L)],
        windows=[(windows(c, l) if windows is not None else None) for l in range(L)],
        qk_norm=qk_norm, sandwich=sandwich, embed_scale=embed_scale,
        details={"layout": layout, "intermediate_size": int(c.intermediate_size),
                 "attention_biases": checkpoint.has(prefix + "layers.0.self_attn.q_proj.bias"),
                 "qk_norm": qk_norm is not None})
    if any(w is not None for w in spec.windows):
        spec.details["sliding_window"] = next(w for w in spec.windows if w is not None)
        spec.details["sliding_blocks"] = sum(w is not None for w in spec.windows)
    if len({r for r in spec.rope}) > 1:
        spec.details["rope"] = sorted({f"base {b:g}" + (f", linear factor {f:g}" if f != 1 else "") for b, f in spec.rope})
    else:
        base, factor = spec.rope[0]
        spec.details["rope_base"] = base
        if factor != 1:
            spec.details["rope_linear_factor"] = factor
    return load(path, spec, checkpoint, dtype=dtype, device=device)


def layer_windows(c, l: int) -> int | None:
    """transformers' ``layer_types`` (Qwen2, Qwen3, Gemma 3): the window of a ``sliding_attention`` block."""
    types = getattr(c, "layer_types", None)
    if types is None:
        return None
    return int(c.sliding_window) if types[l] == "sliding_attention" and getattr(c, "sliding_window", None) else None
