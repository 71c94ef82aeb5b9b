"""tools/run_experiments.py on Ray (issue 43 item 4): ``--ray ADDRESS`` submits one task per (setting,
seed batch) to a Ray cluster and writes the files the local process pool writes.

A tiny sweep (E1 of the committed plan cut to 2 settings x 2 comparison seeds, 2 steps, a 3-rate
grid) runs once on the local pool and once on a local Ray instance started here (2 CPUs, no
dashboard); the two e1.json files agree in everything but the fields that depend on the process
and the clock. Ray is an optional extra (``pip install '.[experiments]'``), not part of
requirements.lock: without it the Ray test is skipped, and the runner's error names the extra.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch


ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "data" / "experiments" / "plan.toml"
VOLATILE = {"seconds", "cpu_seconds", "run_seconds", "machine", "shard", "load_average_start"}


def _runner():
    spec = importlib.util.spec_from_file_location("run_experiments_under_test", ROOT / "tools" / "run_experiments.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _tiny_plan(tmp_path) -> Path:
    """E1 with two variants (identity, relu_q), comparison seeds 0 and 1, 2 steps, eval on 32 sequences."""
    text = PLAN.read_text()
    start, end = text.index("[E1]"), text.index("[E2]")
    head = text[:start]
    head = re.sub(r"comparison_seeds = \[[^\]]*\]", "comparison_seeds = [0, 1]", head)
    head = re.sub(r"eval_size = \d+", "eval_size = 32", head)
    head = re.sub(r"lr_grid = \[[^\]]*\]", "lr_grid = [1e-3, 1e-2, 1e-1]", head)
    e1 = re.sub(r"\nsteps = \d+", "\nsteps = 2", text[start:end])
    e1 = e1[:e1.index("variants = [")] + ('variants = [\n  { name = "identity" },\n'
                                          '  { name = "relu_q", qkv_activation = "relu", sigma_on = "q" },\n]\n')
    path = tmp_path / "plan.toml"
    path.write_text(head + e1)
    return path


def _strip(data):
    if isinstance(data, dict):
        return {k: _strip(v) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [_strip(v) for v in data]
    return data


def _sweep(runner, plan, out, *extra):
    assert runner.main(["--plan", str(plan), "--only", "E1", "--jobs", "2", "--out", str(out), *extra]) == 0
    return json.loads((out / "e1.json").read_text())


def test_a_ray_sweep_writes_the_local_pools_files(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install '.[experiments]')")
    plan = _tiny_plan(tmp_path)
    runner = _runner()
    local = _sweep(runner, plan, tmp_path / "local")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        address = ray.get_runtime_context().gcs_address
        on_ray = _sweep(runner, plan, tmp_path / "ray", "--ray", address)
    finally:
        ray.shutdown()
    assert [(s["variant"], len(s["runs"])) for s in local["settings"]] == [("identity", 2), ("relu_q", 2)]
    assert [r["config"]["seed"] for s in local["settings"] for r in s["runs"]] == [0, 1, 0, 1]
    assert local["trainer"] == on_ray["trainer"] == "batched"
    assert _strip(on_ray) == _strip(local)
    # the runs are real: the two seeds of a setting differ, the batch is recorded
    runs = local["settings"][0]["runs"]
    assert runs[0]["first_losses"] != runs[1]["first_losses"] and runs[0]["batched"]["seeds"] == [0, 1]


def test_without_ray_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)              # import ray raises ImportError
    with pytest.raises(RuntimeError, match=r"pip install '\.\[experiments\]'"):
        _runner().main(["--plan", str(_tiny_plan(tmp_path)), "--only", "E1", "--out", str(tmp_path), "--ray", "auto"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_device_cuda_trains_on_the_gpu(tmp_path):
    data = _sweep(_runner(), _tiny_plan(tmp_path), tmp_path / "cuda", "--device", "cuda")
    assert data["device"] == "cuda" and all(r["device"] == "cuda" for s in data["settings"] for r in s["runs"])


def test_seed_batches_and_lone_runs_write_the_same_runs(tmp_path):
    # --seed-batch 1 (one task per seed) and --lone (the lone loop) give each seed the same run as the
    # whole-setting batch, up to float32 round-off (tests/test_batched_training.py states the bound)
    runner, plan = _runner(), _tiny_plan(tmp_path)
    whole = _sweep(runner, plan, tmp_path / "whole")
    single = _sweep(runner, plan, tmp_path / "single", "--seed-batch", "1")
    lone = _sweep(runner, plan, tmp_path / "lone", "--lone")
    assert lone["trainer"] == "lone" and single["settings"][0]["runs"][1]["batched"]["seeds"] == [1]
    for other in (single, lone):
        for a, b in zip(whole["settings"], other["settings"], strict=True):
            assert a["lr"] == b["lr"]
            for ra, rb in zip(a["runs"], b["runs"], strict=True):
                assert max(abs(x - y) for x, y in zip(ra["first_losses"], rb["first_losses"], strict=True)) <= 1e-4
                assert abs(ra["eval"]["8"]["loss"] - rb["eval"]["8"]["loss"]) <= 1e-4
