"""Chapter 8's plan (data/experiments/plan.toml) and the machinery around it: every result file was
made under the committed plan; the plan was committed before the results; the runner records the plan
and the device; --device cuda fails clearly without CUDA; the exact sign-flip
test and the power statement compute what they claim.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnref.training import experiments as ex
from attnref.training import results
from attnref.training.train import resolve_device

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "data" / "experiments" / "plan.toml"


def _git(*args) -> str | None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


@pytest.mark.parametrize("experiment", ex.IDS)
def test_every_result_was_made_under_the_committed_plan(experiment):
    for directory in (results.DATA, results.DATA / results.PORTABLE):
        path = directory / f"{experiment.lower()}.json"
        if directory != results.DATA and not path.exists():
            continue
        stored = json.loads(path.read_text())["plan_sha256"]
        assert stored == ex.plan_hash(PLAN), \
            f"{path.relative_to(ROOT)} was made under plan {stored[:12]}…, not {ex.plan_hash(PLAN)[:12]}…"
    committed = _git("show", "HEAD:data/experiments/plan.toml")
    if committed is not None:
        import hashlib
        assert hashlib.sha256(committed.encode()).hexdigest() == ex.plan_hash(PLAN), \
            "data/experiments/plan.toml differs from its committed version"


def test_the_plan_was_committed_before_the_results():
    # the first commit that added the plan is an ancestor of (or is older than) every commit
    # that changed a result file with today's plan hash
    first_plan = _git("log", "--diff-filter=A", "--format=%H", "--", "data/experiments/plan.toml")
    if not first_plan:
        pytest.skip("not a git work tree (the download bundle)")
    plan_commit = first_plan.split()[-1]
    for e in ex.IDS:
        commits = (_git("log", "--format=%H", "--", f"data/experiments/{e.lower()}.json") or "").split()
        for commit in commits[:1]:                       # the newest version of the result
            done = subprocess.run(["git", "merge-base", "--is-ancestor", plan_commit, commit], cwd=ROOT)
            assert done.returncode == 0, f"{e}'s results ({commit[:8]}) do not descend from the plan's commit"


def test_the_plan_fixes_what_the_issue_asks_for():
    plan = ex.load_plan(PLAN)
    design = plan["design"]
    assert len(design["comparison_seeds"]) == 10
    assert not set(design["pilot_seeds"]) & set(design["comparison_seeds"]) and \
        design["tuning_seed"] not in design["comparison_seeds"] + design["pilot_seeds"]
    assert len(design["lr_grid"]) >= 3
    for e in ex.IDS:
        p = plan[e]
        assert p["steps"] > 0 and p["delta"] > 0 and p["power"] and p["baseline"] in [v["name"] for v in p["variants"]]
        if p.get("tuned", True) is False:
            assert len(p["groups"]) >= 3 and all("lr" in g for g in p["groups"])


def _tiny_plan(tmp_path) -> Path:
    text = PLAN.read_text()
    start = text.index("[E1]")
    end = text.index("[E2]")
    e1 = text[start:end].replace('  { name = "relu_k", qkv_activation = "relu", sigma_on = "k" },\n', "")
    head = text[:start].replace("comparison_seeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]", "comparison_seeds = [0, 1]")
    head = head.replace("eval_size = 1024", "eval_size = 32").replace("lr_grid = [3e-3, 1e-2, 3e-2]", "lr_grid = [1e-3, 1e-2, 1e-1]")
    import re
    e1 = re.sub(r"\nsteps = \d+", "\nsteps = 2", e1)
    e1 = e1[:e1.index("variants = [")] + 'variants = [\n  { name = "identity" },\n  { name = "relu_q", qkv_activation = "relu", sigma_on = "q" },\n  { name = "gate", gate = true },\n]\n'
    path = tmp_path / "plan.toml"
    path.write_text(head + e1)
    return path


def _run(*args):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "run_experiments.py"), "--jobs", "1", *args],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _strip(data):
    volatile = {"seconds", "cpu_seconds", "run_seconds", "machine", "shard"}
    if isinstance(data, dict):
        return {k: _strip(v) for k, v in data.items() if k not in volatile}
    if isinstance(data, list):
        return [_strip(v) for v in data]
    return data


def test_the_runner_records_the_plan_and_the_device(tmp_path):
    # (the runner's own --shard/--merge gave way to Ray, issue 43 item 4: tests/test_ray_runner.py
    # compares a Ray sweep's files with the local pool's)
    plan = _tiny_plan(tmp_path)
    _run("--plan", str(plan), "--only", "E1", "--out", str(tmp_path / "one"))
    one = json.loads((tmp_path / "one" / "e1.json").read_text())
    assert one["plan_sha256"] == ex.plan_hash(plan) and one["device"] == "cpu"
    assert [s["variant"] for s in one["settings"]] == ["identity", "relu_q", "gate"]
    assert all(len(s["runs"]) == 2 for s in one["settings"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_device_cuda_fails_clearly_without_cuda():
    with pytest.raises(RuntimeError, match="sees no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("tpu")
    assert resolve_device(None).type == "cpu"


def test_sign_flip_p_is_the_exact_permutation_p():
    assert results.sign_flip_p([0.1] * 10) == 2 / 1024                  # every sign the same
    assert results.sign_flip_p([1, -1] * 5) == 1.0
    rng = random.Random(0)
    values = [rng.gauss(0.2, 1) for _ in range(8)]
    # brute force over all 2^8 sign assignments
    observed = abs(sum(values))
    count = sum(abs(sum(v * (-1 if m >> i & 1 else 1) for i, v in enumerate(values))) >= observed - 1e-12
                for m in range(256))
    assert results.sign_flip_p(values) == count / 256
    assert math.isnan(results.sign_flip_p([0.1, float("nan")]))
    with pytest.raises(ValueError, match="1 to 20 differences"):
        results.sign_flip_p([0.1] * 21)


def test_detectable_effect_has_the_stated_power():
    # Monte Carlo: normal differences with the detectable mean are detected (two-sided 95 % t
    # excludes 0) in 80 % of samples; 4000 samples, 3.5 standard errors (0.022) of slack
    effect = results.detectable_effect(1.0, 10)
    assert 0.9 < effect < 1.1
    crit = results.t_quantile(0.95, 9)
    rng = random.Random(1)
    hits = 0
    for _ in range(4000):
        d = [rng.gauss(effect, 1.0) for _ in range(10)]
        m = sum(d) / 10
        s = math.sqrt(sum((x - m) ** 2 for x in d) / 9)
        hits += abs(m) / (s / math.sqrt(10)) > crit
    assert abs(hits / 4000 - 0.8) < 0.022


def _best_of(tuning: list[dict]) -> float:
    """The plan's choice, recomputed: the learning rate with the highest held-out accuracy on the
    tuning seed, ties broken by the lower held-out loss."""
    return max(tuning, key=lambda t: (t["accuracy"], -t["loss"]))["lr"]


def test_the_runner_keeps_the_best_learning_rate_of_its_tuning_runs(tmp_path):
    # the runner itself (a mutant that keeps the worst learning rate fails here): the tiny plan with
    # a wide grid, so that the tuning runs differ
    plan = _tiny_plan(tmp_path)
    text = plan.read_text().replace("\nsteps = 2", "\nsteps = 12")
    plan.write_text(text)
    _run("--plan", str(plan), "--only", "E1", "--out", str(tmp_path / "tuned"))
    data = json.loads((tmp_path / "tuned" / "e1.json").read_text())
    spread = 0
    for s in data["settings"]:
        assert s["lr"] == _best_of(s["tuning"]), f"{s['variant']}: kept {s['lr']}, best {_best_of(s['tuning'])}"
        spread += len({(t["accuracy"], t["loss"]) for t in s["tuning"]}) > 1
    assert spread, "the tuning runs did not differ: the test could not tell the best from the worst"


@pytest.mark.parametrize("experiment", ex.IDS)
def test_every_stored_learning_rate_is_the_best_on_the_tuning_seed(experiment):
    data = json.loads((results.DATA / f"{experiment.lower()}.json").read_text())
    for s in data["settings"]:
        if s["lr_tuned"]:
            assert s["lr"] == _best_of(s["tuning"]), f"{experiment} {s['variant']} {s['group']}"
        else:
            assert s["lr"] == float(s["group"].split()[-1]) or not s["group"].startswith("lr "), s["group"]


def test_every_amendment_was_committed_before_the_results_it_governs():
    # each amendment's newest commit is an ancestor of the newest commit of every result file (the
    # robustness grid and the text results included): a plan cannot be fitted to results already seen
    amendments = ex.amendment_paths(PLAN.parent)
    if not _git("log", "-1", "--format=%H") or not amendments:
        pytest.skip("not a git work tree (the download bundle)")
    results_paths = [f"data/experiments/{d}{e.lower()}.json" for e in ex.IDS for d in ("", "portable/", "robust/")]
    results_paths.append("data/experiments/text/anchor.json")
    for amendment in [*amendments, ROOT / "data" / "experiments" / "text" / "plan.toml"]:
        rel = str(amendment.relative_to(ROOT))
        plan_commit = (_git("log", "-1", "--format=%H", "--", rel) or "").strip()
        assert plan_commit, f"{rel} is not committed"
        for path in results_paths:
            if "text/" in path and "text/" not in rel or ("text/" in rel and "text/" not in path):
                continue
            commit = (_git("log", "-1", "--format=%H", "--", path) or "").strip()
            if not commit:
                continue
            done = subprocess.run(["git", "merge-base", "--is-ancestor", plan_commit, commit], cwd=ROOT)
            assert done.returncode == 0, f"{path} ({commit[:8]}) does not descend from {rel}'s commit {plan_commit[:8]}"


def first_commit(rel: str) -> str | None:
    """The commit that first added ``rel`` (a path relative to the repository), or None if it was never committed."""
    found = (_git("log", "--diff-filter=A", "--format=%H", "--", rel) or "").split()
    return found[-1] if found else None


def precedes(earlier: str, later: str) -> bool:
    """Whether commit ``earlier`` is an ancestor of (or is) commit ``later``."""
    return subprocess.run(["git", "merge-base", "--is-ancestor", earlier, later], cwd=ROOT).returncode == 0


def governed(plan_file: Path, directory: Path) -> list[Path]:
    """The result files under ``directory`` that name ``plan_file`` by its sha256 (in any field whose
    name ends in ``sha256``): the results it governs."""
    want = ex.plan_hash(plan_file)
    out = []
    for path in sorted(directory.rglob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and any(k.endswith("sha256") and v == want for k, v in data.items()):
            out.append(path)
    return out


def assert_plan_precedes_its_results(plan_file: Path, results_paths) -> int:
    """Every result file's FIRST commit descends from its plan's first commit (a plan cannot be
    written after results it governs were first committed). Returns the number of files checked."""
    plan_rel = str(plan_file.relative_to(ROOT))
    plan_commit = first_commit(plan_rel)
    results_paths = list(results_paths)
    if results_paths:
        assert plan_commit, f"{plan_rel} governs {len(results_paths)} result files but is not committed"
    checked = 0
    for path in results_paths:
        rel = str(Path(path).relative_to(ROOT))
        commit = first_commit(rel)
        if commit is None:
            continue                     # not committed yet: checked when it is
        assert precedes(plan_commit, commit), \
            f"{rel} was first committed in {commit[:8]}, which does not descend from {plan_rel}'s first commit {plan_commit[:8]}"
        checked += 1
    return checked


def test_every_text_plan_and_amendment_precedes_the_first_commit_of_its_results():
    # issue 44 item 12: the text plan and each text amendment against the FIRST commit of every text
    # result file that names it by hash (the newest-commit test above cannot see a result committed
    # before its amendment and re-committed after it)
    if not _git("log", "-1", "--format=%H"):
        pytest.skip("not a git work tree (the download bundle)")
    text_dir = ROOT / "data" / "experiments" / "text"
    checked = 0
    for plan_file in [text_dir / "plan.toml", *ex.amendment_paths(text_dir)]:
        files = governed(plan_file, text_dir)
        assert files, f"{plan_file.name} governs no text result file (a hash field missing?)"
        checked += assert_plan_precedes_its_results(plan_file, files)
    assert checked >= 5


@pytest.mark.parametrize("experiment", ex.IDS)
def test_the_results_record_the_amendments_they_were_made_under(experiment):
    for directory in (results.DATA, results.DATA / results.PORTABLE, results.DATA / results.ROBUST):
        path = directory / f"{experiment.lower()}.json"
        if path.exists():
            assert json.loads(path.read_text()).get("amendments_sha256") == ex.amendments_hash(PLAN.parent), path
