"""make experiments: train every variant of chapter 8's plan (E1–E7) and write data/experiments/e*.json.

The plan is data/experiments/plan.toml (committed before the runs; its sha256 goes into every
result file). Per experiment, phase 1 trains each setting once per learning rate of the plan's grid
on the tuning seed and keeps the best (held-out accuracy, then loss); a best value at an edge of the
grid widens it once (× 3 or ÷ 3) and the file records whether the choice is still at an edge.
Phase 2 trains each setting with its learning rate on every comparison seed: all the seeds of a
setting as one batched model (phase 1's grid too: one member per rate on the tuning seed) (attnref.training.batched: each seed with its lone run's initial
weights, data stream and optimiser state; ``--seed-batch K`` splits them into batches of K,
``--lone`` trains seed by seed with the lone loop that made the exploratory rounds). One thread per
process, at most 2 worker processes, one progress bar over all runs (weighted by each task's cost,
with the estimated time left).

    python tools/run_experiments.py [--jobs 2] [--only E1,E3] [--out data/experiments]
                                    [--device cpu|cuda] [--seed-batch K] [--lone]
                                    [--ray auto|local|ADDRESS]
    python tools/run_experiments.py --pilot          # calibration on the plan's pilot seeds

``--device cuda`` trains on the GPU (recorded in every run; an error if torch
sees none). ``--ray auto|ADDRESS`` submits one task per (setting, seed batch) to a Ray cluster
(``pip install '.[experiments]'``; ``local`` starts a local instance with ``--jobs`` CPUs) and
writes the same files as the local pool; every mode (text, pilot, recheck, robustness grid) runs
its tasks there. (Ray replaces the runner's own ``--shard i/k`` / ``--merge`` of earlier rounds.)

``--recheck``: re-train every comparison run of the stored experiments (``--only``; the learning
rates the stored files chose, no tuning) and write files of the same form to ``--out``. `make
experiments-recheck` runs it (every experiment) under torch's portable CPU kernels into data/experiments/portable/.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

from attnref.book import provenance  # noqa: E402
from attnref.training import batched  # noqa: E402
from attnref.training import experiments as ex  # noqa: E402
from attnref.training.train import attnref_source_hash, resolve_device, train, training_code_hash  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cpu"
RAY: str | None = None      # --ray: the Ray cluster's address ("auto", "local", host:port); None: the local pool
JOBS = 2                    # --jobs: local worker processes (with --ray: the CPUs of a "local" instance)
SEED_BATCH = 0              # --seed-batch: seeds per batched task (0: every seed of a setting in one task)
LONE = False                # --lone: the lone loop seed by seed (the loop that made the exploratory rounds)
# Fields of a result that depend on the process and the clock, not on the computation (ignored
# when a Ray run is compared with a local one).
VOLATILE = ("seconds", "cpu_seconds", "run_seconds", "machine")


def _execute(tasks: list, desc: str, bar=None) -> dict:
    """Every :class:`batched.Task`, on the local pool (``--jobs``) or Ray (``--ray``): ``{key: records}``."""
    return batched.run_tasks(tasks, workers=max(1, min(2, JOBS)) if not RAY else JOBS, ray_address=RAY,
                             device=DEVICE, desc=desc, progress=True if bar is None else bar)


def _chunks(seeds, size: int) -> list[tuple[int, ...]]:
    seeds = tuple(seeds)
    size = size if size > 0 else len(seeds)
    return [seeds[i:i + size] for i in range(0, len(seeds), size)]


def _seed_tasks(key, run_, seeds, plays=(), lone=None) -> list:
    """One task per seed batch of one setting (``--seed-batch``); lone: one task per seed."""
    lone = LONE if lone is None else lone
    return [batched.Task((key, chunk), run_, chunk, plays=tuple(plays), lone=lone)
            for chunk in _chunks(seeds, 1 if lone else SEED_BATCH)]


def _by_seed(out: dict) -> dict:
    """``{(key, seed): record}`` from run_tasks' ``{(key, seeds): records}``."""
    return {(key, seed): record for (key, chunk), records in out.items() for seed, record in zip(chunk, records)}


def _train_all(jobs, desc: str, workers: int = 0, lone: bool = True) -> dict:
    """Jobs ``(key, setting, seed, lr)`` (the lone loop unless ``lone`` is False: one task per seed),
    one progress bar with the time left; ``{key: record}``."""
    tasks = [batched.Task(key, setting.run(seed, lr), (seed,), lone=lone) for key, setting, seed, lr in jobs]
    return {key: records[0] for key, records in _execute(tasks, desc).items()}


def _trainer() -> dict:
    return {"trainer": "lone" if LONE else "batched", "batched_code_hash": batched.code_hash(),
            "seed_batch": SEED_BATCH}


def _selected(args) -> list[str]:
    chosen = [s.strip().upper() for s in args.only.split(",") if s.strip()]
    return chosen or list(ex.IDS)


def _header(e: str, plan: dict, plan_sha: str, plan_file: Path | None = None) -> dict:
    design = plan["design"]
    return {"experiment": e, "plan_sha256": plan_sha,
            "amendments_sha256": ex.amendments_hash(Path(plan_file or ex.PLAN).parent),
            "training_code_hash": training_code_hash(),
            "attnref_source_hash": attnref_source_hash(), "torch_version": torch.__version__,
            "python_version": platform.python_version(), "device": DEVICE,
            "machine": provenance.machine(), "seeds": list(design["comparison_seeds"]),
            "tuning_seed": design["tuning_seed"], "lr_grid": list(design["lr_grid"]),
            "batch": design["batch"], "task": dict(plan[e]["task"]), "delta": plan[e]["delta"],
            "baseline": plan[e]["baseline"]}


def _best(records: dict, n: int):
    return max(records.items(), key=lambda t: (t[1]["eval"][str(n)]["accuracy"], -t[1]["eval"][str(n)]["loss"]))[0]


def run(args) -> int:
    plan_file = Path(args.plan)
    plan = ex.load_amended_plan(plan_file)
    plan_sha = ex.plan_hash(plan_file)
    all_settings = ex.settings(plan, steps=args.steps)
    chosen = _selected(args)
    design = plan["design"]
    seeds, tuning_seed = design["comparison_seeds"], design["tuning_seed"]
    grid = sorted(design["lr_grid"])
    mine = {(e, j) for e in ex.IDS if e in all_settings for j in range(len(all_settings[e]))}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    mine_of = {e: [(j, s) for j, s in enumerate(all_settings[e]) if (e, j) in mine] for e in chosen}

    def tuning_tasks(e, ss, lrs):
        # a setting's learning-rate grid on the tuning seed: one batched model with a rate per member
        # (--lone: one lone run per rate)
        if LONE:
            return [batched.Task((e, j, lr), s.run(tuning_seed, lr), (tuning_seed,), lone=True)
                    for j, s in ss if s.lr is None for lr in lrs]
        return [batched.Task((e, j, tuple(lrs)), s.run(tuning_seed, lrs[0]), (tuning_seed,) * len(lrs), lrs=tuple(lrs))
                for j, s in ss if s.lr is None and lrs]

    def tuned_of(out):
        return {(e_, j, lr): record for (e_, j, key), records in out.items()
                for lr, record in zip(key if isinstance(key, tuple) else (key,), records)}

    def comparison_tasks(e, ss, best):
        return [t for j, s in ss for t in _seed_tasks((e, j), s.run(seeds[0], best.get(j, s.lr or grid[0])), seeds)]

    # one bar over every run of every experiment, weighted by each task's cost, with the time left
    total = sum(t.cost() for e in chosen for t in tuning_tasks(e, mine_of[e], grid) + comparison_tasks(e, mine_of[e], {}))
    bar = tqdm(total=round(total), desc="make experiments", unit="seed-step", unit_scale=True, file=sys.stderr,
               mininterval=2.0, dynamic_ncols=True, bar_format="{l_bar}{bar}| {percentage:3.0f}% [{elapsed}<{remaining} left]")
    count = 0
    try:
        for e in chosen:                  # one experiment at a time: its file is written when done
            ss = mine_of[e]
            if not ss:
                continue
            n_of = {j: s.n for j, s in ss}
            tuned = tuned_of(_execute(tuning_tasks(e, ss, grid), f"tune {e}", bar))
            count += len(tuned)
            best, edge, extra = {}, {}, {}
            for j, s in ss:                                    # a best value at an edge widens the grid once
                if s.lr is None:
                    choice = _best({lr: tuned[(e, j, lr)] for lr in grid}, s.n)
                    if choice in (grid[0], grid[-1]):
                        extra[j] = choice / 3 if choice == grid[0] else choice * 3
            widen = [batched.Task((e, j, extra[j]), s.run(tuning_seed, extra[j]), (tuning_seed,), lone=LONE)
                     for j, s in ss if j in extra]
            bar.total += round(sum(t.cost() for t in widen))
            tuned.update(tuned_of(_execute(widen, f"tune {e}", bar)))
            count += len(extra)
            for j, s in ss:
                if s.lr is not None:
                    best[j], edge[j] = s.lr, None
                    continue
                records = {lr: tuned[(e, j_, lr)] for (e_, j_, lr) in tuned if (e_, j_) == (e, j)}
                best[j] = _best(records, s.n)
                edge[j] = best[j] in (min(records), max(records))
            runs = {(e, j, seed): r for ((e_, j), seed), r in
                    _by_seed(_execute(comparison_tasks(e, ss, best), f"compare {e}", bar)).items()}
            count += len(runs)
            data = {**_header(e, plan, plan_sha, plan_file), **_trainer(), "settings": [{
                "variant": s.variant, "group": s.group, "n": s.n, "steps": s.steps, "lr": best[j],
                "lr_tuned": s.lr is None, "lr_at_edge": edge[j],
                "tuning": [{"lr": lr, **tuned[(e, j, lr)]["eval"][str(n_of[j])]}
                           for lr in sorted(lr for (e_, j_, lr) in tuned if (e_, j_) == (e, j))],
                "runs": [runs[(e, j, seed)] for seed in seeds],
            } for j, s in ss]}
            data["run_seconds"] = round(time.perf_counter() - start, 1)   # since this process began: cumulative over files
            path = out / f"{e.lower()}.json"
            path.write_text(json.dumps(data, indent=1) + "\n")
            tqdm.write(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
                       f"({(time.perf_counter() - start) / 60:.1f} min so far)", file=sys.stderr)
    finally:
        bar.close()
    total = time.perf_counter() - start
    where = f"Ray at {RAY}" if RAY else f"{max(1, min(2, args.jobs))} worker process(es)"
    print(f"make experiments: {count} runs in {total / 60:.1f} min on {DEVICE} "
          f"({where}; {'lone' if LONE else 'batched'}; load average {os.getloadavg()[0]:.1f})")
    return 0


def pilot(args) -> int:
    """The pilot: each experiment's baseline and treatment on the pilot seeds at the middle learning
    rate of the grid, with the held-out accuracy every 25 steps; writes pilot.json."""
    plan = ex.load_plan(args.plan)
    design = plan["design"]
    grid = sorted(design["lr_grid"])
    lr_mid = grid[len(grid) // 2]
    steps = args.steps or 300
    every = 25
    jobs = []
    for e, ss in ex.settings(plan, steps=steps).items():
        if e not in _selected(args):
            continue
        first = ss[0].group
        for s in ss:
            if s.group == first and s.variant in (plan[e]["baseline"], plan[e]["treatment"]):
                s = ex.Setting(**{**s.__dict__, "checkpoints": tuple(range(every, s.steps + 1, every))})
                for seed in design["pilot_seeds"]:
                    jobs.append(((e, s.variant, seed), s, seed, s.lr or lr_mid))
    start = time.perf_counter()
    runs = _train_all(jobs, "pilot", args.jobs)
    data = {"plan_draft_sha256": ex.plan_hash(args.plan), "training_code_hash": training_code_hash(),
            "machine": provenance.machine(), "lr": lr_mid, "steps": steps, "every": every,
            "seconds": round(time.perf_counter() - start, 1), "runs": [
                {"experiment": e, "variant": v, "seed": seed, "lr": runs[(e, v, seed)]["config"]["lr"],
                 "checkpoints": runs[(e, v, seed)].get("checkpoints", {}),
                 "eval": runs[(e, v, seed)]["eval"], "attention": runs[(e, v, seed)].get("attention"),
                 "seconds": runs[(e, v, seed)]["seconds"]}
                for (e, v, seed) in sorted(runs)]}
    path = Path(args.out) / "pilot.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {path} ({data['seconds'] / 60:.1f} min)")
    for e in ex.IDS:
        rows = [r for r in data["runs"] if r["experiment"] == e]
        if not rows:
            continue
        base = [r for r in rows if r["variant"] == plan[e]["baseline"]]
        treat = {r["seed"]: r for r in rows if r["variant"] == plan[e]["treatment"]}
        for step in sorted({int(k) for r in rows for k in r["checkpoints"]}):
            b = [r["checkpoints"][str(step)] for r in base]
            d = [treat[r["seed"]]["checkpoints"][str(step)] - r["checkpoints"][str(step)] for r in base]
            print(f"{e} step {step}: baseline {statistics.mean(b):.3f} "
                  f"[{min(b):.3f}, {max(b):.3f}], paired diff mean {statistics.mean(d):+.3f} "
                  f"sd {statistics.stdev(d):.3f}")
    return 0


def recheck(args) -> int:
    """Every comparison run of the stored experiments again, on this process's CPU kernel path."""
    from attnref.training import results

    start = time.perf_counter()
    plan = ex.load_amended_plan(args.plan)
    chosen = [s.strip().upper() for s in args.only.split(",") if s.strip()] or list(ex.settings(plan))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"recheck on torch's {torch.backends.cpu.get_cpu_capability()} kernels "
          f"(MKL_ENABLE_INSTRUCTIONS={os.environ.get('MKL_ENABLE_INSTRUCTIONS', 'unrestricted')})", flush=True)
    stored = {e: results.load(e, args.stored) for e in chosen}
    jobs_ = []
    for e in chosen:
        voting = grid_variants(plan, e) | set(plan.get("amendments", {}).get("robustness", {}).get("exempt", {}).get(e, []))
        for j, s in enumerate(ex.settings(plan)[e]):
            if s.variant not in voting:
                continue          # the decisions' runs only: the variants of the comparisons that vote
            if s.group in args.recheck_skip_groups.get(e, ()):
                continue          # a group left out of the recheck (stated on the page)
            lr = results.setting(stored[e], s.variant, s.group)["lr"]
            jobs_ += [((e, j, seed), s, seed, lr) for seed in stored[e]["seeds"]]
    for e in chosen:                  # one experiment at a time: its file is written when done
        runs = _train_all([j for j in jobs_ if j[0][0] == e], f"recheck {e}", args.jobs)
        settings = ex.settings(plan)[e]
        data = {**{k: v for k, v in stored[e].items() if k != "settings"},
                "recheck_of": "data/experiments", "machine": provenance.machine(),
                "torch_version": torch.__version__, "python_version": platform.python_version(),
                "settings": [{**{k: v for k, v in results.setting(stored[e], s.variant, s.group).items()
                                 if k != "runs"},
                              "runs": [runs[(e, j, seed)] for seed in stored[e]["seeds"]]}
                             for j, s in enumerate(settings) if (e, j, stored[e]["seeds"][0]) in runs]}
        path = out / f"{e.lower()}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    print(f"recheck: {len(jobs_)} runs in {(time.perf_counter() - start) / 60:.1f} min")
    return 0


def grid_variants(plan: dict, e: str) -> set[str]:
    """The variants of the robustness grid: every variant a voting comparison of ``e`` reads (plan
    amendment 1's ``decides``), those the grid names as ``extra``, less the ones it exempts."""
    amend = plan.get("amendments", {})
    grid = amend.get("robustness", {})
    names = set()
    for key in amend.get("decides", {}).get(e, []):
        for side in key.replace(":", " - ").replace(" / ", " - ").split(" - "):
            names.add(side.strip().partition("@")[0])
    names |= set(grid.get("extra", {}).get(e, []))
    names -= set(grid.get("exempt", {}).get(e, []))
    return {v.variant for v in ex.settings(plan)[e]} & names


def _decision_group(plan: dict, e: str, stored: dict) -> str | None:
    """E6 (an experiment with ``decide_min_accuracy``): the largest learning rate of its groups at
    which every variant's mean held-out accuracy reaches it (plan amendment 2); None if none does."""
    floor = plan[e].get("decide_min_accuracy")
    if floor is None:
        return None
    groups = list(dict.fromkeys(s["group"] for s in stored["settings"]))
    both = [g for g in groups if all(statistics.mean(r["eval"][str(s["n"])]["accuracy"] for r in s["runs"]) >= floor
                                     for s in stored["settings"] if s["group"] == g)]
    return max(both, key=lambda g: next(s["lr"] for s in stored["settings"] if s["group"] == g)) if both else None


def robust(args) -> int:
    """The robustness grid of plan amendment 2: for every variant of a voting comparison, on every
    comparison seed, the stored learning rate's neighbours (x lr_factors) at the plan's budget, and
    one run at the largest budget factor with checkpoints at the smaller ones (a constant learning
    rate: the first k steps of a longer run are the k-step run). Writes ``--out`` (robust/e*.json)."""
    from attnref.training import results

    start = time.perf_counter()
    plan_file = Path(args.plan)
    plan = ex.load_amended_plan(plan_file)
    grid = plan["amendments"]["robustness"]
    factors, budgets = list(grid["lr_factors"]), sorted(grid["budgets"])
    chosen = _selected(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stored = {e: results.load(e, args.stored) for e in chosen}
    jobs, layout = [], {}
    for e in chosen:
        names = grid_variants(plan, e)
        for j, s in enumerate(ex.settings(plan, steps=args.steps)[e]):
            if s.variant not in names or s.group in grid.get("exempt_groups", {}).get(e, []):
                continue
            lr = results.setting(stored[e], s.variant, s.group)["lr"]
            if s.lr is not None and _decision_group(plan, e, stored[e]) != s.group:
                continue          # E6: the grid at the learning rate that decides (amendment 2), budgets only
            points = [] if s.lr is not None else [(f"lr x {f:g}", lr * f, s) for f in factors]
            longest = budgets[-1]
            marks = tuple(sorted({s.steps * b for b in [1, *budgets[:-1]]}))
            long = ex.Setting(**{**s.__dict__, "steps": s.steps * longest, "checkpoints": marks})
            points.append((f"budget x {longest:g}", lr, long))
            layout[(e, j)] = [(name, point_lr, p.steps) for name, point_lr, p in points]
            jobs += [((e, j, name, seed), p, seed, point_lr) for name, point_lr, p in points
                     for seed in stored[e]["seeds"]]
    first = ("E1", "E3", "E6", "E7", "E4", "E2", "E5")   # the questions first; E2, E5 last (not established either way)
    order = sorted(chosen, key=lambda e: first.index(e) if e in first else len(first))
    for e in order:                   # each file is written when its experiment is done
        runs = _train_all([j for j in jobs if j[0][0] == e], f"robustness grid {e}", args.jobs)
        data = {**{k: v for k, v in stored[e].items() if k != "settings"}, "grid_of": "data/experiments",
                "lr_factors": factors, "budgets": budgets, "machine": provenance.machine(),
                "amendments_sha256": ex.amendments_hash(plan_file.parent), "settings": []}
        for j, s in enumerate(ex.settings(plan, steps=args.steps)[e]):
            if (e, j) not in layout:
                continue
            data["settings"].append({"variant": s.variant, "group": s.group, "n": s.n, "steps": s.steps,
                                     "lr": results.setting(stored[e], s.variant, s.group)["lr"], "points": [
                                         {"point": name, "lr": point_lr, "steps": steps,
                                          "runs": [runs[(e, j, name, seed)] for seed in stored[e]["seeds"]]}
                                         for name, point_lr, steps in layout[(e, j)]]})
        data["run_seconds"] = round(time.perf_counter() - start, 1)
        path = out / f"{e.lower()}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)
    print(f"robustness grid: {len(jobs)} runs in {(time.perf_counter() - start) / 60:.1f} min")
    return 0


TEXT_PLAN = ROOT / "data" / "experiments" / "text" / "plan.toml"


def anchor(args) -> int:
    """The text anchor (data/experiments/text/plan.toml, [anchor]): nanoGPT's CPU configuration
    trained once with attnref's layers and the chapter's loop; writes text/anchor.json."""
    from attnref.training import text
    from attnref.training.models import Spec

    plan_file = Path(args.text_plan)
    plan = ex.load_plan(plan_file)
    a = plan["anchor"]
    corpus = text.Corpus.load(plan["corpus"]["validation_plays"])
    run_ = text.TextRun(Spec(d=a["d"], h=a["h"], layers=a["layers"], d_ff=a["d_ff"]), context=a["context"],
                        batch=a["batch"], steps=args.steps or a["steps"], lr=a["lr"], seed=a["seed"],
                        eval_windows=a["eval_windows"], checkpoints=tuple(a["checkpoints"]))
    bar = tqdm(total=run_.steps, desc="text anchor", unit="step", file=sys.stderr, mininterval=5.0)
    record = text.train(run_, corpus, device=DEVICE, progress=lambda i, n: bar.update(1))
    bar.close()
    data = {"plan_sha256": ex.plan_hash(plan_file), "text_code_hash": text.code_hash(),
            "corpus_sha256": corpus.sha256, "train_characters": int(corpus.train.numel()),
            "validation_characters": int(corpus.validation.numel()), "vocab": corpus.vocab,
            "validation_plays": list(corpus.validation_plays), "torch_version": torch.__version__,
            "python_version": platform.python_version(), "device": DEVICE, "machine": provenance.machine(),
            "load_average": os.getloadavg()[0], "run": record}
    out = Path(args.out) / "anchor.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"text anchor: validation loss {record['val_loss']:.3f} nats/char after {run_.steps} steps, "
          f"{record['seconds'] / 60:.1f} min wall, {record['cpu_seconds'] / 60:.1f} CPU-min "
          f"({record['ms_per_step']:.0f} ms a step; load {os.getloadavg()[0]:.1f}); wrote {out}")
    return 0


TEXT_AMENDMENT = ROOT / "data" / "experiments" / "text" / "amendment-1.toml"
TEXT_GRID = ROOT / "data" / "experiments" / "text" / "amendment-2.toml"
_TEXT: dict = {}          # the corpus and settings, loaded once before the workers fork


def _text_header(plan_file: Path, amendment_file: Path, corpus) -> dict:
    from attnref.training import text

    return {"plan_sha256": ex.plan_hash(plan_file), "amendment_sha256": ex.plan_hash(amendment_file),
            "text_code_hash": text.code_hash(), "corpus_sha256": corpus.sha256,
            "unigram_entropy": text.unigram_entropy(corpus), "vocab": corpus.vocab,
            "torch_version": torch.__version__, "python_version": platform.python_version(), "device": DEVICE,
            "machine": provenance.machine(), "load_average_start": os.getloadavg()[0], **_trainer()}


def _text_train(jobs: list, desc: str, workers: int = 0) -> dict:
    """Train (setting, seed) jobs: each setting's seeds as batched tasks (``--seed-batch``; ``--lone``:
    the lone loop, one task per seed), on the local pool or Ray, one progress bar with the time left;
    ``{setting: {str(seed): record}}``."""
    plays = _TEXT["plays"]
    batched._CORPORA[tuple(plays)] = _TEXT["corpus"]        # loaded once; the forked workers inherit it
    seeds_of: dict = {}
    for name, seed in jobs:
        seeds_of.setdefault(name, []).append(seed)
    tasks = [t for name, seeds in seeds_of.items() for t in _seed_tasks(name, _TEXT["settings"][name], seeds, plays)]
    out: dict = {}
    for (name, seed), record in _by_seed(_execute(tasks, desc)).items():
        out.setdefault(name, {})[str(seed)] = record
    return {name: out[name] for name in seeds_of}


def text_comparisons(args) -> int:
    """The text comparisons of data/experiments/text/amendment-1.toml: ``--text-pilot`` trains the
    pilot (dot and relu_qkv on the pilot seeds) and fixes delta by the amendment's rule
    (text/pilot.json); ``--text`` trains every setting on the comparison seeds (text/comparisons.json)."""
    from dataclasses import replace

    from attnref.training import results, text

    plan_file, amendment_file = Path(args.text_plan), Path(args.text_amendment)
    plan, amendment = ex.load_plan(plan_file), ex.load_plan(amendment_file)
    corpus = text.Corpus.load(plan["corpus"]["validation_plays"])
    settings = text.text_settings(amendment)
    if args.steps:   # a smoke test, not the book's data
        settings = {n: replace(r, steps=args.steps, checkpoints=tuple(c for c in r.checkpoints if c < args.steps))
                    for n, r in settings.items()}
    _TEXT.update(corpus=corpus, settings=settings, plays=tuple(plan["corpus"]["validation_plays"]))
    design = amendment["design"]
    out_dir = Path(args.text_out)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if args.text_pilot:
        jobs = [(name, seed) for name in ("dot", "relu_qkv") for seed in design["pilot_seeds"]]
        runs = _text_train(jobs, "text pilot", args.jobs)
        diffs = [runs["dot"][str(s)]["val_loss"] - runs["relu_qkv"][str(s)]["val_loss"] for s in design["pilot_seeds"]]
        sd = statistics.stdev(diffs)
        detectable = results.detectable_effect(sd, len(design["comparison_seeds"]))
        delta = max(0.01, math.ceil(detectable / 0.005 - 1e-9) * 0.005)
        data = {**_text_header(plan_file, amendment_file, corpus), "runs": runs, "paired_differences": diffs,
                "sd": sd, "detectable_effect": detectable, "delta": delta,
                "run_seconds": round(time.perf_counter() - start, 1)}
        target = out_dir / "pilot.json"
        print(f"text pilot: sd of the paired differences {sd:.4f}, detectable {detectable:.4f} -> delta {delta:.3f}")
    else:
        names = list(_TEXT["settings"]) if not args.only else [n for n in _TEXT["settings"] if n in args.only.split(";")]
        jobs = [(name, seed) for name in names for seed in design["comparison_seeds"]]
        runs = _text_train(jobs, "text comparisons", args.jobs)
        data = {**_text_header(plan_file, amendment_file, corpus), "runs": runs,
                "run_seconds": round(time.perf_counter() - start, 1)}
        target = out_dir / "comparisons.json"
    target.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {target} in {data['run_seconds'] / 60:.1f} min (load {os.getloadavg()[0]:.1f})")
    return 0


def text_grid(args) -> int:
    """The learning-rate neighbours of the text decisions (data/experiments/text/amendment-2.toml):
    every setting the grid names, at amendment 1's learning rate times each factor, on the comparison
    seeds at amendment 1's budget; writes text/grid.json (runs keyed ``"<setting> @ lr x <factor>"``)."""
    from dataclasses import replace

    from attnref.training import text, text_results

    plan_file, amendment_file, grid_file = Path(args.text_plan), Path(args.text_amendment), Path(args.text_grid_amendment)
    plan, amendment, grid = ex.load_plan(plan_file), ex.load_plan(amendment_file), ex.load_plan(grid_file)["grid"]
    corpus = text.Corpus.load(plan["corpus"]["validation_plays"])
    base = text.text_settings(amendment)
    settings = {}
    for name in grid["settings"]:
        for factor in grid["lr_factors"]:
            run_ = replace(base[name], lr=base[name].lr * factor)
            if args.steps:   # a smoke test, not the book's data
                run_ = replace(run_, steps=args.steps, checkpoints=tuple(c for c in run_.checkpoints if c < args.steps))
            settings[text_results.grid_name(name, factor)] = run_
    _TEXT.update(corpus=corpus, settings=settings, plays=tuple(plan["corpus"]["validation_plays"]))
    start = time.perf_counter()
    jobs = [(name, seed) for name in settings for seed in amendment["design"]["comparison_seeds"]]
    runs = _text_train(jobs, "text learning-rate grid", args.jobs)
    data = {**_text_header(plan_file, amendment_file, corpus), "grid_amendment_sha256": ex.plan_hash(grid_file),
            "lr_factors": list(grid["lr_factors"]), "lr": {n: r.lr for n, r in settings.items()},
            "runs": runs, "run_seconds": round(time.perf_counter() - start, 1),
            "cpu_seconds": round(sum(r["cpu_seconds"] for s in runs.values() for r in s.values()), 1)}
    target = Path(args.text_out) / "grid.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {target}: {len(jobs)} runs in {data['run_seconds'] / 60:.1f} min, "
          f"{data['cpu_seconds'] / 60:.1f} CPU-min (load {os.getloadavg()[0]:.1f})")
    return 0


GOAL_SPEEDUP = 4          # issue 43 item 1: at least 4 x fewer CPU-seconds per run
WHY_BATCHING = ("A batch removes the lone loop's per-call overhead, not its arithmetic. torch.profiler of a batched "
                "step (E1 identity, S = 20) shows compute kernels on top (bmm 22 %, add 12 %, mul 8 %, div 8 %, "
                "where 6 % of self CPU time) and no vmap fallback; the lone step at E1's size is about 2.4 x the "
                "batched step's share of one member, at E4's n = 32 and on the text model the arithmetic "
                "dominates already in the lone loop. Measured on 2 shared cores under the stated load, which "
                "inflates compute-bound time more than overhead.")


def measure_batching(args) -> int:
    """CPU-seconds per run, the lone loop against one batched model of S seeds (S = 10, 20, 30), on two
    recall settings at their plan budgets (E1's identity at n = 8: most experiments' size; E4's dot at
    n = 32: the largest sequences) and the text model (amendment 1's
    configuration, ``--steps`` steps, default 200: the cost per step does not depend on the step count);
    ``time.process_time`` of the whole call (training and evaluations), one thread, this process only.
    Writes data/experiments/batching.json (``--out``)."""
    from dataclasses import replace

    from attnref.training import text

    torch.set_num_threads(1)
    sizes = [int(x) for x in args.batching_sizes.split(",")]
    lone_seeds = list(range(10_000, 10_000 + args.batching_lone))
    plan_settings = ex.settings(ex.load_amended_plan(args.plan))
    e1 = next(s for s in plan_settings["E1"] if s.variant == "identity")
    recall = next(s for s in plan_settings["E4"] if s.variant == "dot")
    recall_run = recall.run(seed=0, lr=3e-3)
    plan, amendment = ex.load_plan(args.text_plan), ex.load_plan(args.text_amendment)
    corpus = text.Corpus.load(plan["corpus"]["validation_plays"])
    text_steps = args.steps or 200
    text_run = replace(text.text_settings(amendment)["dot"], steps=text_steps, checkpoints=())
    models = {"recall E1": (e1.run(seed=0, lr=3e-3), lambda r: train(r), lambda r, seeds: batched.train_recall(r, seeds)),
              "recall E4": (recall_run, lambda r: train(r), lambda r, seeds: batched.train_recall(r, seeds)),
              "text": (text_run, lambda r: text.train(r, corpus), lambda r, seeds: batched.train_text(r, corpus, seeds))}
    rows, loads = [], []
    for name, (run_, lone, many) in models.items():
        lone(replace(run_, seed=lone_seeds[0], steps=2))                          # warm-up: imports, allocations
        per = []
        for seed in lone_seeds:
            loads.append(os.getloadavg()[0])
            t = time.process_time()
            lone(replace(run_, seed=seed))
            per.append(time.process_time() - t)
        lone_cpu = statistics.mean(per)
        for size in sizes:
            loads.append(os.getloadavg()[0])
            t = time.process_time()
            many(run_, list(range(20_000, 20_000 + size)))
            cpu = (time.process_time() - t) / size
            rows.append({"model": name, "seeds": size, "steps": run_.steps, "lone_cpu_seconds_per_run": round(lone_cpu, 3),
                         "lone_runs_measured": len(per), "batched_cpu_seconds_per_run": round(cpu, 3),
                         "speedup": round(lone_cpu / cpu, 2), "load_average": round(loads[-1], 2)})
            print(f"{name}: S = {size}: lone {lone_cpu:.2f} CPU-s a run, batched {cpu:.2f} -> {lone_cpu / cpu:.1f}x "
                  f"(load {loads[-1]:.1f})", flush=True)
    def describe(e, setting, r):
        return {"experiment": e, "variant": setting.variant, "group": setting.group, "d": r.spec.d, "h": r.spec.h,
                "layers": r.spec.layers, "n": r.n, "batch": r.batch, "steps": r.steps, "eval_size": r.eval_size,
                "eval_ns": list(r.eval_ns)}

    data = {"what": "CPU-seconds per run (time.process_time of the whole call: training and evaluations, one "
                    "thread), the lone loop (train.train / text.train, mean over lone_runs_measured seeds) against "
                    "one batched model of S seeds (attnref.training.batched), divided by S",
            "recall_settings": {"recall E1": describe("E1", e1, e1.run(seed=0, lr=3e-3)),
                                "recall E4": describe("E4", recall, recall_run)},
            "text_setting": {"source": "data/experiments/text/amendment-1.toml design, setting dot", "d": text_run.spec.d,
                             "h": text_run.spec.h, "layers": text_run.spec.layers, "context": text_run.context,
                             "batch": text_run.batch, "steps": text_run.steps, "eval_windows": text_run.eval_windows,
                             "note": "the cost per step does not depend on the step count: a 2,000-step run costs "
                                     "about 2000 / steps times these numbers"},
            "rows": rows, "goal_speedup": GOAL_SPEEDUP,
            "goal_met": {name: any(r["speedup"] >= GOAL_SPEEDUP for r in rows if r["model"] == name) for name in models},
            "why": WHY_BATCHING, "load_average_min": round(min(loads), 2), "load_average_max": round(max(loads), 2),
            "cpus": os.cpu_count(), "batched_code_hash": batched.code_hash(), "training_code_hash": training_code_hash(),
            "torch_version": torch.__version__, "python_version": platform.python_version(),
            "machine": provenance.machine(), "command": "python tools/run_experiments.py --measure-batching"}
    path = Path(args.out) / "batching.json" if args.out != str(ROOT / "data" / "experiments") else ROOT / "data" / "experiments" / "batching.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


def main(argv=None) -> int:
    global DEVICE, RAY, JOBS, SEED_BATCH, LONE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated experiment IDs (default: all)")
    parser.add_argument("--out", default=str(ROOT / "data" / "experiments"))
    parser.add_argument("--plan", default=str(ex.PLAN))
    parser.add_argument("--steps", type=int, default=None, help="a smoke test: fewer steps (not the book's data)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda: where to train (recorded)")
    parser.add_argument("--ray", default=None, metavar="auto|local|ADDRESS",
                        help="submit one task per (setting, seed batch) to a Ray cluster (pip install '.[experiments]'); "
                             "'local' starts a local instance with --jobs CPUs; without it a local process pool trains")
    parser.add_argument("--seed-batch", type=int, default=0,
                        help="seeds per batched model (default 0: every seed of a setting in one batch)")
    parser.add_argument("--lone", action="store_true",
                        help="train seed by seed with the lone loop (the loop that made the exploratory rounds) "
                             "instead of one batched model per setting")
    parser.add_argument("--measure-batching", action="store_true",
                        help="CPU-seconds per run, lone against batched (writes --out/batching.json)")
    parser.add_argument("--batching-sizes", default="10,20,30", help="the seed counts S of --measure-batching")
    parser.add_argument("--batching-lone", type=int, default=3, help="lone runs measured per model")
    parser.add_argument("--pilot", action="store_true", help="the calibration pilot on the plan's pilot seeds")
    parser.add_argument("--recheck", action="store_true",
                        help="re-train the comparison runs of the files in --stored with their learning rates")
    parser.add_argument("--stored", default=str(ROOT / "data" / "experiments"))
    parser.add_argument("--recheck-skip", default="E2:depth 4,E2:depth 8",
                        help="experiment:group pairs the recheck leaves out (default: E2's depths 4 and 8, budget); '' for none")
    parser.add_argument("--anchor", action="store_true", help="the text anchor run (data/experiments/text/plan.toml)")
    parser.add_argument("--text-plan", default=str(TEXT_PLAN))
    parser.add_argument("--text-amendment", default=str(TEXT_AMENDMENT))
    parser.add_argument("--text", action="store_true",
                        help="the text comparisons of data/experiments/text/amendment-1.toml (writes --out/comparisons.json)")
    parser.add_argument("--text-out", default=str(TEXT_PLAN.parent), help="where --text and --text-pilot write")
    parser.add_argument("--text-pilot", action="store_true", help="the text pilot that fixes delta (writes --out/pilot.json)")
    parser.add_argument("--text-grid", action="store_true",
                        help="the learning-rate neighbours of the text decisions (text/amendment-2.toml; writes --text-out/grid.json)")
    parser.add_argument("--text-grid-amendment", default=str(TEXT_GRID))
    parser.add_argument("--robust", action="store_true",
                        help="the robustness grid of the plan's amendment 2 around the stored choices (writes --out)")
    args = parser.parse_args(argv)
    args.recheck_skip_groups = {}
    for pair in filter(None, (p.strip() for p in args.recheck_skip.split(","))):
        e, _, group = pair.partition(":")
        args.recheck_skip_groups.setdefault(e.strip().upper(), set()).add(group.strip())
    DEVICE = resolve_device(args.device).type if args.device else "cpu"
    RAY, JOBS, SEED_BATCH, LONE = args.ray, max(1, args.jobs), max(0, args.seed_batch), args.lone
    if RAY:
        ray = batched.ray_module()                  # a clear error naming the extra when Ray is missing
        if __name__ != "__main__":                  # imported (a test): ship this module's functions by value
            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    if args.measure_batching:
        return measure_batching(args)
    if args.pilot:
        return pilot(args)
    if args.recheck:
        return recheck(args)
    if args.robust:
        return robust(args)
    if args.anchor:
        return anchor(args)
    if args.text_grid:
        return text_grid(args)
    if args.text or args.text_pilot:
        return text_comparisons(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
