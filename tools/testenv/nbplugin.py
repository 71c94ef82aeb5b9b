"""pytest plugin for the notebooks (loaded by the Makefile with ``-p nbplugin``).

1. A notebook that is not valid JSON (or not a notebook) fails collection with one line,
   ``notebooks/X.ipynb: not valid JSON (line L, column C): …``, instead of nbval's traceback.
2. ``--attnref-seeds=1,2``: after nbval has run a notebook's cells with the default seed (and
   compared their outputs), one more item of the same notebook, ``seeds[1,2]``, re-runs every
   code cell in the *same* kernel for each listed seed — ``%reset -f`` (the namespace is
   emptied; imported modules stay, so the imports cost nothing the second time), then
   ``ATTNREF_SEED`` set in the kernel's environment (``attnref.book.seeding`` reads it at every
   draw). Outputs are not compared; every assertion must hold, and every verdict recorded by
   ``claims.record`` must be the one stored in the notebook. A notebook that never read the
   seed (``attnref.book.seeding.seed_was_read()`` is false in its kernel after the default run, and
   no code cell names ``ATTNREF_SEED``) cannot depend on it: its sweep is skipped, with that
   reason. A notebook without code cells has no items, so no kernel is started for it.
3. ``--attnref-longest-first``: files (notebooks and test modules) run longest first, by the
   per-file times ``make bench`` last measured (``unit_seconds`` in ``book/_data/report.json``;
   a file it does not list counts 10 s for a notebook, 1 s for a test module). With
   ``--dist loadfile --no-loadscope-reorder`` that is the longest-processing-time-first
   schedule: the long units start first and the short ones fill the gaps at the end.
4. After a notebook's cells (default seed), one more item, ``verdicts``, asks the kernel for every
   verdict the notebook computed (``attnref.book.claims.computed()``) and fails, naming the claim
   and its failing checks, when one is not the verdict the registry expects (or is *not
   established*). The seed sweep applies the same test to every seed.
5. If this pytest process was started with ``tools/testenv`` on ``PYTHONPATH`` (its
   ``sitecustomize`` installed the network guard; kernels inherit the variable), the seed item
   first checks that the notebook's kernel has the guard too.
6. Stored outputs are compared with the re-run by ``portable.outputs_agree`` instead of nbval's
   text equality: verdicts, pass flags, integers and words exactly, each check's measured value
   within its own agreement rule, printed numbers within their last printed digit (see
   ``portable``'s docstring: the round-off digits of a float depend on the CPU kernels).
7. The ``verdicts`` item also asks the kernel which CPU kernel path torch runs
   (``torch.backends.cpu.get_cpu_capability()``), fails if ``ATEN_CPU_CAPABILITY`` asked for
   another one (the variable would have been ignored), and records it: the run's summary line
   ``CPU kernel paths exercised: …`` and the JUnit property ``cpu_capability``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import portable  # noqa: E402  (tools/testenv, beside this plugin)
import slowdown  # noqa: E402

# Kernels start in the notebook's folder: a relative PYTHONPATH entry (``PYTHONPATH=tools/testenv``)
# would not reach them, and their network guard would silently be missing. Make every entry absolute.
if os.environ.get("PYTHONPATH"):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        str(Path(entry).resolve()) if entry else entry for entry in os.environ["PYTHONPATH"].split(os.pathsep))
VERDICT_KEY = "attnref_verdict"
SEED_NAME = "ATTNREF_SEED"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _preflight():
    spec = importlib.util.spec_from_file_location("attnclaims_preflight", HERE.parent / "preflight.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_notebook_problem = _preflight().notebook_problem


def _portable_compare_outputs(self, test, ref, skip_compare=None):
    """nbval's ``IPyNbCell.compare_outputs``, replaced: see ``portable``."""
    problems = portable.outputs_agree(ref, test, sanitize=self.sanitize)
    self.comparison_traceback = ["  " + p for p in problems]
    return not problems


#: nbval's fixed limits for a kernel to start, on an idle machine (seconds): start, answer
#: kernel_info, establish IOPub. They are scaled by the load when a kernel starts (slowdown.limit).
KERNEL_START, KERNEL_INFO, IOPUB = 60.0, 10.0, 30.0


def _patient_kernel_start(RunningKernel):
    """RunningKernel with its start-up limits derived from the load (nbval's are fixed: 60 s to
    start, 10 s for kernel_info, 30 one-second tries for IOPub; under load 18 on 2 cores a kernel
    importing nothing yet missed them and every cell of its notebook errored at set-up)."""
    from queue import Empty

    from nbval import kernel as nbval_kernel

    original_init = RunningKernel.__init__

    def __init__(self, kernel_name, cwd=None, startup_timeout=KERNEL_START):
        scale = slowdown.factor()
        self.startup_scale = scale
        original_init(self, kernel_name, cwd=cwd, startup_timeout=max(float(startup_timeout), KERNEL_START) * scale)

    def _ensure_iopub_up(self):
        scale = getattr(self, "startup_scale", 1.0)
        tries = int(IOPUB * scale)
        for _ in range(tries):
            msg_id = self.kc.kernel_info()
            try:
                self.await_reply(msg_id, timeout=KERNEL_INFO * scale)
            except Empty:
                raise RuntimeError(f"Kernel info request timed out after {KERNEL_INFO * scale:.0f} seconds "
                                   f"(load factor {scale:.1f})") from None
            try:
                self.await_idle(msg_id, 1)
            except Empty:
                continue
            return
        raise RuntimeError(f"Wasn't able to establish IOPub after {tries} seconds (load factor {scale:.1f})")

    if not getattr(RunningKernel, "_attnref_patient", False):
        RunningKernel.__init__ = __init__
        RunningKernel._ensure_iopub_up = _ensure_iopub_up
        RunningKernel._attnref_patient = True
    assert nbval_kernel.RunningKernel is RunningKernel


def pytest_configure(config):
    from nbval.kernel import RunningKernel
    from nbval.plugin import IPyNbCell      # nbval is in the lock; this plugin only serves it
    IPyNbCell.compare_outputs = _portable_compare_outputs
    _patient_kernel_start(RunningKernel)


def pytest_addoption(parser):
    group = parser.getgroup("attention-claims")
    group.addoption("--attnref-seeds", default="", metavar="S1,S2",
                    help="after each notebook, re-run its code cells in the same kernel with these "
                         "ATTNREF_SEED values (assertions and verdicts only, no output comparison)")
    group.addoption("--attnref-longest-first", action="store_true",
                    help="run files longest first (times from book/_data/report.json)")


class BadNotebook(pytest.File):
    """A notebook file that cannot be parsed: collecting it fails with one line."""

    problem = ""

    def collect(self):
        raise BadNotebookError(self.problem)

    def repr_failure(self, excinfo):
        if excinfo.errisinstance(BadNotebookError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class BadNotebookError(Exception):
    pass


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collected = yield
    if file_path.suffix != ".ipynb" or not collected:
        return collected
    problem = _notebook_problem(Path(file_path), Path(str(parent.config.rootpath)))
    if problem is None:
        return collected
    node = BadNotebook.from_parent(parent, path=file_path)
    node.problem = problem
    return [node]


def _seeds(config) -> list[int]:
    raw = config.getoption("attnref_seeds") or ""
    try:
        return [int(s) for s in raw.replace(" ", "").split(",") if s]
    except ValueError:
        raise pytest.UsageError(f"--attnref-seeds must be a comma-separated list of integers, got {raw!r}") from None


def pytest_collection_modifyitems(session, config, items):
    add_seed_sweeps(config, items)
    if config.getoption("attnref_longest_first"):
        longest_first(Path(str(config.rootpath)), items)


REPORT = Path("book") / "_data" / "report.json"


def longest_first(root: Path, items) -> None:
    try:
        known = json.loads((root / REPORT).read_text(encoding="utf-8")).get("unit_seconds") or {}
    except (OSError, ValueError, AttributeError):
        known = {}
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(name: str) -> float:
        try:
            return float(known[name])
        except (KeyError, TypeError, ValueError):
            return 10.0 if name.endswith(".ipynb") else 1.0

    order = sorted(files, key=lambda name: -cost(name))     # stable: ties keep collection order
    items[:] = [item for name in order for item in files[name]]


def add_seed_sweeps(config, items) -> None:
    """After each notebook's cells: the ``verdicts`` item (if its stored outputs hold verdicts) and,
    with ``--attnref-seeds``, the seed sweep."""
    seeds = _seeds(config)
    from nbval.plugin import IPyNbCell, IPyNbFile

    result, cells = [], []

    def flush():
        if cells:
            parent = cells[0].parent
            if stored_verdicts(cell.cell for cell in cells):
                result.append(VerdictCheck.from_parent(parent, name="verdicts"))
            if seeds:
                result.append(SeedSweep.from_parent(parent, name=f"seeds[{','.join(map(str, seeds))}]",
                                                    seeds=seeds, cells=list(cells)))
            cells.clear()

    for item in items:
        if isinstance(item, IPyNbCell) and isinstance(item.parent, IPyNbFile):
            if cells and cells[0].parent is not item.parent:
                flush()
            cells.append(item)
            result.append(item)
        else:
            flush()
            result.append(item)
    flush()
    items[:] = result


# Before each seed: an empty namespace (modules stay imported), the seed in the environment, and
# figures built but not drawn (plotting code still runs up to attnref.book.plotting.show, which with
# ATTNREF_FIGURES=off closes the figure undrawn; any other figure is not rasterised either): the
# stored figures are those of the default seed, drawn by the strict run, and drawing is most of
# a figure's cost.
SWEEP_PRELUDE = """%reset -f
import os as _os, sys as _sys
if "attnref.book.claims" in _sys.modules:
    _sys.modules["attnref.book.claims"].forget()
_os.environ["ATTNREF_SEED"] = "{seed}"
_os.environ["ATTNREF_FIGURES"] = "off"
for _mime in ("image/png", "image/jpeg", "image/svg+xml", "application/pdf"):
    get_ipython().display_formatter.formatters[_mime].enabled = False
del _os, _sys, _mime
"""

#: Asks the kernel for the verdicts computed so far (a JSON string; "[]" if attnref was never imported).
COMPUTED_EXPRESSION = ("__import__('json').dumps(__import__('sys').modules['attnref.book.claims'].computed()) "
                       "if 'attnref.book.claims' in __import__('sys').modules else '[]'")


def computed_verdicts(client) -> list[dict]:
    """The verdicts the notebook's kernel computed (``attnref.book.claims.computed()``)."""
    reply = client.execute_interactive("", store_history=False, allow_stdin=False, timeout=slowdown.limit(60),
                                       user_expressions={"computed": COMPUTED_EXPRESSION})
    result = reply["content"].get("user_expressions", {}).get("computed", {})
    if result.get("status") != "ok":
        raise SweepFailure(f"could not ask the kernel for its verdicts: {result}")
    return json.loads(ast.literal_eval(result["data"]["text/plain"]))


def unexpected(verdicts: list[dict]) -> list[str]:
    """One message per computed verdict that is not the expected one, naming its failing checks."""
    out = []
    for v in verdicts:
        if v.get("expected") is not None and v.get("verdict") == v.get("expected"):
            continue
        where = f" on {v['model']}" if v.get("model") else ""
        failing = "; ".join(
            f"{c['name']!r}{' (if ' + c['condition'] + ')' if c.get('condition') else ''}"
            f"{' (counterexample)' if c.get('bears_on') == 'counterexample' else ''}: "
            f"measured {c['measured']}, held to {c['held_to']}" for c in v.get("failing", []))
        expected = v.get("expected") or "no expected verdict in the registry"
        out.append(f"{v['id']}{where}: computed {v['verdict']!r}, expected {expected!r}; failing checks: "
                   + (failing or "none (the passing checks fit another verdict)"))
    return out


class VerdictCheck(pytest.Item):
    """After a notebook ran with the stored seed: every verdict it computed is the expected one."""

    def reportinfo(self):
        return self.path, None, f"{self.parent.name}::{self.name}"

    def runtest(self):
        kernel = self.parent.kernel
        if kernel is None or not kernel.is_alive():
            raise SweepFailure("the notebook's kernel is not running (a cell above timed out or crashed it)")
        capability = kernel_capability(kernel.kc)
        if capability is not None:
            self.user_properties.append(("cpu_capability", capability))
            asked = os.environ.get("ATEN_CPU_CAPABILITY")
            if asked and asked.upper() != capability.upper():
                raise SweepFailure(f"ATEN_CPU_CAPABILITY={asked} was asked for, but torch in the kernel runs "
                                   f"{capability}: the comparison did not exercise the path it names")
        problems = unexpected(computed_verdicts(kernel.kc))
        if problems:
            raise SweepFailure("a verdict is not the expected one:\n  " + "\n  ".join(problems))

    def repr_failure(self, excinfo):
        if excinfo.errisinstance(SweepFailure):
            return f"{self.path.name} {self.name}: {excinfo.value}"
        return super().repr_failure(excinfo)


class SweepFailure(Exception):
    pass


CAPABILITY_EXPRESSION = ("__import__('sys').modules['torch'].backends.cpu.get_cpu_capability() "
                         "if 'torch' in __import__('sys').modules else None")


def kernel_capability(client) -> str | None:
    """The CPU kernel path torch runs in the notebook's kernel (None if torch was never imported)."""
    reply = client.execute_interactive("", store_history=False, allow_stdin=False, timeout=slowdown.limit(60),
                                       user_expressions={"capability": CAPABILITY_EXPRESSION})
    result = reply["content"].get("user_expressions", {}).get("capability", {})
    if result.get("status") != "ok":
        raise SweepFailure(f"could not ask the kernel for torch's CPU capability: {result}")
    value = ast.literal_eval(result["data"]["text/plain"])
    return None if value is None else str(value)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line naming the CPU kernel paths the notebooks ran under (and MKL's instruction cap)."""
    paths: dict[str, str] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()) or ():
                if key == "cpu_capability":
                    paths[report.nodeid.split("::", 1)[0]] = value
    if paths:
        kinds = sorted(set(paths.values()))
        mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "unrestricted")
        terminalreporter.write_line(f"CPU kernel paths exercised: {', '.join(kinds)} "
                                    f"({len(paths)} notebooks; MKL_ENABLE_INSTRUCTIONS={mkl})")


class SeedSweep(pytest.Item):
    """Re-runs a notebook's code cells for other seeds in the kernel nbval started."""

    def __init__(self, *, seeds, cells, **kwargs):
        super().__init__(**kwargs)
        self.seeds = seeds
        self.cells = cells

    def reportinfo(self):
        return self.path, None, f"{self.parent.name}::{self.name}"

    def _run(self, client, code: str, timeout: float, where: str) -> list[dict]:
        outputs: list[dict] = []

        def hook(msg):
            kind = msg["msg_type"]
            if kind in ("execute_result", "display_data"):
                outputs.append(msg["content"])

        reply = client.execute_interactive(code, store_history=False, allow_stdin=False,
                                           output_hook=hook, timeout=timeout)
        content = reply["content"]
        if content["status"] != "ok":
            trace = ANSI.sub("", "\n".join(content.get("traceback", [])))
            raise SweepFailure(f"{where}: {content.get('ename')}: {content.get('evalue')}\n{trace}")
        return outputs

    def _seed_was_read(self, client) -> bool:
        """Whether the notebook's default-seed run read the seed through attnref.book.seeding."""
        reply = client.execute_interactive("", store_history=False, allow_stdin=False, timeout=slowdown.limit(60), user_expressions={
            "read": "__import__('sys').modules['attnref.book.seeding'].seed_was_read() "
                    "if 'attnref.book.seeding' in __import__('sys').modules else False"})
        result = reply["content"].get("user_expressions", {}).get("read", {})
        if result.get("status") != "ok":
            raise SweepFailure(f"could not ask the kernel whether the seed was read: {result}")
        return result["data"]["text/plain"] == "True"

    def runtest(self):
        kernel = self.parent.kernel
        if kernel is None or not kernel.is_alive():
            raise SweepFailure("the notebook's kernel is not running (a cell above timed out or crashed it)")
        client = kernel.kc
        timeout = float(self.config.getoption("nbval_cell_timeout") or 2000)
        if started_with_testenv():
            self._run(client, "import netguard as _ng\nassert _ng.installed(), 'network guard not installed'\ndel _ng",
                      60, "network guard check in the kernel")
        if not any(SEED_NAME in item.cell.source for item in self.cells) and not self._seed_was_read(client):
            pytest.skip(f"{self.path.name}: never read ATTNREF_SEED (attnref.book.seeding), so no result of it depends on the seed")
        stored = stored_verdicts(cell.cell for cell in self.cells)
        for seed in self.seeds:
            self._run(client, SWEEP_PRELUDE.format(seed=seed), 60, f"seed {seed}: reset")
            computed: dict[str, str] = {}
            for item in self.cells:
                if item.options.get("skip"):
                    continue
                where = f"seed {seed}, {item.name}"
                try:
                    outputs = self._run(client, item.cell.source, timeout, where)
                except SweepFailure:
                    if item.options.get("check_exception"):
                        continue
                    raise
                computed.update(verdicts_of(outputs))
            problems = unexpected(computed_verdicts(client))
            if problems:
                raise SweepFailure(f"seed {seed}: a verdict is not the expected one:\n  " + "\n  ".join(problems))
            changed = {cid: (stored[cid], computed.get(cid)) for cid in stored if computed.get(cid) != stored[cid]}
            if changed:
                detail = "; ".join(f"{cid}: stored {old!r}, computed {new!r}" for cid, (old, new) in changed.items())
                raise SweepFailure(f"seed {seed}: a verdict depends on the seed: {detail}")

    def repr_failure(self, excinfo):
        if excinfo.errisinstance(SweepFailure):
            return f"{self.path.name} {self.name}: {excinfo.value}"
        return super().repr_failure(excinfo)


def started_with_testenv() -> bool:
    """Whether this process ran tools/testenv/sitecustomize.py at start-up."""
    module = sys.modules.get("sitecustomize")
    return module is not None and Path(getattr(module, "__file__", "") or "").resolve().parent == HERE


def verdicts_of(outputs) -> dict[str, str]:
    """``{ID or "ID on model": verdict}`` of the verdict outputs among ``outputs``."""
    found = {}
    for output in outputs:
        verdict = (output.get("metadata") or {}).get(VERDICT_KEY)
        if isinstance(verdict, dict) and "id" in verdict:
            key = verdict["id"] + (f" on {verdict['model']}" if verdict.get("model") else "")
            found[key] = verdict.get("verdict")
    return found


def stored_verdicts(cells) -> dict[str, str]:
    found = {}
    for cell in cells:
        found.update(verdicts_of(cell.get("outputs", [])))
    return found
