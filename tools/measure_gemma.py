"""make measure-gemma: run Gemma 3 270M (attnref.models.gemma3) over the book's text set once and
store what chapter 6c needs (attnref.analysis.qknorm_model), with its provenance; beside it,
SmolLM2's largest logits on the same sentences (G3's comparison).

    .venv/bin/python tools/measure_gemma.py [--root .]

Writes data/gemma3-measurements.npz and .json; prints progress and the time it took.
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

from attnref.analysis import qknorm_model as qm  # noqa: E402
from attnref.analysis.texts import SENTENCES  # noqa: E402
from attnref.book import provenance  # noqa: E402
from attnref.models import gemma3  # noqa: E402

LONG_TEXT_TOKENS = 1024     # at most; > the window of 512: G4 needs rows whose window binds
HULL_TEXT_TOKENS = 160      # G1's count on the length chapter 6b counts SmolLM2's keys on
FUSED_TEXT_TOKENS = 64      # G2's check (one d × d fused matrix per block and head)


def long_text(token_ids: list[list[int]], tokens: int) -> list[int]:
    """The sentences run together once (one BOS at the start), cut at ``tokens`` (no sentence is
    repeated: a copy would invite the model to look back at it)."""
    bos = token_ids[0][0]
    body = [t for ids in token_ids for t in (ids[1:] if ids and ids[0] == bos else ids)]
    text = [bos] + body
    if len(text) <= 512 + 64:
        raise SystemExit(f"measure_gemma: the text set gives {len(text)} tokens; G4 needs well over 512")
    return text[:tokens]


def smollm_max_logits(root: Path) -> torch.Tensor:
    """SmolLM2's largest |score| per sentence, block and head (its token ids as chapter 6b stored them)."""
    import numpy as np

    from attnref.analysis import decoder_measure as dm
    from attnref.models import smollm
    with np.load((root / dm.DATA).with_suffix(".npz")) as stored:      # the token ids only: no code hash needed
        arrays = {name: torch.from_numpy(stored[name]) for name in ("token_ids", "sentence_lengths")}
    lengths = arrays["sentence_lengths"].tolist()
    starts = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    model = smollm.load()
    c = model.config
    out = torch.zeros(len(lengths), len(model.layers), c.h, dtype=torch.float64)
    for s in range(len(lengths)):
        ids = arrays["token_ids"][starts[s]:starts[s + 1]]
        with torch.no_grad():
            result = smollm.forward(model, ids, logits=False)
        n = ids.numel()
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        for l, block in enumerate(result.blocks):
            trace = block.trace.attention.trace
            k = trace.rotated_key.double().repeat_interleave(c.h // c.h_kv, 0)
            scores = trace.rotated_query.double() @ k.transpose(-2, -1) / c.d_k ** 0.5
            out[s, l] = scores.abs().masked_fill(~causal, 0).amax((-1, -2))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=Path(__file__).resolve().parent.parent, type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()

    def say(text: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {text}", flush=True)

    say(f"reading {gemma3.FILENAME} (package {gemma3.PACKAGE})")
    path = gemma3.model_path()
    model = gemma3.load()
    load_seconds = time.perf_counter() - start
    say("model read; building the tokenizer from the GGUF file")
    tokenizer = gemma3.load_tokenizer()
    token_ids = [tokenizer(s).input_ids for s in SENTENCES]
    say(f"{len(token_ids)} sentences, {sum(map(len, token_ids))} tokens")

    def progress(done: int, total: int) -> None:
        width = 30
        bar = "#" * (width * done // total) + "-" * (width - width * done // total)
        print(f"\r  sentences [{bar}] {done}/{total}", end="" if done < total else "\n", flush=True)

    measure_start = time.perf_counter()
    arrays = qm.measure_sentences(model, token_ids, progress)
    say("sentences measured (G3, C3's premise, A1)")
    arrays.update(qm.logit_bounds(model))
    text = long_text(token_ids, LONG_TEXT_TOKENS)
    ids = torch.tensor(text, dtype=torch.int64)
    with torch.no_grad():
        out = gemma3.forward(model, ids, logits=False)
    arrays.update(qm.distance_mass(model, ids, out=out))
    say(f"G4 on a {len(text)}-token text")
    arrays.update({f"long_{k}": v for k, v in qm.selectability(model, ids, out=out).items()})
    del out
    arrays.update(qm.selectability(model, ids[:HULL_TEXT_TOKENS]))
    say("G1 measured")
    arrays.update(qm.fused_form(model, ids[:FUSED_TEXT_TOKENS]))
    say("G2 measured")
    measure_seconds = time.perf_counter() - measure_start
    torch.save(arrays, gemma3.cache_dir() / "gemma3-measurements.partial.pt")   # not lost if SmolLM2 fails
    arrays["smollm_max_logit"] = smollm_max_logits(args.root)
    say("SmolLM2's largest logits measured")
    arrays["token_ids"] = torch.tensor([t for s in token_ids for t in s], dtype=torch.int64)
    arrays["sentence_lengths"] = torch.tensor([len(s) for s in token_ids], dtype=torch.int64)
    arrays["long_text_ids"] = ids
    seconds = time.perf_counter() - start
    c = model.config
    record = {
        "what": "attnref.analysis.qknorm_model on Gemma 3 270M over attnref.analysis.texts.SENTENCES",
        "command": "make measure-gemma",
        "model_file": gemma3.FILENAME, "model_package": f"{gemma3.PACKAGE}=={gemma3.VERSION}",
        "model_sha256": qm_file_hash(path),
        "source_sha256": qm.source_hash(args.root), "sources": list(qm.SOURCES),
        "config": {"d": c.d, "h": c.h, "h_kv": c.h_kv, "d_k": c.d_k, "d_ff": c.d_ff, "layers": len(model.layers),
                   "layer_types": list(c.layer_types), "window": c.window, "rope_local": c.rope_local,
                   "rope_global": c.rope_global, "scale": c.scale, "eps": c.eps},
        "long_text_tokens": len(text), "hull_text_tokens": HULL_TEXT_TOKENS, "fused_text_tokens": FUSED_TEXT_TOKENS,
        "distance_edges": list(qm.DISTANCE_EDGES),
        "torch": torch.__version__, "python": platform.python_version(), "threads": 1, "dtype": "float32",
        "machine": provenance.machine(), "date": datetime.date.today().isoformat(),
        "seconds": round(seconds, 1), "load_seconds": round(load_seconds, 1),
        "measure_seconds": round(measure_seconds, 1),
    }
    qm.save(args.root, arrays, record)
    say(f"wrote {qm.DATA}.npz and .json in {seconds:.0f} s")
    return 0


def qm_file_hash(path: Path) -> str:
    return gemma3._sha256(path)


if __name__ == "__main__":
    sys.exit(main())
