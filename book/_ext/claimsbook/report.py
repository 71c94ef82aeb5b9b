"""The execution report: a row per notebook from ``book/_data/report.json`` (``make bench``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .markup import _doc, _role_text, _table, escape, plain_title
from .scan import registry

REPORT_PATH = Path("book") / "_data" / "report.json"


def load_report(root: Path) -> tuple[dict | None, str | None]:
    """The execution report ``book/_data/report.json``: (data, None) or (None, why not)."""
    path = root / REPORT_PATH
    if not path.exists():
        return None, "absent"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        notebooks = data["notebooks"]
        for row in notebooks:
            float(row["seconds"]), str(row["name"]), str(row["status"])
    except (ValueError, KeyError, TypeError) as error:
        return None, f"malformed ({type(error).__name__}: {error})"
    return data, None


def _seconds(value) -> str:
    return "not measured" if value is None else f"{float(value):.1f} s"


def _status_badge(status) -> str:
    status = _role_text(status)
    kind = {"ok": "bdg-success", "no code cells": "bdg-muted-line"}.get(status, "bdg-danger")
    return f"{{{kind}}}`{status}`"


def _notebook_title(root: Path, name: str) -> str:
    """``6 · The claims on a trained decoder`` for ``06b-trained-decoder``: the chapter number from
    the name's leading digits, the title from the notebook's first heading (a chapter may have
    several notebooks); the bare name when the notebook is missing or has no heading."""
    path = root / "notebooks" / f"{name}.ipynb"
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return name
    headings = [line[2:].strip() for c in cells if c.get("cell_type") == "markdown"
                for line in "".join(c.get("source", "")).splitlines() if line.startswith("# ")]
    if not headings:
        return name
    digits = re.match(r"\d+", name)
    number = int(digits.group()) if digits else None
    prefix = f"{number} · " if number in registry.CHAPTERS else ""
    return prefix + plain_title(headings[0])


def render_report(root: Path, data: dict | None, why: str | None) -> str:
    """The execution report: a row per notebook, then the totals ``make bench`` measured.

    Required fields: ``notebooks`` (name, seconds, status); the others (``test_seconds``,
    ``build_seconds``, ``generated``, and what ``tools/bench.py`` adds: start-up times, cores,
    load average, statuses) are shown when present. The developers' targets (the start-up floor,
    the worker time by kind) are in ``docs/DEVELOPING.md``, not on the reader's page.
    """
    if data is None:
        return "\n".join([
            "```{warning}",
            f"No execution report: `{REPORT_PATH.as_posix()}` is {why}. "
            "`make bench` times every notebook, the tests and the build, and writes it.",
            "```"])
    rows = []
    for row in data["notebooks"]:
        name = str(row["name"])
        notebook = f"notebooks/{name}"
        title = _notebook_title(root, name)
        link = _doc(title, notebook) if (root / f"{notebook}.ipynb").exists() else escape(title)
        runs = [float(r) for r in row.get("runs") or []]
        spread = f" ({min(runs):.1f}–{max(runs):.1f})" if len(runs) > 1 else ""
        rows.append([link, f"{float(row['seconds']):.1f}{spread}", _status_badge(row["status"])])
    total = sum(float(row["seconds"]) for row in data["notebooks"])
    repeats = max((len(row.get("runs") or []) for row in data["notebooks"]), default=0)
    header = f"Run time (s): median of {repeats} (range)" if repeats > 1 else "Run time (s)"
    lines = _table(["Notebook", header, "Status"], rows, ["l", "r", "l"])
    lines += ["", f"All notebooks: {total:.1f} s of execution, each in a fresh kernel with one thread."]
    if data.get("startup_seconds") is not None:
        lines[-1] += (f" Of each notebook's time, {_seconds(data['startup_seconds'])} is start-up "
                      f"(kernel {_seconds(data.get('kernel_start_seconds'))}, imports "
                      f"{_seconds(data.get('import_seconds'))}).")
    test = f"`make test`: {_seconds(data.get('test_seconds'))}"
    if data.get("test_status") not in (None, "ok"):
        test += f" ({escape(data['test_status'])})"
    build = f"`make book`: {_seconds(data.get('build_seconds'))}"
    if data.get("build_status") not in (None, "ok"):
        build += f" ({escape(data['build_status'])})"
    lines += ["", f"{test}. {build}."]
    if data.get("cpu_kernel_paths"):
        lines += ["", "CPU kernel paths the notebooks were compared under: "
                  + "; ".join(escape(str(p)) for p in data["cpu_kernel_paths"]) + "."]
    where = f"Measured on {escape(data.get('generated', 'an unknown date'))}"
    if data.get("cores"):
        where += f" on {int(data['cores'])} cores"
    if data.get("load_average"):
        where += f", load average {float(data['load_average'][0]):.1f} at the start (other processes slow every number)"
    lines += ["", where + f", by `make bench`, which writes `{REPORT_PATH.as_posix()}`."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
