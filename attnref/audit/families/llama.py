"""Llama-style decoders: pre-norm causal blocks, RMSNorm, SwiGLU, grouped-query attention with
rotary positions (rotate-half pairs; the default and the linear rotary variants), optional q/k/v/o
biases (``attention_bias``).

* a Hugging Face directory (``model_type: llama``; ``config.json`` + ``*.safetensors``, sharded or
  not), read block by block by :mod:`attnref.audit.families._hf`;
* a GGUF file (``general.architecture = llama``), e.g. SmolLM2-135M, loaded by
  :mod:`attnref.models.smollm` (any size the file's metadata gives).

Refused by name: another activation than SiLU, MLP biases, rotary variants other than default and
linear (e.g. ``llama3``, ``yarn``)."""

from __future__ import annotations

from pathlib import Path

import torch

from attnref.audit.families import GGUF, HF, AuditError, Family, Loaded, Run


def _accepts(path: Path, config: dict) -> bool:
    if config.get("format") == HF:
        return config.get("model_type") == "llama"
    return config.get("format") == GGUF and config.get("general.architecture") == "llama"


def gguf_precision(path: Path, dtype, device) -> None:
    """A GGUF file is dequantized and computed in float32 on the CPU: another --dtype/--device is refused."""
    import torch
    if (dtype not in (None, torch.float32)) or (device not in (None, "cpu") and str(device) != "cpu"):
        raise AuditError(f"{path.name}: a .gguf file is computed in float32 on the CPU; --dtype and --device "
                         "apply to Hugging Face directories")


def _per_head(w: torch.Tensor, heads: int, d_k: int) -> torch.Tensor:
    """``(d, heads·d_k)`` (row form, heads side by side) -> ``(heads, d, d_k)``."""
    return w.reshape(w.shape[0], heads, d_k).permute(1, 0, 2)


def attention_branch(model, l: int):
    """D1's attention-only step of block ``l`` of a loaded :class:`attnref.models.smollm.SmolLM`:
    ``(Y, causal) -> GQA_l(RMSNorm_l(Y))`` in float64, without the skip (chapter 6b's path,
    :mod:`attnref.analysis.decoder_measure`)."""
    from attnref.decoder import grouped_query_attention, rms_norm

    c = model.config
    layer = model.layers[l].to(dtype=torch.float64)

    def branch(y: torch.Tensor, causal: bool) -> torch.Tensor:          # (n, d) -> (n, d)
        return grouped_query_attention(rms_norm(y, layer.attention_norm, c.eps), weights=layer, config=c,
                                       causal=causal).output
    return branch


def _load(path: Path, config: dict, *, dtype=None, device=None) -> Loaded:
    if config.get("format") == HF:
        from attnref.audit.families import _hf
        return _hf.llama_like(path, config, "llama", dtype=dtype, device=device,
                              layout="pre-norm causal decoder (RMSNorm, SwiGLU, RoPE)")
    gguf_precision(path, dtype, device)
    from attnref.models import smollm

    try:
        model = smollm.load(path=path)
    except Exception as error:            # a truncated tensor, a missing field, a quantisation gguf cannot read
        raise AuditError(f"{path.name}: corrupt GGUF file or a Llama layout the audit cannot run "
                         f"({error.__class__.__name__}: {str(error).splitlines()[0] if str(error) else ''})") from None
    try:
        tokenizer = smollm.load_tokenizer(path)
    except Exception as error:
        raise AuditError(f"{path.name}: no usable tokenizer in the GGUF file ({error.__class__.__name__})") from None
    c = model.config
    group = c.h // c.h_kv

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text)["input_ids"])

    def run(ids: list[int]) -> Run:
        output = smollm.forward(model, torch.tensor([ids]), logits=False)
        queries, keys, weights = [], [], []
        for block in output.blocks:
            trace = block.trace.attention.trace                          # GroupedQueryTrace
            queries.append(trace.rotated_query[0])                       # (h, n, d_k)
            keys.append(trace.rotated_key[0].repeat_interleave(group, dim=0))   # (h_kv, n, d_k) -> (h, n, d_k)
            weights.append(block.weights[0])                             # (h, n, n)
        return Run(hidden=[x[0] for x in output.hidden], queries=queries, keys=keys, weights=weights)

    def factors() -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(_per_head(layer.w_q, c.h, c.d_k).double(),
                 _per_head(layer.w_k, c.h_kv, c.d_k).repeat_interleave(group, dim=0).double())
                for layer in model.layers]

    def branch(l: int):
        return attention_branch(model, l)

    context = int(config.get("llama.context_length") or 2048)
    return Loaded(family="llama", name=str(config.get("general.name") or path.stem), files=[path],
                  context=context, causal=True, scale=c.d_k ** -0.5, layers=len(model.layers), heads=c.h,
                  d=c.d, d_k=c.d_k, tokenize=tokenize, run=run, factors=factors, attention_branch=branch,
                  details={"d": c.d, "h": c.h, "h_kv": c.h_kv, "d_k": c.d_k, "layers": len(model.layers),
                           "rope_base": c.rope_base, "layout": "pre-norm causal decoder (RMSNorm, SwiGLU, RoPE)",
                           "context_length": context})


FAMILY = Family("llama", "Llama-style decoders: a Hugging Face directory (model_type llama) or a .gguf file "
                "(general.architecture llama)", _accepts, _load, formats=(HF, GGUF))
