"""make measure-ch10b: claim P1 on SmolLM2 and Gemma 3 — the logits of each model before and after a
random orthogonal change of its stream's basis compensated in every weight, in float64 and float32,
and with each planted mistake of attnref.analysis.basis.BUGS; stored with their provenance.

    .venv/bin/python tools/measure_ch10b.py [--root .] [--models smollm2,gemma3] [--sentences N] [--out DIR]

Writes data/ch10b-measurements.json. The sentences are the first of the book's text set, as token
ids stored by chapter 6 (data/<model>-measurements.npz); the change of basis is one Haar-random Q
per model from a fixed seed (SEEDS). tests/test_ch10b_checks.py re-measures a piece (two blocks,
one sentence) with measure_model and compares.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from attnref.analysis import basis  # noqa: E402
from attnref.book import provenance  # noqa: E402

#: One fixed seed per model for its Q (the stored numbers never depend on ATTNREF_SEED).
SEEDS = {"smollm2": 10_201, "gemma3": 10_202}
SENTENCES = 4


def stored_ids(root: Path, key: str) -> list[torch.Tensor]:
    """The token ids chapter 6 stored for SmolLM2 / Gemma 3 (no tokenizer needed)."""
    import numpy as np
    with np.load(root / "data" / f"{key}-measurements.npz") as stored:
        ids, lengths = stored["token_ids"], stored["sentence_lengths"]
    starts = [0, *np.cumsum(lengths).tolist()]
    return [torch.from_numpy(ids[starts[s]:starts[s + 1]]).long() for s in range(len(lengths))]


def load_model(key: str, layers: int | None = None):
    if key == "smollm2":
        from attnref.models import smollm
        return smollm.load(layers=layers), smollm.model_path()
    if key == "gemma3":
        from attnref.models import gemma3
        return gemma3.load(layers=layers), gemma3.model_path()
    raise ValueError(f"model must be smollm2 or gemma3, got {key!r}")


def _runners(key: str):
    if key == "smollm2":
        return basis.rotate_smollm, basis.smollm_logits, basis.rotated_smollm_logits
    return basis.rotate_gemma, basis.gemma_logits, basis.rotated_gemma_logits


def _compare(original, rotated_pair, Q) -> tuple[float, list[float]]:
    """(relative logit error, relative error of each block's stream H^l Q vs the rotated H^l)."""
    logits, hidden = original
    r_logits, r_hidden = rotated_pair
    return (basis.relative_error(r_logits, logits),
            [basis.relative_error(r, h @ Q) for h, r in zip(hidden, r_hidden)])


def measure_model(key: str, model32, ids: list[torch.Tensor], bugs=basis.BUGS, say=print) -> dict:
    """Every comparison of one model (float32 ``model32`` as loaded) on the sentences ``ids``."""
    rotate, run, run_rotated = _runners(key)
    d = model32.config.d
    generator = torch.Generator().manual_seed(SEEDS[key])
    Q64 = basis.random_orthogonal(d, generator)
    out = {"d": d, "layers": len(model32.layers), "sentences": len(ids),
           "tokens": [int(i.numel()) for i in ids], "orthogonality": float((Q64.T @ Q64 - torch.eye(d, dtype=torch.float64)).abs().max())}
    with torch.no_grad():
        # float32: the model as loaded, Q rounded to float32
        Q32 = Q64.float()
        rotated = rotate(model32, Q32)
        pairs = [_compare(run(model32, i), run_rotated(rotated, i), Q32) for i in ids]
        out["error32"] = [p[0] for p in pairs]
        out["block_error32"] = [max(p[1][l] for p in pairs) for l in range(len(pairs[0][1]))]
        del rotated
        say(f"  {key}: float32 done")
        model64 = model32.to(torch.float64)
        originals = [run(model64, i) for i in ids]
        rotated = rotate(model64, Q64)
        pairs = [_compare(o, run_rotated(rotated, i), Q64) for o, i in zip(originals, ids)]
        out["error64"] = [p[0] for p in pairs]
        out["block_error64"] = [max(p[1][l] for p in pairs) for l in range(len(pairs[0][1]))]
        out["logit_scale"] = [float(o[0].abs().max()) for o in originals]
        del rotated
        say(f"  {key}: float64 done")
        out["bugs"] = {}
        for bug in bugs:
            rotated = rotate(model64, Q64, bug=bug)
            pairs = [_compare(o, run_rotated(rotated, i), Q64) for o, i in zip(originals, ids)]
            out["bugs"][bug] = {"error64": [p[0] for p in pairs],
                                "block_error64": [max(p[1][l] for p in pairs) for l in range(len(pairs[0][1]))]}
            del rotated
            say(f"  {key}: planted '{bug}' done")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--sentences", type=int, default=SENTENCES)
    parser.add_argument("--out", type=Path, default=None, help="write data/ under this folder (default: --root)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from attnref.analysis import decoder_measure as dm
    start = time.time()
    record = {"command": "make measure-ch10b", "date": datetime.date.today().isoformat(),
              "seeds": SEEDS, "margin": basis.MARGIN, "bugs": list(basis.BUGS), "models": {}, "model_sha256": {},
              "seconds": {}}
    for key in args.models.split(","):
        t = time.time()
        print(f"measuring {key} …", flush=True)
        model, path = load_model(key)
        ids = stored_ids(args.root, key)[:args.sentences]
        record["models"][key] = measure_model(key, model, ids)
        record["model_sha256"][key] = dm.file_hash(path)
        record["seconds"][key] = round(time.time() - t, 1)
        del model
    record.update({"source_sha256": basis.source_hash(args.root), "sources": list(basis.SOURCES),
                   "total_seconds": round(time.time() - start, 1), "machine": provenance.machine(),
                   "torch": torch.__version__, "python": platform.python_version()})
    out = (args.out or args.root) / basis.DATA
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {basis.DATA} in {record['total_seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
