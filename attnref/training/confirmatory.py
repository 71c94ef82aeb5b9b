r"""The confirmatory round's first stages for the synthetic plan (``data/experiments/confirmatory/plan.toml``):
learning-rate tuning on the tuning seed, the pilot on the pilot seeds, and the seed count the plan's
seed rule derives from the pilot (:func:`attnref.training.confirm.seeds_for`).

``python -m attnref.training.confirmatory tune`` writes ``confirmatory/tuning.json``,
``… pilot`` writes ``confirmatory/pilot.json`` (at the tuned rates), ``… seeds`` writes
``confirmatory/seeds.json``. Every file stores the plan's sha256 and the training code's hash; a
stage refuses to start on a file made under another plan. Runs are the chapter's lone runs
(:func:`attnref.training.train.train`), so each is exactly the run a batched trainer must reproduce.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "data" / "experiments" / "confirmatory" / "plan.toml"
# ATTNREF_CONFIRM_OUT / ATTNREF_CONFIRM_STEPS: a smoke test's output folder and step budget
DIRECTORY = Path(os.environ.get("ATTNREF_CONFIRM_OUT") or PLAN.parent)
STEPS = int(os.environ["ATTNREF_CONFIRM_STEPS"]) if os.environ.get("ATTNREF_CONFIRM_STEPS") else None
CHEAP_FIRST = os.environ.get("ATTNREF_CONFIRM_CHEAP_FIRST") == "1"


def _plan():
    from attnref.training import experiments as ex

    return ex.load_amended_plan(PLAN), ex.plan_hash(PLAN)


def _header(kind: str) -> dict:
    from attnref.book import provenance
    from attnref.training.train import training_code_hash

    _, sha = _plan()
    return {"stage": kind, "plan": str(PLAN.relative_to(ROOT)), "plan_sha256": sha, "steps_override": STEPS,
            "training_code_hash": training_code_hash(), "machine": provenance.machine()}


def _job(job):
    from attnref.training.train import train

    key, setting, seed, lr = job
    return key, train(setting.run(seed, lr))


def _train(jobs: list, workers: int) -> dict:
    out = {}
    done = 0
    if workers > 1:
        with mp.get_context("fork").Pool(workers) as pool:
            for key, record in pool.imap_unordered(_job, jobs):
                out[key] = record
                done += 1
                if done % 10 == 0 or done == len(jobs):
                    print(f"  {done}/{len(jobs)} runs", file=sys.stderr, flush=True)
    else:
        for job in jobs:
            key, record = _job(job)
            out[key] = record
    return out


def _settings():
    from attnref.training import experiments as ex

    plan, _ = _plan()
    return plan, ex.settings(plan, steps=STEPS)


def _key(setting) -> str:
    return f"{setting.experiment} | {setting.group} | {setting.variant}"


def _best(records: dict, n: int) -> float:
    """The plan's tuning rule: the highest held-out accuracy at B, ties broken by the lower loss."""
    return max(records, key=lambda lr: (records[lr]["eval"][str(n)]["accuracy"], -records[lr]["eval"][str(n)]["loss"]))


def tune(workers: int = 2) -> dict:
    """Stage 1: every tuned setting lone on the tuning seed at every rate of lr_grid (an edge choice
    widens the grid once, × 3 beyond the edge); writes tuning.json."""
    plan, found = _settings()
    design = plan["design"]
    seed, grid = design["tuning_seed"], sorted(design["lr_grid"])
    tuned = [s for e in found for s in found[e] if s.lr is None]
    start = time.process_time(), time.perf_counter()
    records = _train([((_key(s), lr), s, seed, lr) for s in tuned for lr in grid], workers)
    extra = []
    for s in tuned:
        choice = _best({lr: records[(_key(s), lr)] for lr in grid}, s.n)
        if choice in (grid[0], grid[-1]):
            beyond = choice / 3 if choice == grid[0] else choice * 3
            extra.append(((_key(s), beyond), s, seed, beyond))
    records.update(_train(extra, workers))
    out = {**_header("tuning"), "tuning_seed": seed, "lr_grid": grid, "settings": {}}
    for s in tuned:
        mine = {lr: r for (k, lr), r in records.items() if k == _key(s)}
        best = _best(mine, s.n)
        out["settings"][_key(s)] = {
            "experiment": s.experiment, "group": s.group, "variant": s.variant, "n": s.n, "steps": s.steps,
            "lr": best, "lr_at_edge": best in (min(mine), max(mine)),
            "tuning": [{"lr": lr, **mine[lr]["eval"][str(s.n)], "cpu_seconds": mine[lr]["cpu_seconds"]}
                       for lr in sorted(mine)]}
    out["runs"] = len(records)
    out["cpu_seconds"] = round(sum(r["cpu_seconds"] for r in records.values()), 1)
    out["wall_seconds"] = round(time.perf_counter() - start[1], 1)
    (DIRECTORY / "tuning.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def load(name: str) -> dict:
    """A stage's file, refused if it was made under another plan or training code."""
    from attnref.training.train import training_code_hash

    path = DIRECTORY / name
    data = json.loads(path.read_text())
    _, sha = _plan()
    if data.get("plan_sha256") != sha or data.get("training_code_hash") != training_code_hash():
        raise RuntimeError(f"{path} was made under another plan or training code: run its stage again")
    return data


def _side(text: str) -> tuple[str, int | None]:
    variant, _, at = text.strip().partition("@")
    return variant.strip(), (int(at) if at and not at.endswith("x") else None)


def pilot(workers: int = 2) -> dict:
    """Stage 2: both settings of every pilot pair on the pilot seeds, at the tuned rates (E6: its
    group's fixed rate); writes pilot.json with each pair's paired differences."""
    plan, found = _settings()
    tuning = load("tuning.json")["settings"]
    seeds = plan["design"]["pilot_seeds"]
    jobs, wanted = [], {}
    for pair in plan["pilot"]["pairs"]:
        for text in pair["key"].split(" - "):
            variant, _ = _side(text)
            s = next(x for x in found[pair["experiment"]] if x.variant == variant and x.group == pair["group"])
            lr = s.lr if s.lr is not None else tuning[_key(s)]["lr"]
            wanted[_key(s)] = (s, lr)
    from attnref.training import batched

    start = time.perf_counter()
    tasks = [batched.Task(key=k, run=s.run(seeds[0], lr), seeds=tuple(seeds)) for k, (s, lr) in wanted.items()]
    done = batched.run_tasks(tasks, workers=workers, progress=False)     # one batched model per setting
    records = {(k, seed): r for k, rs in done.items() for seed, r in zip(seeds, rs)}
    out = {**_header("pilot"), "tuning_sha256": _sha(DIRECTORY / "tuning.json"), "pilot_seeds": seeds,
           "batched_code_hash": batched.code_hash(),
           "settings": {k: {"lr": lr, "runs": [records[(k, seed)] for seed in seeds]} for k, (s, lr) in wanted.items()},
           "pairs": []}
    for pair in plan["pilot"]["pairs"]:
        sides = []
        for text in pair["key"].split(" - "):
            variant, n = _side(text)
            s = next(x for x in found[pair["experiment"]] if x.variant == variant and x.group == pair["group"])
            sides.append([r["eval"][str(n or s.n)]["accuracy"] for r in out["settings"][_key(s)]["runs"]])
        out["pairs"].append({**pair, "differences": [a - b for a, b in zip(*sides)]})
    out["runs"] = len(records)
    out["cpu_seconds"] = round(sum(r["cpu_seconds"] for r in records.values()), 1)
    out["wall_seconds"] = round(time.perf_counter() - start, 1)
    (DIRECTORY / "pilot.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def seeds() -> dict:
    """Stage 3: the plan's seed rule on pilot.json; writes seeds.json (S and every experiment's δ)."""
    from attnref.training import confirm

    plan, _ = _plan()
    design = plan["design"]
    data = load("pilot.json")
    cap, delta, level = design["max_seeds"], design["delta"], design["level"]
    rows, deltas = [], {}
    for pair in data["pairs"]:
        d = pair["differences"]
        mean = sum(d) / len(d)
        sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
        if sd > 0:
            upper = confirm.sd_upper_limit(sd, len(d) - 1, 0.8)
            needed, capped = confirm.seeds_needed(upper, delta, 0.8, level, max_seeds=1000)
        else:
            upper, needed, capped = 0.0, 2, False
        own = delta if needed <= cap else max(delta, confirm.delta_for(upper, cap, 0.8, level, step=0.005))
        deltas[pair["experiment"]] = max(deltas.get(pair["experiment"], delta), own)
        rows.append({**{k: pair[k] for k in ("experiment", "group", "key")}, "mean": mean, "sd": sd,
                     "sd_upper_80": upper, "seeds_needed": needed, "beyond_1000": capped, "delta": own})
    S = max(min(r["seeds_needed"], cap) for r in rows)
    for r in rows:                                   # the characteristic the chosen design has at each pair's sd_upper
        if r["sd_upper_80"] > 0:
            oc = confirm.operating_characteristic(2 * r["delta"], r["sd_upper_80"], S, r["delta"], level)
            null = confirm.operating_characteristic(0.0, r["sd_upper_80"], S, r["delta"], level)
            r["p_better_at_2delta"], r["p_no_gain_at_0"] = oc.better, null.no_gain
    out = {**_header("seeds"), "pilot_sha256": _sha(DIRECTORY / "pilot.json"), "rule": design["seed_rule"],
           "S": S, "comparison_seeds": design["comparison_seeds"][:S],
           "delta": {e: deltas.get(e, delta) for e in plan if e.startswith("E") and e[1:].isdigit()},
           "pairs": rows}
    (DIRECTORY / "seeds.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


# Stages 3-4: the comparisons and the shared-rate grid, one batched model per setting, resumable ----------

def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_").lower()


def _current(path: Path, header: dict) -> bool:
    """Whether ``path`` exists and was made under ``header``'s plan, code, seeds, rate and steps."""
    if not path.exists():
        return False
    try:
        stored = json.loads(path.read_text())
    except ValueError:
        return False
    return all(stored.get(k) == v for k, v in header.items())


def _setting_tasks(stage: str, rate_of, steps_factor: int, seeds: list[int], only: set | None = None):
    """(path, header, Task) for every setting of the plan at the rates ``rate_of(setting)`` gives."""
    from dataclasses import replace

    from attnref.training import batched
    from attnref.training.train import training_code_hash

    plan, found = _settings()
    _, sha = _plan()
    out = []
    for e, items in found.items():
        for s in items:
            for lr in rate_of(s):
                steps = s.steps * steps_factor
                marks = tuple(sorted({*s.checkpoints, *([s.steps] if steps_factor > 1 else [])}))
                run = replace(s.run(seeds[0], lr), steps=steps, checkpoints=marks)
                name = f"{e} | {s.group} | {s.variant}" + (f" @ lr {lr:g}" if stage == "grid" else "")
                if only is not None and name not in only:
                    continue
                header = {"stage": stage, "setting": name, "plan_sha256": sha, "training_code_hash": training_code_hash(),
                          "seeds": list(seeds), "lr": lr, "steps": steps, "checkpoints": list(marks)}
                out.append((DIRECTORY / stage / f"{_slug(name)}.json", header, batched.Task(key=name, run=run, seeds=tuple(seeds))))
    return out


def _run_stage(items, workers: int) -> int:
    """Train every item whose file is missing or stale; write each file as its batch finishes."""
    from attnref.book import provenance
    from attnref.training import batched

    todo = [(path, header, task) for path, header, task in items if not _current(path, header)]
    print(f"{len(items) - len(todo)} of {len(items)} settings current; training {len(todo)}", file=sys.stderr, flush=True)
    if not todo:
        return 0
    by_key = {task.key: (path, header) for path, header, task in todo}
    for path, _, _ in todo:
        path.parent.mkdir(parents=True, exist_ok=True)
    import multiprocessing as mp

    def write(key, records):
        path, header = by_key[key]
        data = {**header, "batched_code_hash": batched.code_hash(), "machine": provenance.machine(),
                "cpu_seconds": round(sum(r["cpu_seconds"] for r in records), 2), "runs": records}
        path.write_text(json.dumps(data, indent=1) + "\n")

    # the longest first (the pool's workers then end together); CHEAP_FIRST: the most settings
    # finished soonest (a session that must stop at a fixed time commits more complete files)
    tasks = sorted((t for _, _, t in todo), key=lambda t: t.cost() if CHEAP_FIRST else -t.cost())
    if workers <= 1:
        for t in tasks:
            write(*batched.run_task(t))
    else:
        with mp.get_context("fork").Pool(min(workers, len(tasks))) as pool:
            for key, records in pool.imap_unordered(batched._run_task_on, [(t, None) for t in tasks]):
                write(key, records)
                print(f"  wrote {by_key[key][0].name}", file=sys.stderr, flush=True)
    return len(todo)


def _voting(plan: dict) -> set[tuple[str, str, str]]:
    """(experiment, group, variant) of every setting a voting comparison names."""
    from attnref.training import confirm

    out = set()
    for e in plan:
        if not (e.startswith("E") and e[1:].isdigit()):
            continue
        for c in plan[e].get("compare", []):
            if c["votes"]:
                for g in c.get("groups", [x["name"] for x in plan[e]["groups"]]):
                    out |= {(e, g, side) for side in confirm._sides(c["key"])}
    return out


def comparisons(workers: int = 2) -> int:
    """Stage 3: every setting on the first S comparison seeds (seeds.json) at its tuned rate (E6:
    its group's), to the largest budget factor, read at B on the way; one file per setting under
    comparisons/, skipped when current. E6's settings also get the step-0 attention statistics."""
    plan, _ = _plan()
    tuning = load("tuning.json")["settings"]
    chosen = load("seeds.json")["comparison_seeds"]
    factor = max(plan["design"].get("budget_factors", [1]))
    rate = lambda s: [s.lr if s.lr is not None else tuning[_key(s)]["lr"]]
    return _run_stage(_setting_tasks("comparisons", rate, factor, chosen), workers)


def grid(workers: int = 2) -> int:
    """Stage 4: both settings of every voting comparison of a tuned experiment at every rate of
    shared_lr_grid other than its tuned one, at the budget B, on the comparison seeds; one file
    per (setting, rate) under grid/, skipped when current."""
    plan, _ = _plan()
    tuning = load("tuning.json")["settings"]
    chosen = load("seeds.json")["comparison_seeds"]
    voting = _voting(plan)
    shared = plan["design"]["shared_lr_grid"]

    def rates(s):
        if s.lr is not None or (s.experiment, s.group, s.variant) not in voting:
            return []
        return [r for r in shared if r != tuning[_key(s)]["lr"]]
    return _run_stage(_setting_tasks("grid", rates, 1, chosen), workers)


def step0_attention(seeds_list=None) -> dict:
    """E6: the attention statistics of every E6 setting at initialisation (step 0), per comparison
    seed: the logit level before any training, printed beside the trained one (confirmatory/e6-step0.json)."""
    import torch

    from attnref.training import train as train_module
    from attnref.training.models import RecallModel
    from attnref.training.train import training_code_hash

    plan, found = _settings()
    _, sha = _plan()
    seeds_list = seeds_list or load("seeds.json")["comparison_seeds"]
    out = {"stage": "e6-step0", "plan_sha256": sha, "training_code_hash": training_code_hash(),
           "seeds": list(seeds_list), "settings": {}}
    torch.set_num_threads(1)
    for s in found["E6"]:
        stats = []
        for seed in seeds_list:
            run = s.run(seed, s.lr)
            model = RecallModel(run.spec, run.task.keys, run.task.values, seed, classes=run.task.classes)
            stats.append(train_module.attention_statistics(model, run))
        out["settings"][_key(s)] = stats
    (DIRECTORY / "e6-step0.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


# Readings of the finished comparisons -------------------------------------------------------------------

def _values(s, side: str, found_runs: dict) -> list[float] | None:
    """Held-out accuracy per comparison seed of one side of a plan key ("v", "v@32", "v@2x") at the
    plan's budget B of ``s``'s experiment (a checkpoint of the 2 B runs); None if not trained yet."""
    variant, _, at = side.strip().partition("@")
    records = found_runs.get(variant.strip())
    if records is None:
        return None
    data, setting = records
    n = str(setting.n if not at or at.endswith("x") else int(at))
    if at.endswith("x"):                                  # "@2x": the checkpoint at 2 x the attention budget
        step = int(at[:-1]) * s.steps
    else:
        step = setting.steps
    out = []
    for r in data["runs"]:
        point = (r.get("checkpoint_eval") or {}).get(str(step))
        out.append(point[n]["accuracy"] if point is not None else r["eval"][n]["accuracy"])
    return out


def readings() -> list[dict]:
    """Every named comparison of the synthetic plan whose settings are trained (comparisons/): its
    paired t interval at B, the rule's reading against the experiment's δ (seeds.json), the
    decision's margin in SE and false-failure probability, and the rule's characteristic at the
    realised sd. Shown by the chapter; the verdicts also need the grid (stage 4)."""
    from attnref.training import confirm
    from attnref.training.results import paired_t

    plan, found = _settings()
    deltas = load("seeds.json")["delta"]
    rows = []
    for e, items in found.items():
        for c in plan[e].get("compare", []):
            for g in c.get("groups", [x["name"] for x in plan[e]["groups"]]):
                trained = {}
                for s in items:
                    if s.group == g:
                        path = DIRECTORY / "comparisons" / f"{_slug(f'{e} | {g} | {s.variant}')}.json"
                        if path.exists():
                            trained[s.variant] = (json.loads(path.read_text()), s)
                base = next(s for s in items if s.group == g)
                a, b = c["key"].split(" - ")
                va, vb = _values(base, a, trained), _values(base, b, trained)
                if va is None or vb is None:
                    continue
                delta = deltas[e]
                bound, relation = {"better": (delta, ">"), "as good": (-delta, ">"), "no gain": (delta, "<")}[c["claim"]]
                diffs = [x - y for x, y in zip(va, vb)]
                interval = paired_t(diffs)
                read = confirm.reading(interval, bound, relation)
                # the margin of the side read (the claim's side unless the opposite was reached)
                margin = confirm.decision_margin(diffs, bound, relation if read != confirm.OPPOSITE
                                                 else ("<" if relation == ">" else ">"))
                rows.append({"experiment": e, "group": g, "key": c["key"], "claim": c["claim"], "votes": c["votes"],
                             "delta": delta, "estimate": interval.estimate, "low": interval.low, "high": interval.high,
                             "reading": read, "margin_se": margin["margin_se"],
                             "false_failure": margin["false_failure"],
                             "characteristic": confirm.realised_characteristic(diffs, delta)})
    return rows


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    stage = sys.argv[1] if len(sys.argv) > 1 else ""
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if stage == "tune":
        done = tune(workers)
        print(f"tuning: {done['runs']} runs, {done['cpu_seconds'] / 60:.1f} CPU-min, {done['wall_seconds'] / 60:.1f} min")
    elif stage == "pilot":
        done = pilot(workers)
        print(f"pilot: {done['runs']} runs, {done['cpu_seconds'] / 60:.1f} CPU-min, {done['wall_seconds'] / 60:.1f} min")
    elif stage == "seeds":
        done = seeds()
        print(f"S = {done['S']}; delta {done['delta']}")
    elif stage == "comparisons":
        print(f"comparisons: {comparisons(workers)} settings trained")
        step0_attention()
    elif stage == "readings":
        for r in readings():
            c = r["characteristic"]
            print(f"{r['experiment']} {r['group']}: {r['key']} ({r['claim']}, δ {r['delta']:g}{'' if r['votes'] else ', shown'}): "
                  f"{r['estimate']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] -> {r['reading']}; margin {r['margin_se']:+.2f} SE, "
                  f"false failure {r['false_failure'] if r['false_failure'] is None else round(r['false_failure'], 3)}; "
                  f"at sd {c['sd']:.3f}: P(no gain | 0) {c['p_no_gain_at_0']:.2f}, P(better | 2δ) {c['p_better_at_2delta']:.2f}")
    elif stage == "grid":
        print(f"shared-rate grid: {grid(workers)} settings trained")
    else:
        raise SystemExit("usage: python -m attnref.training.confirmatory tune|pilot|seeds|comparisons|grid [workers]")
