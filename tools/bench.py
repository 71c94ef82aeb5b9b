"""Measure how long the verification takes, and write ``book/_data/report.json``.

    python tools/bench.py [--no-test] [--no-build] [--repeat 3]     (or: make bench)

1. Every notebook, each in a fresh kernel exactly as ``make execute`` runs it (default seed,
   one thread, offline; the notebook file is not rewritten): the time from kernel start to the
   last cell, and whether every cell ran (every check is an assertion, so *ok* means every
   check passed). ``--repeat`` rounds of every notebook; the median run is reported (this
   machine's speed varies by tens of percent from minute to minute), with all the runs.
2. The start-up floor: the median over ``--repeat`` runs of a kernel start plus the book's
   import cell (torch, sympy, myst_nb, attnref …) in an otherwise empty notebook. ``make test``
   cannot be faster than that cost paid once per notebook, shared by the cores:
   ``floor = (number of notebooks with code) × (kernel start + imports) / cores``. A second
   lower bound: strict nbval executes every notebook once, so ``make test`` takes at least
   ``Σ notebook times / cores`` (``notebook_bound_seconds``).
3. ``make test`` and the book build from stored outputs (``jupyter-book build`` with the flags
   of ``make book``, into a temporary folder), each timed once, end to end; the per-file times
   of ``make test`` (its schedule uses them) and its worker time by kind (``test_breakdown``).

4. attnref against torch (:func:`speed`): scaled dot-product attention and multi-head attention
   at n = 512, d_k = 64, float64, one thread, each timed in alternation with torch's
   ``F.scaled_dot_product_attention`` / ``torch.nn.MultiheadAttention``; the median over the
   rounds of the per-round ratio. Written to the report and, as a table, to
   ``book/_data/speed.md`` (included by the reproduce page).

Targets (2 cores): every notebook ≤ 10 s, the build ≤ 15 s, ``make test`` ≤ 2 × floor, attnref's
SDPA ≤ 3 × torch's and its multi-head attention ≤ 2 × torch's. The report also records the load
average when the bench started: other processes on the machine inflate every number.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from execute_notebooks import ROOT, client_for, kernel_environment  # noqa: E402

REPORT = ROOT / "book" / "_data" / "report.json"
IMPORT_CELL = """import torch
import sympy as sp
from myst_nb import glue

import attnref
from attnref.book import claims, plotting, seeding
from attnref.analysis import stats
from attnref.analysis import symbolic as sym

plotting.use_book_style()
torch.set_default_dtype(torch.float64)"""
TARGETS = {"notebook_seconds": 10.0, "build_seconds": 15.0, "test_over_floor": 2.0}
SPEED_TABLE = ROOT / "book" / "_data" / "speed.md"
SPEED_ROUNDS = 15


def speed_cases(n: int = 512, d_k: int = 64, h: int = 8) -> list[tuple[str, object, object, float]]:
    """(name, attnref's call, torch's call, target ratio) at ``n`` tokens, head width ``d_k``,
    float64. Both sides return what they are asked for: attnref always returns its weights
    (per head), torch's module its default ``need_weights=True`` (averaged over heads)."""
    import torch
    import attnref

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, d_k, generator=generator, dtype=torch.float64) for _ in range(3))
    x = torch.randn(1, n, h * d_k, generator=generator, dtype=torch.float64)
    weights = attnref.MultiHeadWeights.random(h * d_k, h, generator=generator)
    module = weights.to_torch()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return [
        ("SDPA", lambda: attnref.scaled_dot_product_attention(q, k, v),
         lambda: sdpa(q, k, v), 3.0),
        ("SDPA, causal", lambda: attnref.scaled_dot_product_attention(q, k, v, causal=True),
         lambda: sdpa(q, k, v, is_causal=True), 3.0),
        (f"MHA, h = {h}, d = {h * d_k}", lambda: attnref.multi_head_attention(x, weights=weights),
         lambda: module(x, x, x), 2.0),
        (f"MHA packed, h = {h}, d = {h * d_k}",
         lambda: attnref.multi_head_attention_packed(x, weights=weights), lambda: module(x, x, x), 2.0),
    ]


def speed(rounds: int = SPEED_ROUNDS, cases: list | None = None) -> list[dict]:
    """attnref against torch, one thread, without autograd: every round times each case's two
    calls back to back (alternating which goes first), so a burst of load from elsewhere hits
    both; a row's ``ratio`` is the median over the rounds of attnref's time / torch's, its
    times the medians. ``ok``: the ratio is within the case's target."""
    import torch

    cases = speed_cases() if cases is None else cases
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, *_ in cases}
    try:
        with torch.no_grad():
            for _, ours, theirs, _ in cases:            # warm-up: first calls allocate and dispatch
                ours(), theirs()
            for round_ in range(rounds):
                for name, ours, theirs, _ in cases:
                    pair = (ours, theirs) if round_ % 2 == 0 else (theirs, ours)
                    seconds = []
                    for call in pair:
                        start = time.perf_counter()
                        call()
                        seconds.append(time.perf_counter() - start)
                    if round_ % 2:
                        seconds.reverse()
                    times[name][0].append(seconds[0])
                    times[name][1].append(seconds[1])
    finally:
        torch.set_num_threads(threads)
    rows = []
    for name, _, _, target in cases:
        ours, theirs = times[name]
        ratio = statistics.median(a / b for a, b in zip(ours, theirs))
        rows.append({"name": name, "attnref_ms": round(statistics.median(ours) * 1e3, 2),
                     "torch_ms": round(statistics.median(theirs) * 1e3, 2), "ratio": round(ratio, 2),
                     "target": target, "ok": ratio <= target})
    return rows


def speed_table(rows: list[dict]) -> str:
    """The rows of :func:`speed` as the markdown table the reproduce page includes."""
    lines = ["| n = 512, d_k = 64 | attnref (ms) | torch (ms) | attnref / torch |",
             "|---|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['name']} | {row['attnref_ms']:.1f} | {row['torch_ms']:.1f} | "
                     f"{row['ratio']:.2f} (≤ {row['target']:g} {'✓' if row['ok'] else '✗'}) |")
    return "\n".join(lines) + "\n"


def run_notebook(nb: nbformat.NotebookNode, path: Path) -> dict:
    """Run ``nb`` in a fresh kernel: kernel start, first code cell, all cells, status."""
    client = client_for(nb, path)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    timings = {"kernel_start": None, "first_cell": None}
    status = "ok"
    start = time.perf_counter()
    try:
        with client.setup_kernel():
            timings["kernel_start"] = time.perf_counter() - start
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                before = time.perf_counter()
                client.execute_cell(cell, index)
                if index == code[0]:
                    timings["first_cell"] = time.perf_counter() - before
    except Exception as error:   # a failing cell: CellExecutionError, a timeout, a dead kernel
        status = f"failed: {type(error).__name__}: {str(error).strip().splitlines()[-1][:200] if str(error).strip() else ''}"
    timings["seconds"] = time.perf_counter() - start
    timings["status"] = status
    return timings


def notebooks(repeat: int) -> list[dict]:
    """Every notebook ``repeat`` times, in rounds (each round runs every notebook once, so a burst
    of load from elsewhere hits one run of several notebooks rather than every run of one).
    A row holds the median run (its time, kernel start, first cell), the times of all runs and
    the status: *ok* only if every run got through every cell."""
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    books = {path: nbformat.read(path, as_version=4) for path in paths}
    with_code = [path for path in paths if any(c.cell_type == "code" for c in books[path].cells)]
    runs: dict[Path, list[dict]] = {path: [] for path in with_code}
    for round_ in range(repeat):
        for path in with_code:
            result = run_notebook(books[path], path)
            runs[path].append(result)
            print(f"{path.stem:28s} {result['seconds']:6.1f} s  (kernel {result['kernel_start'] or 0:.1f} s, "
                  f"first cell {result['first_cell'] or 0:.1f} s)  {result['status']}"
                  + (f"  [round {round_ + 1}/{repeat}]" if repeat > 1 else ""), flush=True)
    rows = []
    for path in paths:
        if path not in runs:
            rows.append({"name": path.stem, "seconds": 0.0, "status": "no code cells"})
            continue
        results = sorted(runs[path], key=lambda r: r["seconds"])
        median = results[(len(results) - 1) // 2]        # the lower median: a run that happened
        failed = [r["status"] for r in results if r["status"] != "ok"]
        rows.append({"name": path.stem, "seconds": round(median["seconds"], 1),
                     "status": failed[0] if failed else "ok",
                     "runs": [round(r["seconds"], 1) for r in runs[path]],
                     "kernel_start_seconds": round(median["kernel_start"] or 0.0, 2),
                     "first_cell_seconds": round(median["first_cell"] or 0.0, 2)})
    return rows


def startup(repeat: int) -> tuple[float, float]:
    """Median (kernel start, import cell) of ``repeat`` empty notebooks with the import cell."""
    kernels, imports = [], []
    for _ in range(repeat):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(IMPORT_CELL)])
        result = run_notebook(nb, ROOT / "notebooks" / "startup.ipynb")
        if result["status"] != "ok":
            raise SystemExit(f"bench: the import cell failed: {result['status']}")
        kernels.append(result["kernel_start"])
        imports.append(result["first_cell"])
    return statistics.median(kernels), statistics.median(imports)


def timed(command: list[str], log: Path, env: dict | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    return time.perf_counter() - start, "ok" if code == 0 else f"failed (exit {code}, log {log})"


def previous_units(report: Path) -> dict[str, float]:
    try:
        return json.loads(report.read_text(encoding="utf-8")).get("unit_seconds") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def _testcases(junit: Path) -> list[tuple[str, str, float]]:
    """(file, test name, seconds of setup + call + teardown) of every test in pytest's JUnit XML."""
    try:
        tree = ElementTree.parse(junit)
    except (OSError, ElementTree.ParseError):
        return []
    return [(case.get("file") or "", case.get("name") or "", float(case.get("time") or 0))
            for case in tree.iter("testcase")]


def unit_seconds(junit: Path) -> dict[str, float]:
    """Seconds per file (setup + call + teardown of its tests) from pytest's JUnit XML."""
    totals: dict[str, float] = defaultdict(float)
    for name, _, seconds in _testcases(junit):
        if name:
            totals[name] += seconds
    return {name: round(seconds, 2) for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1])}


#: What `make test` spends its worker time on, in the order the report lists it.
CATEGORIES = ("notebooks, stored seed (strict nbval)", "notebooks, other seed (assertions)",
              "browser test (book build + Chromium)", "real-model oracle (transformers)", "other tests")


def category(file: str, name: str) -> str:
    if file.endswith(".ipynb"):
        return CATEGORIES[1] if name.startswith("seeds[") else CATEGORIES[0]
    if file.endswith("test_browser.py"):
        return CATEGORIES[2]
    if file.endswith("test_minilm.py"):
        return CATEGORIES[3]
    return CATEGORIES[4]


def test_breakdown(junit: Path) -> dict[str, float]:
    """Worker seconds of `make test` per :data:`CATEGORIES` (they add up to the sum over tests)."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    for file, name, seconds in _testcases(junit):
        totals[category(file, name)] += seconds
    return {name: round(seconds, 1) for name, seconds in totals.items()} if any(totals.values()) else {}


def kernel_paths_of(log: str) -> list[str]:
    """The ``CPU kernel paths exercised: …`` lines of a `make test` log (one per strict pass)."""
    prefix = "CPU kernel paths exercised: "
    return [line.split(prefix, 1)[1].strip() for line in log.splitlines() if prefix in line]


def speed_only(output: Path) -> int:
    """``--speed-only``: the speed rows (and the load average they ran under) into the existing report."""
    load = os.getloadavg()
    rows = speed()
    report = json.loads(output.read_text(encoding="utf-8")) if output.exists() else {}
    report["speed"] = {"rounds": SPEED_ROUNDS, "cases": rows, "load_average": [round(x, 2) for x in load]}
    report.setdefault("targets", {})["attnref SDPA <= 3 x torch, MHA <= 2 x torch"] = all(r["ok"] for r in rows)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    SPEED_TABLE.write_text(speed_table(rows), encoding="utf-8")
    print(speed_table(rows), end="")
    return 0 if all(r["ok"] for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-test", action="store_true", help="do not time `make test`")
    parser.add_argument("--no-build", action="store_true", help="do not time the book build")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of every notebook and start-up measurements (the median is reported)")
    parser.add_argument("--output", type=Path, default=REPORT)
    parser.add_argument("--speed-only", action="store_true",
                        help="measure attnref against torch only; update that part of the report and the table")
    args = parser.parse_args(argv)
    if args.speed_only:
        return speed_only(args.output)

    load = os.getloadavg()
    cores = os.cpu_count() or 1
    kernel_environment()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {cores} cores", flush=True)

    speed_rows = speed()
    for row in speed_rows:
        print(f"{row['name']:48s} attnref {row['attnref_ms']:7.1f} ms  torch {row['torch_ms']:7.1f} ms  "
              f"ratio {row['ratio']:.2f} (target ≤ {row['target']:g})", flush=True)
    rows = notebooks(args.repeat)
    kernel_start, import_cell = startup(args.repeat)
    with_code = sum(1 for r in rows if r["status"] != "no code cells")
    floor = with_code * (kernel_start + import_cell) / cores
    print(f"start-up: kernel {kernel_start:.2f} s + imports {import_cell:.2f} s per notebook; "
          f"floor = {with_code} × {kernel_start + import_cell:.2f} s / {cores} cores = {floor:.1f} s", flush=True)

    logs = Path(tempfile.mkdtemp(prefix="attention-claims-bench-"))
    test_seconds = test_status = build_seconds = build_status = None
    units: dict[str, float] = {}
    breakdown: dict[str, float] = {}
    kernel_paths: list[str] = []
    if not args.no_test:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        junit = logs / "junit.xml"
        test_seconds, test_status = timed(
            ["make", "--no-print-directory", "test",
             f"PYTEST_ARGS=--junitxml={junit} -o junit_family=xunit1 -o junit_duration_report=total"],
            logs / "test.log", env)
        units = unit_seconds(junit)
        breakdown = test_breakdown(junit)
        kernel_paths = kernel_paths_of((logs / "test.log").read_text(encoding="utf-8", errors="replace"))
        print(f"make test: {test_seconds:.1f} s ({test_seconds / floor:.2f} × floor)  {test_status}", flush=True)
    if not args.no_build:
        build_seconds, build_status = timed(
            [str(Path(sys.executable).parent / "jupyter-book"), "build", ".", "-n", "-W", "--keep-going",
             "--path-output", str(logs / "site")], logs / "build.log")
        print(f"book build: {build_seconds:.1f} s  {build_status}", flush=True)

    slowest = max((r["seconds"] for r in rows), default=0.0)
    # Strict nbval executes every notebook once, so `make test` can be no faster than that work
    # spread over the cores: a second lower bound, next to the start-up floor.
    notebook_bound = sum(r["seconds"] for r in rows) / cores
    report = {
        "notebooks": rows,
        "test_seconds": None if test_seconds is None else round(test_seconds, 1),
        "build_seconds": None if build_seconds is None else round(build_seconds, 1),
        "floor_seconds": round(floor, 1),
        "notebook_bound_seconds": round(notebook_bound, 1),
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "startup_seconds": round(kernel_start + import_cell, 2),
        "kernel_start_seconds": round(kernel_start, 2),
        "import_seconds": round(import_cell, 2),
        "cores": cores,
        # per-file times of `make test` (setup + call + teardown); `make test` runs the longest first
        "unit_seconds": units or previous_units(args.output),
        # worker seconds of `make test` by kind (both workers together; wall time ≈ their sum / cores)
        "test_breakdown": breakdown,
        # the CPU kernel paths of torch (and MKL's cap) each strict pass of `make test` ran under
        "cpu_kernel_paths": kernel_paths,
        "load_average": [round(x, 2) for x in load],
        # attnref against torch at n = 512, d_k = 64, float64, one thread (see speed())
        "speed": {"rounds": SPEED_ROUNDS, "cases": speed_rows, "load_average": [round(x, 2) for x in load]},
        "test_status": test_status,
        "build_status": build_status,
        "targets": {
            "every notebook <= 10 s": slowest <= TARGETS["notebook_seconds"],
            "build <= 15 s": None if build_seconds is None else build_seconds <= TARGETS["build_seconds"],
            "make test <= 2 x floor": None if test_seconds is None else test_seconds <= TARGETS["test_over_floor"] * floor,
            "attnref SDPA <= 3 x torch, MHA <= 2 x torch": all(row["ok"] for row in speed_rows),
        },
    }
    SPEED_TABLE.write_text(speed_table(speed_rows), encoding="utf-8")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}; "
          f"targets: {report['targets']}")
    failed = [r["name"] for r in rows if r["status"] not in ("ok", "no code cells")]
    if failed or test_status not in (None, "ok") or build_status not in (None, "ok"):
        print(f"bench: something failed; logs in {logs}", file=sys.stderr)
        return 1
    shutil.rmtree(logs, ignore_errors=True)     # the private site build and the logs
    return 0


if __name__ == "__main__":
    sys.exit(main())
