"""make experiments: train every variant of chapter 8 (E1–E5) and write data/experiments/e*.json.

Phase 1 trains each setting once per learning rate of the grid on the tuning seed and keeps the
best (held-out accuracy, then loss); phase 2 trains each setting with its learning rate on every
comparison seed. One thread per process, at most 2 worker processes; a progress bar per run.

    python tools/run_experiments.py [--jobs 2] [--only E1,E3] [--out data/experiments]

``--recheck``: re-train every comparison run of the stored experiments (``--only``; the learning
rates the stored files chose, no tuning) and write files of the same form to ``--out``. `make
experiments` runs it under torch's portable CPU kernels (``ATEN_CPU_CAPABILITY=default``, MKL at
SSE4.2) into ``data/experiments/portable/``: chapter 8 decides every verdict on both and shows that
the kernel path changes none.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from attnref.book import provenance  # noqa: E402
from attnref.training import experiments as ex  # noqa: E402
from attnref.training.train import attnref_source_hash, train, training_code_hash  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_slot = None


def _init(slots) -> None:
    global _slot
    with slots.get_lock():
        _slot = slots.value
        slots.value += 1


def _job(job):
    key, setting, seed, lr = job
    label = f"{setting.experiment} {setting.group} {setting.variant} seed {seed} lr {lr:g}"
    bar = tqdm(total=setting.run(seed, lr).steps, desc=label[:48].ljust(48), position=_slot or 0,
               leave=False, mininterval=2.0, file=sys.stderr, dynamic_ncols=True)

    def progress(step, total):
        bar.update(1)

    record = train(setting.run(seed, lr), progress=progress)
    bar.close()
    return key, record


def _cost(job) -> float:
    _, setting, _, _ = job
    return setting.spec.layers * (setting.n + 1 + 16) * (1 if setting.spec.body == "attention" else 0.3)


def _map(pool, jobs, title):
    jobs = sorted(jobs, key=_cost, reverse=True)
    out = {}
    start = time.perf_counter()
    iterator = pool.imap_unordered(_job, jobs) if pool else map(_job, jobs)
    for i, (key, record) in enumerate(iterator, 1):
        out[key] = record
        acc = next(iter(record["eval"].values()))["accuracy"]
        tqdm.write(f"[{title} {i}/{len(jobs)}] {' '.join(map(str, key))}: accuracy {acc:.3f}, "
                   f"{record['seconds']:.1f} s (elapsed {time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return out


def recheck(args) -> int:
    """Every comparison run of the stored experiments again, on this process's CPU kernel path."""
    from attnref.training import results

    start = time.perf_counter()
    chosen = [s.strip().upper() for s in args.only.split(",") if s.strip()] or ["E1", "E4", "E5"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(2, args.jobs))
    ctx = mp.get_context("fork")
    pool = ctx.Pool(jobs, initializer=_init, initargs=(ctx.Value("i", 0),)) if jobs > 1 else None
    print(f"recheck on torch's {torch.backends.cpu.get_cpu_capability()} kernels "
          f"(MKL_ENABLE_INSTRUCTIONS={os.environ.get('MKL_ENABLE_INSTRUCTIONS', 'unrestricted')})", flush=True)
    try:
        for e in chosen:
            stored = results.load(e, args.stored)
            settings = ex.settings()[e]
            lrs = {(s.variant, s.group): results.setting(stored, s.variant, s.group)["lr"] for s in settings}
            jobs_ = [((e, i, seed), s, seed, lrs[(s.variant, s.group)])
                     for i, s in enumerate(settings) for seed in stored["seeds"]]
            runs = _map(pool, jobs_, f"{e} recheck")
            data = {**{k: v for k, v in stored.items() if k != "settings"},
                    "recheck_of": "data/experiments", "machine": provenance.machine(),
                    "torch_version": torch.__version__, "python_version": platform.python_version(),
                    "settings": [{**{k: v for k, v in results.setting(stored, s.variant, s.group).items()
                                     if k != "runs"},
                                  "runs": [runs[(e, i, seed)] for seed in stored["seeds"]]}
                                 for i, s in enumerate(settings)]}
            path = out / f"{e.lower()}.json"
            path.write_text(json.dumps(data, indent=1) + "\n")
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    finally:
        if pool:
            pool.close()
            pool.join()
    print(f"recheck: {(time.perf_counter() - start) / 60:.1f} min")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated experiment IDs (default: all)")
    parser.add_argument("--out", default=str(ROOT / "data" / "experiments"))
    parser.add_argument("--steps", type=int, default=None, help="a smoke test: fewer steps (not the book's data)")
    parser.add_argument("--recheck", action="store_true",
                        help="re-train the comparison runs of the files in --stored with their learning rates")
    parser.add_argument("--stored", default=str(ROOT / "data" / "experiments"))
    args = parser.parse_args(argv)
    if args.recheck:
        return recheck(args)
    if args.steps is not None:
        ex.STEPS = args.steps
    jobs = max(1, min(2, args.jobs))
    all_settings = ex.settings()
    # cheapest first: a run cut short by a deadline still leaves the finished experiments' files
    chosen = [s.strip().upper() for s in args.only.split(",") if s.strip()] or ["E1", "E5", "E3", "E4", "E2"]
    settings = {e: all_settings[e] for e in chosen}
    start = time.perf_counter()
    hashes = {"training_code_hash": training_code_hash(), "attnref_source_hash": attnref_source_hash()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("fork")
    pool = ctx.Pool(jobs, initializer=_init, initargs=(ctx.Value("i", 0),)) if jobs > 1 else None
    count = 0
    try:
        for e, ss in settings.items():      # one experiment at a time: its file is written when done
            tuning_jobs = [((e, i, lr), s, ex.TUNING_SEED, lr) for i, s in enumerate(ss) for lr in ex.LR_GRID]
            tuned = _map(pool, tuning_jobs, f"{e} tuning")
            best = {}
            for i, s in enumerate(ss):
                scores = [(tuned[(e, i, lr)]["eval"][str(s.n)], lr) for lr in ex.LR_GRID]
                best[i] = max(scores, key=lambda t: (t[0]["accuracy"], -t[0]["loss"]))[1]
            comparison_jobs = [((e, i, seed), s, seed, best[i]) for i, s in enumerate(ss) for seed in ex.SEEDS]
            runs = _map(pool, comparison_jobs, f"{e} comparison")
            count += len(tuning_jobs) + len(comparison_jobs)
            data = {
                "experiment": e, **hashes, "torch_version": torch.__version__,
                "python_version": platform.python_version(), "seeds": list(ex.SEEDS),
                "machine": provenance.machine(),
                "tuning_seed": ex.TUNING_SEED, "lr_grid": list(ex.LR_GRID), "steps": ex.STEPS,
                "batch": ex.BATCH, "task": {"keys": ex.TASK.keys, "values": ex.TASK.values},
                "settings": [{
                    "variant": s.variant, "group": s.group, "n": s.n, "lr": best[i],
                    "tuning": [{"lr": lr, **tuned[(e, i, lr)]["eval"][str(s.n)]} for lr in ex.LR_GRID],
                    "runs": [runs[(e, i, seed)] for seed in ex.SEEDS],
                } for i, s in enumerate(ss)],
            }
            path = out / f"{e.lower()}.json"
            path.write_text(json.dumps(data, indent=1) + "\n")
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
                  f"({(time.perf_counter() - start) / 60:.1f} min so far)", flush=True)
    finally:
        if pool:
            pool.close()
            pool.join()
    total = time.perf_counter() - start
    print(f"make experiments: {count} runs in {total / 60:.1f} min "
          f"({jobs} worker process(es); load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
