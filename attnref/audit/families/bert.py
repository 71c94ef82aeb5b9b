"""BERT-style encoders from a Hugging Face model directory (``config.json`` with
``model_type: bert``, ``model.safetensors``, ``tokenizer.json``), e.g. all-MiniLM-L6-v2.

Loaded by :mod:`attnref.models.minilm`, which computes a post-LN BERT encoder with attnref's own
layers (any size its ``config.json`` gives, exact GELU, absolute positions)."""

from __future__ import annotations

from pathlib import Path

import torch

from attnref.audit.families import HF, AuditError, Family, Loaded, Run, missing_package


def _accepts(path: Path, config: dict) -> bool:
    return config.get("format") == "huggingface" and (
        config.get("model_type") == "bert" or any("Bert" in str(a) for a in config.get("architectures", ())))


def _load(path: Path, config: dict, *, dtype=None, device=None) -> Loaded:
    from attnref.models import minilm

    if device not in (None, "cpu") and str(device) != "cpu":
        raise AuditError(f"{path.name}: a BERT encoder is computed on the CPU; --device applies to the decoder families")
    for name in ("model.safetensors", "tokenizer.json"):
        if not (path / name).is_file():
            raise AuditError(f"{path.name}: a BERT model directory needs {name} (config.json, model.safetensors, tokenizer.json)")
    try:
        model = minilm.load(path, dtype=dtype or torch.float32)
    except ImportError as error:          # a missing extra is named as missing, never as a corrupt file
        raise missing_package(error, f"{path.name}: reading model.safetensors") from None
    except (ValueError, KeyError) as error:
        raise AuditError(f"{path.name}: this BERT checkpoint is not one the audit can run "
                         f"({str(error).splitlines()[0]})") from None
    except Exception as error:            # safetensors raises its own errors on a truncated file
        raise AuditError(f"{path.name}/model.safetensors is corrupt or truncated "
                         f"({error.__class__.__name__}: {str(error).splitlines()[0] if str(error) else ''})") from None
    try:
        tokenizer = minilm.load_tokenizer(path)
    except ImportError as error:
        raise missing_package(error, f"{path.name}: reading tokenizer.json") from None
    c = model.config

    def tokenize(text: str) -> list[int]:
        return list(tokenizer.encode(text).ids)             # [CLS] … [SEP]

    def run(ids: list[int]) -> Run:
        input_ids = torch.tensor([ids])                      # (1, n)
        output = minilm.encode(model, input_ids)
        queries, keys = [], []
        for l, layer in enumerate(model.layers):
            x = output.hidden_states[l][0]                   # (n, d): the input of block l (post-LN: no norm before attention)
            a = layer.attention
            q = x @ a.w_q + a.b_q[:, None, :]                # (n, d) @ (h, d, d_k) + (h, 1, d_k) -> (h, n, d_k)
            k = x @ a.w_k + a.b_k[:, None, :]
            queries.append(q)
            keys.append(k)
        return Run(hidden=[h[0] for h in output.hidden_states], queries=queries, keys=keys,
                   weights=[w[0] for w in output.attentions])

    def factors() -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.attention.w_q.double(), layer.attention.w_k.double()) for layer in model.layers]

    # the folder's name (a package's generic "model" folder: the package's), not config.json's
    # _name_or_path, which names the checkpoint a model was fine-tuned from
    name = path.resolve().parent.name if path.resolve().name == "model" else path.resolve().name
    return Loaded(family="bert", name=name, files=[path / "model.safetensors"],
                  context=c.max_positions, causal=False, scale=c.d_k ** -0.5, layers=c.layers, heads=c.h,
                  d=c.d, d_k=c.d_k, tokenize=tokenize, run=run, factors=factors,
                  details={"d": c.d, "h": c.h, "d_k": c.d_k, "layers": c.layers, "d_ff": c.d_ff,
                           "layout": "post-LN encoder", "max_positions": c.max_positions})


FAMILY = Family("bert", "BERT-style encoders: a Hugging Face directory with config.json, model.safetensors, tokenizer.json",
                _accepts, _load, formats=(HF,))
