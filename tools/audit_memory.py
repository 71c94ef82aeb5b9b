"""Peak memory and time per block of ``attnref audit`` on a synthetic ~1 B-parameter checkpoint (issue 46, item 3).

::

    .venv/bin/python tools/audit_memory.py [--folder /tmp/attnref-synthetic] [--texts 16] [--out data/audit-memory.json]

1. writes two Llama-layout Hugging Face checkpoints (``config.json``, bfloat16 safetensors sharded
   with an index, a word-level ``tokenizer.json``) into ``--folder`` (outside the repository; never
   committed): the ~1 B model (24 blocks, d = 2048, 16 heads of 128, d_ff = 4096, vocabulary 32000,
   untied head: 1.14 B parameters, 2.3 GB) and the same with 6 blocks (depth independence);
2. runs, each in a fresh process, sampling ``/proc/self/status`` every 20 ms for the peak of VmRSS
   (and of its anonymous part, RssAnon; file pages of the memory map are RssFile):
   ``baseline`` (python, torch, transformers, attnref imported: the floor), ``audit`` (the audit on
   ``--texts`` of the book's sentences, block by block) and ``whole`` (every tensor of the
   checkpoint read and converted to float32, the compute precision: what a loader that holds the
   whole model needs before it runs anything);
3. writes the numbers, the machine's load and the extrapolation to a 7 B Llama (d = 4096, 32
   blocks, d_ff = 11008) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GB = 1024 ** 3

SIZES = {"d": 2048, "h": 16, "h_kv": 16, "d_ff": 4096, "vocab": 32000}
SEVEN_B = {"d": 4096, "h": 32, "h_kv": 32, "d_ff": 11008, "vocab": 32000, "layers": 32}


def block_parameters(s: dict) -> int:
    d_k = s["d"] // s["h"]
    return (2 * s["d"] * s["h"] * d_k + 2 * s["d"] * s["h_kv"] * d_k + 3 * s["d"] * s["d_ff"] + 2 * s["d"])


def parameters(s: dict, layers: int) -> int:
    return layers * block_parameters(s) + 2 * s["vocab"] * s["d"] + s["d"]


def make(folder: Path, layers: int) -> Path:
    """A seeded random Llama checkpoint in bfloat16, one shard per 4 blocks, with an index."""
    import torch
    from safetensors.torch import save_file

    sys.path.insert(0, str(ROOT / "tests"))
    path = folder / f"llama-{layers}x{SIZES['d']}"
    if (path / "model.safetensors.index.json").is_file():
        return path
    path.mkdir(parents=True, exist_ok=True)
    s, d_k = SIZES, SIZES["d"] // SIZES["h"]
    generator = torch.Generator().manual_seed(46)

    def rand(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)
    weight_map, shard, index = {}, {}, 0

    def flush():
        nonlocal shard, index
        if shard:
            name = f"model-{index:05d}.safetensors"
            save_file(shard, str(path / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
            shard, index = {}, index + 1
    shard["model.embed_tokens.weight"] = rand(s["vocab"], s["d"])
    for l in range(layers):
        p = f"model.layers.{l}."
        shard.update({p + "input_layernorm.weight": torch.ones(s["d"], dtype=torch.bfloat16),
                      p + "post_attention_layernorm.weight": torch.ones(s["d"], dtype=torch.bfloat16),
                      p + "self_attn.q_proj.weight": rand(s["h"] * d_k, s["d"]),
                      p + "self_attn.k_proj.weight": rand(s["h_kv"] * d_k, s["d"]),
                      p + "self_attn.v_proj.weight": rand(s["h_kv"] * d_k, s["d"]),
                      p + "self_attn.o_proj.weight": rand(s["d"], s["h"] * d_k),
                      p + "mlp.gate_proj.weight": rand(s["d_ff"], s["d"]),
                      p + "mlp.up_proj.weight": rand(s["d_ff"], s["d"]),
                      p + "mlp.down_proj.weight": rand(s["d"], s["d_ff"])})
        if l % 4 == 3:
            flush()
    shard["model.norm.weight"] = torch.ones(s["d"], dtype=torch.bfloat16)
    shard["lm_head.weight"] = rand(s["vocab"], s["d"])
    flush()
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s["d"],
        "intermediate_size": s["d_ff"], "num_hidden_layers": layers, "num_attention_heads": s["h"],
        "num_key_value_heads": s["h_kv"], "head_dim": d_k, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": s["vocab"], "tie_word_embeddings": False,
        "torch_dtype": "bfloat16"}))
    from test_audit_hf import _tokenizer
    _tokenizer(path, encoder=False)
    return path


class Peak:
    """The largest VmRSS and RssAnon of this process, sampled every 20 ms in a thread."""

    def __init__(self):
        self.rss = self.anon = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self):
        values = {}
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                values[key] = int(rest.split()[0]) * 1024
        self.rss = max(self.rss, values.get("VmRSS", 0))
        self.anon = max(self.anon, values.get("RssAnon", 0))

    def _run(self):
        while not self._stop:
            self.sample()
            time.sleep(0.02)

    def stop(self) -> dict:
        self._stop = True
        self._thread.join()
        self.sample()
        return {"peak_rss_gib": round(self.rss / GB, 3), "peak_anonymous_gib": round(self.anon / GB, 3)}


def child(mode: str, path: Path, texts: int) -> dict:
    """One measurement in this (fresh) process."""
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import attnref.audit  # noqa: F401
    from attnref.analysis.texts import SENTENCES
    peak = Peak()
    started = time.perf_counter()
    out: dict = {"mode": mode}
    if mode == "audit":
        import tempfile
        from attnref.audit.families import _hf
        tokenize = _hf.read_tokenizer(path)
        chosen = list(SENTENCES[:texts])
        lengths = [len(tokenize(t)) for t in chosen] + [min(256, len(tokenize(" ".join(chosen))))]
        out["tokens_including_the_long_text"] = sum(lengths)
        out["tokens_64_texts"] = sum(len(tokenize(t)) for t in SENTENCES) + min(256, len(tokenize(" ".join(SENTENCES))))
        out["lengths"] = lengths
        report = attnref.audit.audit(path, chosen, Path(tempfile.mkdtemp()) / "report")
        out["seconds"] = report["seconds"]
        out["median_seconds_per_block"] = report["timing"]["median_seconds_per_block"]
        out["tokens"] = report["texts"]["tokens"]
        out["verdicts"] = {k: v["verdict"] for k, v in report["rechecks"].items()}
    elif mode == "whole":
        from safetensors import safe_open
        held = {}
        for shard in sorted(path.glob("*.safetensors")):
            with safe_open(str(shard), framework="pt") as f:
                for name in f.keys():
                    held[name] = f.get_tensor(name).float()
        out["tensors"] = len(held)
        out["seconds"] = round(time.perf_counter() - started, 1)
    out.update(peak.stop())
    return out


def run_child(mode: str, path: Path, texts: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "MKL_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, __file__, "--child", mode, "--path", str(path), "--texts", str(texts)],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"{mode} on {path.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def activations_bytes(lengths: list[int], s: dict, layers: int) -> int:
    """What the audit keeps of its texts' pass (float32 runs: hidden states, queries, keys repeated
    per head, weights; float64 unit vectors and H^(0) of the rechecks' sums)."""
    d, h = s["d"], s["h"]
    per_text = [(layers + 1) * n * d * 4 + layers * (2 * n * d * 4 + h * n * n * 4) for n in lengths]
    units = sum(lengths[:-1]) * d * 8 * (layers + 1)
    return sum(per_text) + units


def derive(results: dict) -> None:
    """Expected peak (floor + one block + embedding rows + activations), the ratio, the 7 B extrapolation."""
    for key, entry in results["checkpoints"].items():
        layers = entry["layers"]
        lengths = entry["audit"]["lengths"]
        block_f32 = entry["block_parameters"] * 4
        rows = len(set(range(sum(lengths)))) * SIZES["d"] * 4          # at most one row per token
        act = activations_bytes(lengths, SIZES, layers)
        floor = entry["baseline"]["peak_rss_gib"]
        expected = (block_f32 + rows + act) / GB
        entry["expected_above_floor_gib"] = {"one_block_float32": round(block_f32 / GB, 3),
                                             "embedding_rows_at_most": round(rows / GB, 4),
                                             "activations": round(act / GB, 3), "total": round(expected, 3)}
        entry["audit_above_floor_gib"] = round(entry["audit"]["peak_rss_gib"] - floor, 3)
        entry["ratio_to_expected"] = round(entry["audit_above_floor_gib"] / expected, 2)
        entry["whole_over_audit"] = round(entry["whole"]["peak_rss_gib"] / entry["audit"]["peak_rss_gib"], 2)
    big, small = results["checkpoints"]["24"], results["checkpoints"]["6"]
    floor = big["baseline"]["peak_rss_gib"]
    slope = (big["audit"]["peak_rss_gib"] - small["audit"]["peak_rss_gib"]) / (24 - 6)
    fixed = big["audit_above_floor_gib"] - 24 * slope        # what does not grow with depth: one block and overheads
    ratio_block = block_parameters(SEVEN_B) / block_parameters(SIZES)
    tokens = big["audit"]["tokens_including_the_long_text"]
    extrapolation = {}
    for label, n in (("same texts", tokens), ("the book's 64 texts", big["audit"]["tokens_64_texts"])):
        per_block = slope * (SEVEN_B["d"] / SIZES["d"]) * (n / tokens)
        extrapolation[label] = {"tokens": n, "audit_peak_rss_gib": round(floor + fixed * ratio_block + per_block * SEVEN_B["layers"], 2)}
    results["extrapolation_7b"] = {
        "model": "Llama-2-7B sizes: d = 4096, 32 blocks, 32 heads, d_ff = 11008, vocabulary 32000",
        "parameters": parameters(SEVEN_B, SEVEN_B["layers"]),
        "rule": "floor + (peak above the floor at 24 blocks less 24 x the growth per block of depth) x (7B block "
                "parameters / 1B block parameters) + growth per block x (4096/2048) x (tokens ratio) x 32 blocks "
                "(conservative: the depth-independent part includes fixed overheads that do not grow with the block)",
        "growth_per_block_of_depth_gib": round(slope, 4), "depth_independent_part_gib": round(fixed, 3),
        **extrapolation,
        "whole_model_float32_gib": round(parameters(SEVEN_B, SEVEN_B["layers"]) * 4 / GB, 2),
        "whole_model_bfloat16_gib": round(parameters(SEVEN_B, SEVEN_B["layers"]) * 2 / GB, 2),
        "seconds_per_block_estimate": round(big["audit"]["median_seconds_per_block"] * ratio_block, 1),
        "goal_gib": 24}


def markdown(results: dict) -> str:
    """The table and the sentences of book/audit.md's memory section (a test holds the page to it)."""
    rows = ["| synthetic checkpoint (bfloat16, Llama layout) | parameters | files | audit: peak RSS | whole model "
            "in float32: peak RSS | expected above the floor (one block + rows + activations) | audit above the "
            "floor / expected |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for entry in results["checkpoints"].values():
        rows.append(f"| {entry['layers']} blocks, d = {entry['d']}, d_ff = {entry['d_ff']} | "
                    f"{entry['parameters'] / 1e9:.2f} B | {entry['file_gib']:.2f} GiB | "
                    f"{entry['audit']['peak_rss_gib']:.2f} GiB | {entry['whole']['peak_rss_gib']:.2f} GiB | "
                    f"{entry['expected_above_floor_gib']['total']:.2f} GiB | {entry['ratio_to_expected']:.2f} |")
    big, small = results["checkpoints"]["24"], results["checkpoints"]["6"]
    seven = results["extrapolation_7b"]
    load = results["machine"]["load_average_1_5_15_at_start"][0]
    book_texts = seven["the book's 64 texts"]
    text = (f"The floor — Python with torch, transformers and attnref imported, nothing read — is "
            f"{big['baseline']['peak_rss_gib']:.2f} GiB. On the 1.14 B-parameter checkpoint the audit's peak is "
            f"{big['audit']['peak_rss_gib']:.2f} GiB, {big['whole_over_audit']:.1f} times less than holding the model "
            f"in float32; above the floor it is {big['ratio_to_expected']:.2f} times the sum of one float32 block "
            f"({big['expected_above_floor_gib']['one_block_float32']:.2f} GiB), the embedding rows and the activations "
            f"of its {results['texts']} texts ({big['audit']['tokens_including_the_long_text']} tokens with C9's long "
            f"text). On the 6-block checkpoint, whose activations are small, the fixed part (the configuration and "
            f"tokenizer code, D1's attention block in float64) weighs more: {small['ratio_to_expected']:.2f} times. "
            f"Going from 6 to 24 blocks adds {1024 * seven['growth_per_block_of_depth_gib']:.0f} MiB per "
            f"block, the activations the audit keeps. A block took {big['audit']['median_seconds_per_block']:.1f} s "
            f"(median; the whole audit {big['audit']['seconds']:.0f} s) on one thread of a machine with 2 cores "
            f"under a load average of about {load:.0f} (other engineers' tests): a quiet machine is several "
            f"times faster.\n\n"
            f"Extrapolated to a 7 B Llama (d = 4096, 32 blocks, d_ff = 11008; 6.74 B parameters) by scaling the "
            f"depth-independent part with the block's size (4.8 times; conservative: it includes fixed overheads) "
            f"and the per-block growth with the width and the tokens: about "
            f"{seven['same texts']['audit_peak_rss_gib']:.1f} GiB on the same texts and "
            f"{book_texts['audit_peak_rss_gib']:.1f} GiB on the book's 64 sentences, within the "
            f"{seven['goal_gib']} GB of a machine without a GPU, where the whole model in float32 "
            f"({seven['whole_model_float32_gib']:.1f} GiB) does not fit; about "
            f"{seven['seconds_per_block_estimate']:.0f} s per block at the same load.")
    return "\n".join(rows) + "\n\n" + text + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/attnref-synthetic"))
    parser.add_argument("--texts", type=int, default=16)
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "audit-memory.json")
    parser.add_argument("--child", default=None)
    parser.add_argument("--path", type=Path, default=None)
    parser.add_argument("--reuse", type=Path, default=None,
                        help="a previous --out file: keep its measurements, re-measure only the audits, derive again")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.path, args.texts)))
        return 0
    load = os.getloadavg()
    results = {"machine": {"cores": os.cpu_count(), "load_average_1_5_15_at_start": [round(x, 2) for x in load],
                           "threads": int(os.environ.get("OMP_NUM_THREADS", "1"))},
               "texts": args.texts, "checkpoints": {}}
    previous = json.loads(args.reuse.read_text()) if args.reuse else None
    for layers in (6, 24):
        path = make(args.folder, layers)
        size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        entry = {"layers": layers, **SIZES, "parameters": parameters(SIZES, layers),
                 "block_parameters": block_parameters(SIZES), "file_gib": round(size / GB, 3)}
        for mode in ("baseline", "audit", "whole"):
            if previous is not None and mode != "audit":
                entry[mode] = previous["checkpoints"][str(layers)][mode]
                continue
            entry[mode] = run_child(mode, path, args.texts)
            print(layers, mode, entry[mode], flush=True)
        results["checkpoints"][str(layers)] = entry
    results["machine"]["load_average_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
    derive(results)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(markdown(results))
    print(json.dumps({k: {"ratio": v.get("ratio_to_expected"), "whole/audit": v.get("whole_over_audit")}
                      for k, v in results["checkpoints"].items()}))
    print(json.dumps(results["extrapolation_7b"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
