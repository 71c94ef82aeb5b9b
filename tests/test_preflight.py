"""Bad input end to end: a broken notebook or a missing package gives one actionable line.

``tools/preflight.py`` runs before ``make test`` and ``make book``; the pytest plugin
``tools/testenv/nbplugin.py`` gives the same line when pytest collects a broken notebook.
Each case builds a small repository in a temporary folder (the real one is never touched).
The cases are checked in-process (``preflight.problems``, fast); the command line, ``make``
and pytest are each run once end to end for the exit status and the absence of a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PREFLIGHT = ROOT / "tools" / "preflight.py"
TESTENV = ROOT / "tools" / "testenv"

GOOD = {"cells": [{"cell_type": "markdown", "id": "a1", "metadata": {}, "source": ["# Title"]},
                  {"cell_type": "code", "id": "a2", "metadata": {}, "execution_count": 1,
                   "outputs": [], "source": ["1 + 1"]}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}


def broken(**changes) -> str:
    nb = json.loads(json.dumps(GOOD))
    nb.update(changes)
    return json.dumps(nb, indent=1)


def cell_changed(index: int, **changes) -> str:
    nb = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if value is None:
            del nb["cells"][index][key]
        else:
            nb["cells"][index][key] = value
    return json.dumps(nb, indent=1)


#: name → (file content, the one line expected, after "notebooks/bad.ipynb: ")
NOTEBOOK_CASES = {
    "truncated JSON": (json.dumps(GOOD, indent=1)[:120], "not valid JSON (line "),
    "trailing comma": (json.dumps(GOOD, indent=1).replace('"nbformat": 4', '"nbformat": 4,,'),
                       "not valid JSON (line "),
    "merge conflict": ("<<<<<<< HEAD\n" + json.dumps(GOOD), "(an unresolved merge conflict?)"),
    "empty file": ("", "empty file"),
    "not UTF-8": (b'{"cells": [], "x": "\xff"}', "not UTF-8 text (byte 20)"),
    "JSON list": ("[]", 'not a Jupyter notebook (no "cells" list at the top level)'),
    "nbformat 3": (broken(nbformat=3), "nbformat 3, expected 4"),
    "cell without type": (cell_changed(0, cell_type=None), "cell 0 has cell_type None"),
    "unknown cell type": (cell_changed(1, cell_type="python"), "cell 1 has cell_type 'python'"),
    "cell without source": (cell_changed(1, source=None), "cell 1 (code) has no source"),
    "schema violation": (cell_changed(1, outputs=[{"output_type": "stream"}]), "not a valid notebook at cells/1/outputs/0"),
}


def make_repository(tmp_path: Path, notebook: str | bytes | None = None) -> Path:
    """A minimal copy of the repository: good notebook, the real _toc-free layout, a bad one."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "good.ipynb").write_text(json.dumps(GOOD), encoding="utf-8")
    if notebook is not None:
        path = tmp_path / "notebooks" / "bad.ipynb"
        path.write_bytes(notebook if isinstance(notebook, bytes) else notebook.encode("utf-8"))
    return tmp_path


@pytest.fixture(scope="module")
def preflight():
    sys.path.insert(0, str(PREFLIGHT.parent))
    try:
        import preflight
    finally:
        sys.path.remove(str(PREFLIGHT.parent))
    return preflight


@pytest.fixture
def problems(preflight, monkeypatch):
    """preflight's problems for a temporary repository (ATTNREF_SEED unset unless a test sets it)."""
    monkeypatch.delenv("ATTNREF_SEED", raising=False)
    return lambda root: preflight.problems(root)


def one_line(found: list[str], expected: str) -> str:
    assert len(found) == 1, found
    assert expected in found[0], found[0]
    return found[0]


def test_the_repository_passes_preflight(problems):
    assert problems(ROOT) == []


@pytest.mark.parametrize("case", list(NOTEBOOK_CASES))
def test_a_broken_notebook_gives_one_line(tmp_path, problems, case):
    content, expected = NOTEBOOK_CASES[case]
    line = one_line(problems(make_repository(tmp_path, content)), expected)
    assert line.startswith("notebooks/bad.ipynb: ")


def test_the_command_line_prints_one_line_and_exits_1(tmp_path):
    text = '{\n "cells": [\n  {"cell_type": "code",, }\n ]\n}\n'
    env = {k: v for k, v in os.environ.items() if k != "ATTNREF_SEED"}
    result = subprocess.run([sys.executable, str(PREFLIGHT), "--root", str(make_repository(tmp_path, text))],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == ("preflight: notebooks/bad.ipynb: not valid JSON (line 3, column 24): "
                             "Expecting property name enclosed in double quotes\n")


def test_a_missing_dependency_says_run_make_install(tmp_path, problems):
    repository = make_repository(tmp_path)
    (repository / "requirements.txt").write_text("# pins\nattention-claims-absent-probe==1.0\n")
    line = one_line(problems(repository), "missing dependency attention-claims-absent-probe==1.0")
    assert line.endswith("run `make install`")


def test_a_missing_module_says_run_make_install(preflight, monkeypatch):
    monkeypatch.setitem(preflight.DEPENDENCIES, "attention_claims_absent_module", "absent-dist")
    assert preflight.dependency_problems() == [
        "missing dependency absent-dist (import attention_claims_absent_module): run `make install`"]


def test_a_wrong_pin_says_run_make_install(tmp_path, problems):
    repository = make_repository(tmp_path)
    (repository / "requirements.txt").write_text("pytest==0.0.1\n")
    one_line(problems(repository), "is installed but requirements.txt pins 0.0.1: run `make install`")


def test_a_non_integer_seed_is_named(tmp_path, problems, monkeypatch):
    repository = make_repository(tmp_path)
    monkeypatch.setenv("ATTNREF_SEED", "abc")
    one_line(problems(repository), "ATTNREF_SEED='abc' is not an integer")


def test_a_toc_entry_without_a_file_is_named(tmp_path, problems):
    repository = make_repository(tmp_path)
    (repository / "_toc.yml").write_text("format: jb-book\nroot: notebooks/good\nchapters:\n  - file: notebooks/gone\n")
    one_line(problems(repository), "_toc.yml: notebooks/gone does not exist")


def test_an_invalid_toc_is_named(tmp_path, problems):
    repository = make_repository(tmp_path)
    (repository / "_toc.yml").write_text("root: [unclosed\n")
    one_line(problems(repository), "_toc.yml: not valid YAML (line 2, column 1)")


@pytest.mark.parametrize("target", ["test", "book"])
def test_make_stops_at_the_first_line(tmp_path, target):
    """`make test` / `make book` on a checkout with a broken notebook: one line, pytest never starts.

    The temporary checkout uses the real environment through BIN, with its own install stamp
    (newer than its requirements) and PYTHON=false, so make can never re-install anything.
    """
    repository = make_repository(tmp_path, '{"cells": [}')
    for name in ("Makefile", "requirements.lock", "requirements-nodeps.txt", "pyproject.toml"):
        shutil.copy2(ROOT / name, repository / name)        # copy2 keeps the (older) times
    (repository / "tools").mkdir()
    shutil.copy2(PREFLIGHT, repository / "tools" / "preflight.py")
    stamp = repository / "installed"
    stamp.touch()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    result = subprocess.run(["make", "--no-print-directory", "-s", f"BIN={Path(sys.executable).parent}",
                             f"STAMP={stamp}", "PYTHON=false", target],
                            cwd=repository, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert lines[0] == ("preflight: notebooks/bad.ipynb: not valid JSON (line 1, column 12): "
                        "Expecting value"), lines
    assert len(lines) == 2 and re.match(r"make(\[\d+\])?: \*\*\* ", lines[1]), lines   # make's own status line
    assert "Traceback" not in result.stderr


def test_pytest_collection_of_a_broken_notebook_gives_one_line(pytester):
    """Without make: pytest itself (with the plugin) reports the line instead of nbval's traceback."""
    make_repository(pytester.path, '{"cells": [}')
    result = pytester.runpytest_inprocess("-p", "nbplugin", "-p", "no:xdist", "--nbval-lax",
                                          "--co", "-q", "notebooks/bad.ipynb")
    assert result.ret != 0
    output = result.stdout.str()
    assert "notebooks/bad.ipynb: not valid JSON (line 1, column 12): Expecting value" in output
    assert "Traceback" not in output and "NotJSONError" not in output, output
