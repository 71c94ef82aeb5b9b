"""Gemma 3 decoders: QK-norm (gain ``1 + w``), sandwich norms, GeGLU, sliding-window and global
blocks with their own rotary bases, the embedding scaled by ``√d``, the query scale
``query_pre_attn_scalar^{-1/2}``.

* a Hugging Face directory: ``model_type: gemma3_text`` (``Gemma3ForCausalLM``), or the text part of
  ``gemma3`` (``Gemma3ForConditionalGeneration``, its ``text_config``; the vision tower is not
  read), block by block by :mod:`attnref.audit.families._hf`;
* a GGUF file (``general.architecture = gemma3``), e.g. Gemma 3 270M, loaded by
  :mod:`attnref.models.gemma3`; only the embedding rows of the audited texts are dequantized
  (the 262144-row table is most of the load time otherwise).

Refused by name: attention logit soft-capping (Gemma 2's), bidirectional attention, another
activation than GELU (tanh), rotary variants other than default and linear."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from attnref.audit.families import GGUF, HF, AuditError, Family, Loaded, Run, refuse


def _accepts(path: Path, config: dict) -> bool:
    if config.get("format") == HF:
        return config.get("model_type") in ("gemma3_text", "gemma3")
    return config.get("format") == GGUF and config.get("general.architecture") == "gemma3"


def _load_hf(path: Path, config: dict, dtype, device) -> Loaded:
    import math

    from attnref.audit.families import _hf
    c = _hf.hf_config(path, config)
    if getattr(c, "attn_logit_softcapping", None) is not None:
        raise refuse(path, "gemma3", "attention logit soft-capping (attn_logit_softcapping)")
    if getattr(c, "use_bidirectional_attention", False):
        raise refuse(path, "gemma3", "bidirectional attention", "bert")
    if getattr(c, "layer_types", None) is None:
        raise refuse(path, "gemma3", "no layer_types in its configuration")

    def rope(c, l):
        return _hf.rope_for(path, "gemma3", c, c.layer_types[l])
    return _hf.llama_like(path, config, "gemma3", dtype=dtype, device=device, qk_norm=_hf.RMS_1P, sandwich=True,
                          norm=_hf.RMS_1P, mlp=_hf.GEGLU, windows=_hf.layer_windows, rope=rope,
                          embed_scale=math.sqrt(c.hidden_size), scale=float(c.query_pre_attn_scalar) ** -0.5,
                          activations=("gelu_pytorch_tanh",),
                          layout="sandwich-norm causal decoder with QK-norm (GeGLU, RoPE)")


def _per_head(w: torch.Tensor, heads: int, d_k: int) -> torch.Tensor:
    """``(d, heads·d_k)`` (row form, heads side by side) -> ``(heads, d, d_k)``."""
    return w.reshape(w.shape[0], heads, d_k).permute(1, 0, 2)


def attention_branch(model, l: int):
    """D1's attention-only step of block ``l`` of a loaded :class:`attnref.models.gemma3.Gemma3`:
    ``(Y, causal) -> N_2(Att_l(N_1(Y)))`` in float64, what the block adds to the residual stream,
    without the skip. Without the causal mask every token sees every token: a sliding window is
    causal too (it hides j > i and j ≤ i − window), so the block then runs as a global one with its
    own rotary base."""
    from attnref.models import gemma3

    c = model.config
    layer = model.layers[l].to(dtype=torch.float64)
    unmasked = replace(c, layer_types=(gemma3.GLOBAL,) * len(c.layer_types), rope_global=c.rope_base(l))

    def branch(y: torch.Tensor, causal: bool) -> torch.Tensor:          # (n, d) -> (n, d)
        att = gemma3.attention(gemma3.gemma_rms_norm(y, layer.attention_norm, c.eps), weights=layer,
                               config=c if causal else unmasked, layer=l, causal=causal)
        return gemma3.gemma_rms_norm(att.output, layer.post_attention_norm, c.eps)
    return branch


def _load(path: Path, config: dict, *, dtype=None, device=None) -> Loaded:
    if config.get("format") == HF:
        return _load_hf(path, config, dtype, device)
    from attnref.audit.families.llama import gguf_precision
    gguf_precision(path, dtype, device)
    from attnref.models import gemma3

    try:
        reader = gemma3.read_gguf(path)
        c = gemma3.read_config(reader)
    except Exception as error:
        raise AuditError(f"{path.name}: corrupt GGUF file or a Gemma 3 layout the audit cannot run "
                         f"({error.__class__.__name__}: {str(error).splitlines()[0] if str(error) else ''})") from None
    try:
        if gemma3._sha256(path) == gemma3.SHA256:
            tokenizer = gemma3.load_tokenizer()            # the book's model: its tokenizer is cached
        else:
            from transformers import AutoTokenizer
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as error:
        raise AuditError(f"{path.name}: no usable tokenizer in the GGUF file ({error.__class__.__name__})") from None
    group = c.h // c.h_kv
    state: dict = {}

    def prepare(all_ids: list[list[int]]) -> None:
        rows = sorted({i for ids in all_ids for i in ids})
        try:
            state["model"] = gemma3.load(path=path, rows=rows)
        except Exception as error:
            raise AuditError(f"{path.name}: corrupt GGUF file ({error.__class__.__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''})") from None

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text)["input_ids"])

    def run(ids: list[int]) -> Run:
        output = gemma3.forward(state["model"], torch.tensor([ids]), logits=False)
        queries, keys, weights = [], [], []
        for block in output.blocks:
            trace = block.trace.attention.trace                          # QKNormTrace
            queries.append(trace.rotated_query[0])                       # (h, n, d_k): normalised, rotated
            keys.append(trace.rotated_key[0].repeat_interleave(group, dim=0))
            weights.append(block.weights[0])
        return Run(hidden=[x[0] for x in output.hidden], queries=queries, keys=keys, weights=weights)

    def factors() -> list[tuple[torch.Tensor, torch.Tensor]]:
        model = state["model"]
        return [(_per_head(layer.w_q, c.h, c.d_k).double(),
                 _per_head(layer.w_k, c.h_kv, c.d_k).repeat_interleave(group, dim=0).double())
                for layer in model.layers]

    def branch(l: int):
        return attention_branch(state["model"], l)

    context = int(config.get("gemma3.context_length") or 32768)
    return Loaded(family="gemma3", name=str(config.get("general.name") or path.stem), files=[path],
                  context=context, causal=True, scale=c.scale, layers=len(c.layer_types), heads=c.h,
                  d=c.d, d_k=c.d_k, tokenize=tokenize, run=run, factors=factors, prepare=prepare,
                  attention_branch=branch,
                  details={"d": c.d, "h": c.h, "h_kv": c.h_kv, "d_k": c.d_k, "layers": len(c.layer_types),
                           "layout": "sandwich-norm causal decoder with QK-norm (GeGLU, RoPE)",
                           "sliding_window": c.window, "sliding_blocks": sum(t == gemma3.SLIDING for t in c.layer_types),
                           "context_length": context})


FAMILY = Family("gemma3", "Gemma 3 decoders: a Hugging Face directory (model_type gemma3_text, or gemma3's text "
                "part) or a .gguf file (general.architecture gemma3)", _accepts, _load, formats=(HF, GGUF))
