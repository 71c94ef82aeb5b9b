"""GPT-2 decoders from a Hugging Face directory (``model_type: gpt2``; ``config.json`` +
``*.safetensors``, sharded or not): pre-LN blocks with LayerNorm, learned absolute positions
(``wpe``), multi-head attention whose query, key and value projections are **one fused Conv1D**
``attn.c_attn`` (stored ``(in, out) = (d, 3d)``, already attnref's row form: split into thirds),
biases everywhere, and an MLP with GELU (tanh approximation, ``gelu_new``). No rotary positions.
Read block by block by :mod:`attnref.audit.families._hf`.

Refused by name: ``scale_attn_by_inverse_layer_idx``, unscaled scores (``scale_attn_weights = false``),
cross-attention, another activation than ``gelu_new``."""

from __future__ import annotations

from pathlib import Path

from attnref.audit.families import HF, Family, Loaded, refuse


def _accepts(path: Path, config: dict) -> bool:
    return config.get("format") == HF and config.get("model_type") == "gpt2"


def _read(prefix: str, d: int):
    def read(checkpoint, l: int, dtype, device, ffn: bool = True) -> dict:
        p = f"{prefix}h.{l}."
        qkv = checkpoint.get(p + "attn.c_attn.weight", dtype, device)          # (d, 3d): Conv1D is (in, out)
        b = checkpoint.get(p + "attn.c_attn.bias", dtype, device)              # (3d,)
        W = {"attention_norm": checkpoint.get(p + "ln_1.weight", dtype, device),
             "attention_norm_bias": checkpoint.get(p + "ln_1.bias", dtype, device),
             "w_q": qkv[:, :d].contiguous(), "w_k": qkv[:, d:2 * d].contiguous(), "w_v": qkv[:, 2 * d:].contiguous(),
             "b_q": b[:d], "b_k": b[d:2 * d], "b_v": b[2 * d:],
             "w_o": checkpoint.get(p + "attn.c_proj.weight", dtype, device),
             "b_o": checkpoint.get(p + "attn.c_proj.bias", dtype, device)}
        if ffn:
            W.update({"ffn_norm": checkpoint.get(p + "ln_2.weight", dtype, device),
                      "ffn_norm_bias": checkpoint.get(p + "ln_2.bias", dtype, device),
                      "w_up": checkpoint.get(p + "mlp.c_fc.weight", dtype, device),
                      "b_up": checkpoint.get(p + "mlp.c_fc.bias", dtype, device),
                      "w_down": checkpoint.get(p + "mlp.c_proj.weight", dtype, device),
                      "b_down": checkpoint.get(p + "mlp.c_proj.bias", dtype, device)})
        return W
    return read


def _load(path: Path, config: dict, *, dtype=None, device=None) -> Loaded:
    from attnref.audit.families import _hf
    c = _hf.hf_config(path, config)
    if getattr(c, "scale_attn_by_inverse_layer_idx", False):
        raise refuse(path, "gpt2", "scale_attn_by_inverse_layer_idx")
    if not getattr(c, "scale_attn_weights", True):
        raise refuse(path, "gpt2", "unscaled attention scores (scale_attn_weights = false)")
    if getattr(c, "add_cross_attention", False):
        raise refuse(path, "gpt2", "cross-attention", "bert")
    if c.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        raise refuse(path, "gpt2", f"the activation {c.activation_function!r} (the audit computes gelu_new)")
    d, h, L = int(c.n_embd), int(c.n_head), int(c.n_layer)
    if d % h:
        raise refuse(path, "gpt2", f"a width {d} that {h} heads do not divide")
    checkpoint = _hf.Checkpoint(path)
    prefix = _hf.prefix_of(checkpoint, "h.0.attn.c_attn.weight", "gpt2")
    spec = _hf.DecoderSpec(
        family="gpt2", d=d, h=h, h_kv=h, d_k=d // h, layers=L, context=int(c.n_positions), norm=_hf.LAYER,
        eps=float(c.layer_norm_epsilon), mlp=_hf.GELU_MLP, scale=_hf.scale_of(d // h),
        embedding=prefix + "wte.weight", positions=prefix + "wpe.weight", read_block=_read(prefix, d),
        rope=[None] * L, windows=[None] * L,
        details={"layout": "pre-LN causal decoder (LayerNorm, GELU MLP, learned positions, fused c_attn)",
                 "intermediate_size": int(c.n_inner or 4 * d), "attention_biases": True, "qk_norm": False})
    return _hf.load(path, spec, checkpoint, dtype=dtype, device=device)


FAMILY = Family("gpt2", "GPT-2 decoders: a Hugging Face directory (model_type gpt2)", _accepts, _load)
