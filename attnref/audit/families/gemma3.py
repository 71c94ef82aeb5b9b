"""Gemma 3 decoders from a GGUF file (``general.architecture = gemma3``), e.g. Gemma 3 270M:
QK-norm, sandwich norms, GeGLU, sliding-window and global blocks, one key/value head per group.

Loaded by :mod:`attnref.models.gemma3`; only the embedding rows of the audited texts are
dequantized (the 262144-row table is most of the load time otherwise)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from attnref.audit.families import AuditError, Family, Loaded, Run


def _accepts(path: Path, config: dict) -> bool:
    return config.get("format") == "gguf" and config.get("general.architecture") == "gemma3"


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


def _load(path: Path, config: dict) -> Loaded:
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


FAMILY = Family("gemma3", "Gemma 3 decoders: a .gguf file with general.architecture = gemma3", _accepts, _load)
