"""Qwen2 decoders from a Hugging Face directory (``model_type: qwen2``; ``config.json`` +
``*.safetensors``, sharded or not): the Llama layout with **biases on the query, key and value
projections** (none on the output projection), grouped-query attention, rotary positions, and a
sliding window in the blocks ``layer_types`` marks ``sliding_attention`` (``use_sliding_window``).
Read block by block by :mod:`attnref.audit.families._hf`."""

from __future__ import annotations

from pathlib import Path

from attnref.audit.families import HF, Family, Loaded


def _accepts(path: Path, config: dict) -> bool:
    return config.get("format") == HF and config.get("model_type") == "qwen2"


def _load(path: Path, config: dict, *, dtype=None, device=None) -> Loaded:
    from attnref.audit.families import _hf
    return _hf.llama_like(path, config, "qwen2", dtype=dtype, device=device, windows=_hf.layer_windows,
                          layout="pre-norm causal decoder (RMSNorm, SwiGLU, RoPE, q/k/v biases)")


FAMILY = Family("qwen2", "Qwen2 decoders: a Hugging Face directory (model_type qwen2)", _accepts, _load)
