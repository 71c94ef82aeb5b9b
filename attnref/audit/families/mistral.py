"""Mistral decoders from a Hugging Face directory (``model_type: mistral``; ``config.json`` +
``*.safetensors``, sharded or not): the Llama layout (RMSNorm, SwiGLU, grouped-query attention,
rotary positions) with a **sliding window** in every block when ``sliding_window`` is set (query
``i`` sees keys ``i − window + 1 … i``; :func:`attnref.scaled_dot_product_attention`'s ``window=``).
Read block by block by :mod:`attnref.audit.families._hf`."""

from __future__ import annotations

from pathlib import Path

from attnref.audit.families import HF, Family, Loaded


def _accepts(path: Path, config: dict) -> bool:
    return config.get("format") == HF and config.get("model_type") == "mistral"


def _window(c, l: int) -> int | None:
    return int(c.sliding_window) if getattr(c, "sliding_window", None) else None


def _load(path: Path, config: dict, *, dtype=None, device=None) -> Loaded:
    from attnref.audit.families import _hf
    return _hf.llama_like(path, config, "mistral", dtype=dtype, device=device, windows=_window,
                          layout="pre-norm causal decoder (RMSNorm, SwiGLU, RoPE, sliding window)")


FAMILY = Family("mistral", "Mistral decoders: a Hugging Face directory (model_type mistral)", _accepts, _load)
