"""make measure-ch10: the slot weights of the FFNs of MiniLM, SmolLM2 and Gemma 3 (claim K3) on the
book's text set, beside their attention weights on the same text, stored with their provenance.

    .venv/bin/python tools/measure_ch10.py [--root .] [--models minilm,smollm2,gemma3] [--sentences N] [--out DIR]

Writes data/ch10-measurements.npz and .json (per sentence and block: sums over tokens, so that the
chapter computes its statistics, and tests/test_ch10_checks.py re-measures a sentence with
:func:`measure_sentence` and compares).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from attnref.analysis import ffn_memory as fm  # noqa: E402
from attnref.analysis import norms  # noqa: E402
from attnref.analysis.texts import SENTENCES  # noqa: E402
from attnref.book import provenance  # noqa: E402

RULE = fm.RULE


def _stored_ids(root: Path, name: str) -> list[torch.Tensor]:
    """The token ids chapter 6 stored for SmolLM2 / Gemma 3 (no tokenizer needed here)."""
    import numpy as np
    with np.load(root / "data" / f"{name}-measurements.npz") as stored:
        ids, lengths = stored["token_ids"], stored["sentence_lengths"]
    starts = [0, *np.cumsum(lengths).tolist()]
    return [torch.from_numpy(ids[starts[s]:starts[s + 1]]).long() for s in range(len(lengths))]


def load_model(key: str, root: Path):
    """(model, list of token-id tensors, config summary) of one of the three models."""
    if key == "minilm":
        from attnref.models import minilm
        model = minilm.load()
        tokenizer = minilm.load_tokenizer()
        ids = [minilm.tokenize([s], tokenizer).input_ids[0] for s in SENTENCES]
        c = model.config
        return model, ids, {"d": c.d, "d_ff": c.d_ff, "layers": c.layers, "h": c.h, "activation": "gelu",
                            "gated": False, "causal": False, "norm": "LayerNorm (post)"}
    if key == "smollm2":
        from attnref.models import smollm
        model = smollm.load()
        c = model.config
        return model, _stored_ids(root, "smollm2"), {
            "d": c.d, "d_ff": model.layers[0].w_gate.shape[1], "layers": len(model.layers), "h": c.h,
            "activation": "silu", "gated": True, "causal": True, "norm": "RMSNorm (pre)"}
    if key == "gemma3":
        from attnref.models import gemma3
        model = gemma3.load()
        c = model.config
        return model, _stored_ids(root, "gemma3"), {
            "d": c.d, "d_ff": c.d_ff, "layers": len(model.layers), "h": c.h, "activation": "gelu_tanh",
            "gated": True, "causal": True, "norm": "RMSNorm (sandwich)"}
    raise ValueError(f"unknown model key {key!r}")


def _ffn_pieces(key: str, model, ids: torch.Tensor):
    """Per block: (the FFN's input, its keys, bias, up, values, output bias, the model's own FFN output on that input,
    the attention weights (h, n, n), the stream entering the block (n, d): the first RMSNorm's input; None for
    MiniLM, whose LayerNorms come after the sums)."""
    pieces = []
    if key == "minilm":
        from attnref.blocks import encoder_layer
        from attnref.layers import feed_forward
        from attnref.models import minilm
        x = minilm.embed(model, ids[None])
        for layer in model.layers:
            result = encoder_layer(x, weights=layer)
            y = result.trace.hidden[0]                                   # post-LN: the FFN's input
            f = layer.ffn
            pieces.append((y, f.w_1, f.b_1, None, f.w_2, f.b_2, feed_forward(y, f), result.weights[0], None))
            x = result.output
    elif key == "smollm2":
        from attnref.decoder import decoder_block, rms_norm, swiglu
        x = model.embedding[ids][None]
        for layer in model.layers:
            result = decoder_block(x, weights=layer, config=model.config, causal=True)
            y = rms_norm(result.trace.hidden[0], layer.ffn_norm, model.config.eps)
            pieces.append((y, layer.w_gate, None, layer.w_up, layer.w_down, None,
                           swiglu(y, layer.w_gate, layer.w_up, layer.w_down), result.weights[0], x[0]))
            x = result.output
    else:
        from attnref.models import gemma3
        x = gemma3.embed(model, ids[None])
        for index, layer in enumerate(model.layers):
            result = gemma3.block(x, weights=layer, config=model.config, layer=index)
            stream = x + result.trace.attention_update
            y = gemma3.gemma_rms_norm(stream, layer.ffn_norm, model.config.eps)[0]
            pieces.append((y, layer.w_gate, None, layer.w_up, layer.w_down, None,
                           gemma3.geglu(y, layer.w_gate, layer.w_up, layer.w_down), result.weights[0], x[0]))
            x = result.output
    return pieces


def measure_sentence(key: str, model, ids: torch.Tensor, config: dict) -> dict[str, torch.Tensor]:
    """One sentence's per-block sums (float64) and its top-slot sets, for model ``key``."""
    out = {name: [] for name in ("slots90", "effective", "negative", "attn90", "attn_effective", "attn_rows",
                                 "identity_error", "curve_ffn", "curve_attn", "sink", "rho", "gap")}
    sets = []
    with torch.no_grad():
        for y, keys, bias, up, values, bias_2, ffn_out, att, stream in _ffn_pieces(key, model, ids):
            a = fm.slot_weights(y, keys, bias, activation_name=config["activation"], up=up)   # (n, d_ff)
            again = fm.slot_sum(a, values, bias_2)                      # Σ_k a_k v_k (+ b_2)
            scale = ffn_out.abs().max().clamp_min(1e-30)
            out["identity_error"].append(((again - ffn_out).abs().max() / scale).double())
            mass = fm.contributions(a, values).double()                  # (n, d_ff)
            out["slots90"].append(fm.share_needed(mass, RULE["mass"]).sum())
            out["effective"].append(fm.effective_share(mass).sum())
            negative = (mass * (a < 0)).sum(-1) / mass.sum(-1)
            out["negative"].append(negative.sum())
            support_all = torch.full(mass.shape[:-1], mass.shape[-1], dtype=torch.float64)
            out["curve_ffn"].append(fm.cumulative_curve(mass, support_all).sum(0))
            rows, support = fm.attention_rows(att.double(), config["causal"])
            if rows.shape[0]:
                out["attn90"].append(fm.share_needed(rows, RULE["mass"], support).sum())
                out["attn_effective"].append(fm.effective_share(rows, support).sum())
                out["curve_attn"].append(fm.cumulative_curve(rows, support).sum(0))
            else:
                out["attn90"].append(torch.zeros((), dtype=torch.float64))
                out["attn_effective"].append(torch.zeros((), dtype=torch.float64))
                out["curve_attn"].append(torch.zeros(len(fm.CURVE_FRACTIONS), dtype=torch.float64))
            out["attn_rows"].append(torch.tensor(float(rows.shape[0]), dtype=torch.float64))
            sets.append(fm.top_sets(mass, RULE["top_fraction"]))
            out["sink"].append(att[:, 1:, 0].double())                       # (h, n − 1): W2's sink weights
            if stream is not None:                                           # N4: RMSNorm against LN on the stream
                out["rho"].append(norms.mean_to_rms(stream.double()))
                out["gap"].append(norms.centring_gap(stream, eps=0.0).double())
    result = {name: torch.stack(values) for name, values in out.items() if values}
    result["sets"] = torch.stack(sets)                                   # (layers, n, d_ff) bool
    return result


def measure(key: str, root: Path, sentences: int | None = None, say=print) -> tuple[dict, dict]:
    model, all_ids, config = load_model(key, root)
    all_ids = all_ids[:sentences] if sentences else all_ids
    S, L = len(all_ids), config["layers"]
    per = []
    for s, ids in enumerate(all_ids):
        per.append(measure_sentence(key, model, ids, config))
        if (s + 1) % 16 == 0:
            say(f"  {key}: {s + 1}/{S} sentences")
    by_token = ("sets", "sink", "rho", "gap")
    arrays = {f"{key}_{name}": torch.stack([p[name] for p in per]) for name in per[0] if name not in by_token}
    arrays[f"{key}_sink"] = torch.cat([p["sink"] for p in per], dim=-1)   # (layers, h, rows t ≥ 1 of every sentence)
    if "rho" in per[0]:                                                   # (layers, every token of every sentence)
        arrays[f"{key}_rho"] = torch.cat([p["rho"] for p in per], dim=-1)
        arrays[f"{key}_gap"] = torch.cat([p["gap"] for p in per], dim=-1)
        arrays[f"{key}_first_mask"] = torch.cat([(torch.arange(len(ids)) == 0).double() for ids in all_ids])
    arrays[f"{key}_tokens"] = torch.tensor([float(len(ids)) for ids in all_ids], dtype=torch.float64)
    overlap = torch.zeros(S, S, L, dtype=torch.float64)
    for layer in range(L):
        for s in range(S):
            for t in range(s, S):
                value = fm.overlap_sums(per[s]["sets"][layer], per[t]["sets"][layer])
                overlap[s, t, layer] = overlap[t, s, layer] = value
    arrays[f"{key}_overlap"] = overlap
    return arrays, config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--models", default=",".join(fm.MODELS.values()))
    parser.add_argument("--sentences", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write data/ under this folder (default: --root)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    arrays, configs, seconds = {}, {}, {}
    for key in args.models.split(","):
        t = time.time()
        print(f"measuring {key} …", flush=True)
        got, configs[key] = measure(key, args.root, args.sentences)
        arrays.update(got)
        seconds[key] = round(time.time() - t, 1)
    from attnref.analysis import decoder_measure as dm
    from attnref.models import gemma3, smollm
    record = {
        "command": "make measure-ch10", "date": datetime.date.today().isoformat(),
        "rule": RULE, "curve_fractions": list(fm.CURVE_FRACTIONS), "models": configs,
        "model_names": {v: k for k, v in fm.MODELS.items()},
        "model_sha256": {"smollm2": dm.file_hash(smollm.model_path()), "gemma3": dm.file_hash(gemma3.model_path())},
        "source_sha256": fm.source_hash(args.root), "sources": list(fm.SOURCES),
        "seconds": seconds, "total_seconds": round(time.time() - start, 1),
        "machine": provenance.machine(), "python": platform.python_version(),
    }
    fm.save(args.out or args.root, arrays, record)
    print(f"wrote {fm.DATA}.npz/.json in {record['total_seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
