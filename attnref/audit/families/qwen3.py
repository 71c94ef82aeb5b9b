"""Qwen3 decoders from a Hugging Face directory (``model_type: qwen3``; ``config.json`` +
``*.safetensors``, sharded or not): the Llama layout with **QK-norm** — an RMSNorm of every query
and key per head with gain ``w`` (:func:`attnref.qknorm.qk_rms_norm` with ``unit_offset=False``),
after the projections and before the rotary positions — a head width ``head_dim`` of its own,
grouped-query attention, and a sliding window in the blocks ``layer_types`` marks
``sliding_attention``. Read block by block by :mod:`attnref.audit.families._hf`."""

from __future__ import annotations

from pathlib import Path

from attnref.audit.families import HF, Family, Loaded


def _accepts(path: Path, config: dict) -> bool:
    return config.get("format") == HF and config.get("model_type") == "qwen3"


def _load(path: Path, config: dict, *, dtype=None, device=None) -> Loaded:
    from attnref.audit.families import _hf
    return _hf.llama_like(path, config, "qwen3", dtype=dtype, device=device, qk_norm=_hf.RMS,
                          windows=_hf.layer_windows,
                          layout="pre-norm causal decoder with QK-norm (RMSNorm, SwiGLU, RoPE)")


FAMILY = Family("qwen3", "Qwen3 decoders: a Hugging Face directory (model_type qwen3)", _accepts, _load)
