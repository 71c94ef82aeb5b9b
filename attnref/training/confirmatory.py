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
    jobs = [((k, seed), s, seed, lr) for k, (s, lr) in wanted.items() for seed in seeds]
    start = time.perf_counter()
    records = _train(jobs, workers)
    out = {**_header("pilot"), "tuning_sha256": _sha(DIRECTORY / "tuning.json"), "pilot_seeds": seeds,
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
    else:
        raise SystemExit("usage: python -m attnref.training.confirmatory tune|pilot|seeds [workers]")
