"""make measure: run SmolLM2-135M-Instruct (attnref's decoder) over the book's text set once and
store what chapter 6 needs (attnref.analysis.decoder_measure), with its provenance.

    .venv/bin/python tools/measure_decoder.py [--root .]

Writes data/smollm2-measurements.npz and .json; prints progress and the time it took.
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

from attnref.analysis import decoder_measure as dm  # noqa: E402
from attnref.analysis.semantic import PARAPHRASES  # noqa: E402
from attnref.analysis.texts import SENTENCES  # noqa: E402
from attnref.book import provenance  # noqa: E402
from attnref.models import smollm  # noqa: E402

LONG_TEXT_TOKENS = 160     # > d_k = 64: H7's rank bound can bind
REQUANT_SEED = 0           # the re-rounding noise of the quantisation sensitivity
HULL_SEED = 0              # C9's random-key baseline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=Path(__file__).resolve().parent.parent, type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()

    def say(text: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {text}", flush=True)

    say(f"reading {smollm.FILENAME} (package {smollm.PACKAGE})")
    model = smollm.load()
    tokenizer = smollm.load_tokenizer()
    token_ids = [tokenizer(s).input_ids for s in SENTENCES]
    say(f"{len(token_ids)} sentences, {sum(map(len, token_ids))} tokens")

    def progress(done: int, total: int) -> None:
        width = 30
        bar = "#" * (width * done // total) + "-" * (width - width * done // total)
        print(f"\r  sentences [{bar}] {done}/{total}", end="" if done < total else "\n", flush=True)

    states: list = []
    arrays = dm.measure_sentences(model, token_ids, progress, states=states)
    say("activations measured")
    arrays.update(dm.semantic_directions(states))
    del states
    arrays.update(dm.semantic_measure(model, [tokenizer(a).input_ids for a, _ in PARAPHRASES],
                                      [tokenizer(b).input_ids for _, b in PARAPHRASES],
                                      arrays["semantic_mean"], arrays["semantic_directions"]))
    say(f"A3's {len(PARAPHRASES)} paraphrase pairs measured")
    long_ids = [t for ids in token_ids for t in ids][:LONG_TEXT_TOKENS]
    arrays["long_text_sigma"] = dm.long_text_logit_spectra(model, long_ids)
    arrays.update(dm.long_text_hull(model, long_ids, seed=HULL_SEED))
    say("C9's hull of the long text's keys measured")
    arrays.update(dm.family_spectra(model))
    c = model.config
    say("weights measured")
    arrays.update(dm.requant_sensitivity(model, smollm.model_path(), token_ids, seed=REQUANT_SEED))
    say(f"re-rounded {dm.REQUANT_DRAWS} times, {dm.REQUANT_SENTENCES} sentences each")
    arrays["token_ids"] = torch.tensor([t for ids in token_ids for t in ids], dtype=torch.int64)
    arrays["sentence_lengths"] = torch.tensor([len(ids) for ids in token_ids], dtype=torch.int64)
    seconds = time.perf_counter() - start
    record = {
        "what": "attnref.analysis.decoder_measure on SmolLM2-135M-Instruct over attnref.analysis.texts.SENTENCES",
        "command": "make measure",
        "model_file": smollm.FILENAME, "model_package": f"{smollm.PACKAGE}=={smollm.VERSION}",
        "model_sha256": dm.file_hash(smollm.model_path()),
        "source_sha256": dm.source_hash(args.root), "sources": list(dm.SOURCES),
        "config": {"d": c.d, "h": c.h, "h_kv": c.h_kv, "d_k": c.d_k, "layers": len(model.layers),
                   "rope_base": c.rope_base, "eps": c.eps},
        "offsets": list(dm.OFFSETS), "long_text_tokens": len(long_ids),
        "semantic": {"pairs": len(PARAPHRASES), "directions_removed": int(arrays["semantic_directions"].shape[-2]),
                     "baseline": "mean and top principal directions of the text set's stream vectors "
                                 "(first tokens left out), per stage"},
        "hull": {"seed": HULL_SEED, "random_draws": dm.HULL_RANDOM_DRAWS,
                 "random_keys": "n standard normal keys in d_k dimensions, torch.Generator().manual_seed(seed)"},
        "requant": {"seed": REQUANT_SEED, "draws": dm.REQUANT_DRAWS, "sentences": dm.REQUANT_SENTENCES,
                    "noise": "each 4-bit weight + d_b·U(−1/2, 1/2), d_b its block's step in the file"},
        "torch": torch.__version__, "python": platform.python_version(), "threads": 1, "dtype": "float32",
        "machine": provenance.machine(),
        "date": datetime.date.today().isoformat(), "seconds": round(seconds, 1),
    }
    dm.save(args.root, arrays, record)
    say(f"wrote {dm.DATA}.npz and .json in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
