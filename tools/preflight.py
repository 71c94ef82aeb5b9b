"""Check, in well under a second, what would otherwise fail as a long traceback.

    python tools/preflight.py [--root DIR]

Run by ``make test`` and ``make book`` before anything else. Prints one actionable line per
problem and exits 1 if there is any; prints nothing and exits 0 otherwise:

* every notebook (``notebooks/*.ipynb``, ``book/**/*.ipynb``) is UTF-8, valid JSON, a
  version-4 notebook whose cells have a known type, and passes the nbformat schema;
* every file listed in ``_toc.yml`` exists;
* the packages the tests and the build need can be found (without importing them: torch alone
  takes seconds), and the top-level pins of ``requirements.txt`` are the installed versions;
* ``ATTNREF_SEED``, if set, is an integer.

The notebook check is also used by the pytest plugin ``tools/testenv/nbplugin.py``, so that a
broken notebook collected by pytest gives the same one line.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX_INSTALL = "run `make install`"
CELL_TYPES = {"code", "markdown", "raw"}

#: import name → distribution name (for the message) of everything the tests and the build import.
DEPENDENCIES = {
    "torch": "torch",
    "numpy": "numpy",
    "sympy": "sympy",
    "mpmath": "mpmath",
    "matplotlib": "matplotlib",
    "nbformat": "nbformat",
    "nbclient": "nbclient",
    "jupyter_client": "jupyter-client",
    "ipykernel": "ipykernel",
    "nbval": "nbval",
    "pytest": "pytest",
    "xdist": "pytest-xdist",
    "hypothesis": "hypothesis",
    "jupyter_book": "jupyter-book",
    "myst_nb": "myst-nb",
    "sphinx": "sphinx",
    "sphinx_proof": "sphinx-proof",
    "sphinxcontrib.bibtex": "sphinxcontrib-bibtex",
    "yaml": "pyyaml",
    "attnref": "attnref (this repository, installed editable)",
}


def relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def notebook_problem(path: Path, root: Path = ROOT) -> str | None:
    """One line saying what is wrong with the notebook file at ``path``, or None if nothing."""
    name = relative(path, root)
    try:
        raw = path.read_bytes()
    except OSError as error:
        return f"{name}: cannot be read ({error.strerror})"
    if not raw.strip():
        return f"{name}: empty file: restore it from git or re-create it"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"{name}: not UTF-8 text (byte {error.start}): re-save it as UTF-8"
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as error:
        line = text.splitlines()[error.lineno - 1] if error.lineno <= len(text.splitlines()) else ""
        hint = " (an unresolved merge conflict?)" if line.startswith(("<<<<<<<", "=======", ">>>>>>>")) else ""
        return f"{name}: not valid JSON (line {error.lineno}, column {error.colno}): {error.msg}{hint}"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return f'{name}: not a Jupyter notebook (no "cells" list at the top level)'
    if nb.get("nbformat") != 4:
        return f"{name}: nbformat {nb.get('nbformat')!r}, expected 4: open and re-save it with Jupyter"
    for index, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict):
            return f"{name}: cell {index} is not a JSON object"
        kind = cell.get("cell_type")
        if kind not in CELL_TYPES:
            return f"{name}: cell {index} has cell_type {kind!r}, expected one of {sorted(CELL_TYPES)}"
        if "source" not in cell:
            return f"{name}: cell {index} ({kind}) has no source"
    try:
        import nbformat
        from nbformat.validator import ValidationError
    except ImportError:
        return None    # reported by dependency_problems()
    try:
        nbformat.validate(nb, version=4)
    except ValidationError as error:
        path = list(getattr(error, "absolute_path", None) or error.path)
        where = "/".join(str(p) for p in path) or "top level"
        message = str(error.message).splitlines()[0]
        return f"{name}: not a valid notebook at {where}: {message}"
    return None


def notebook_paths(root: Path) -> list[Path]:
    paths = sorted((root / "notebooks").glob("*.ipynb"))
    paths += sorted(p for p in (root / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    return paths


def toc_problems(root: Path) -> list[str]:
    toc = root / "_toc.yml"
    if not toc.exists():
        return []
    try:
        import yaml
    except ImportError:
        return []
    try:
        data = yaml.safe_load(toc.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return [f"_toc.yml: not valid YAML{where}: {getattr(error, 'problem', error)}"]
    problems = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    stem = root / node[key]
                    if not any(stem.with_name(stem.name + s).exists() for s in ("", ".md", ".ipynb", ".rst")):
                        problems.append(f"_toc.yml: {node[key]} does not exist (no .md or .ipynb file of that name)")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    return problems


def dependency_problems() -> list[str]:
    problems = []
    for module, distribution in DEPENDENCIES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            problems.append(f"missing dependency {distribution} (import {module}): {FIX_INSTALL}")
    return problems


def pin_problems(root: Path) -> list[str]:
    requirements = root / "requirements.txt"
    if not requirements.exists():
        return []
    problems = []
    for line in requirements.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" not in line:
            continue
        name, pinned = (part.strip() for part in line.split("==", 1))
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"missing dependency {name}=={pinned}: {FIX_INSTALL}")
            continue
        if installed.split("+", 1)[0] != pinned:
            problems.append(f"{name} {installed} is installed but requirements.txt pins {pinned}: {FIX_INSTALL}")
    return problems


def environment_problems() -> list[str]:
    seed = os.environ.get("ATTNREF_SEED")
    if seed is not None:
        try:
            int(seed)
        except ValueError:
            return [f"ATTNREF_SEED={seed!r} is not an integer: unset it or set it to e.g. 1"]
    return []


def problems(root: Path = ROOT) -> list[str]:
    found = dependency_problems() + pin_problems(root) + environment_problems()
    for path in notebook_paths(root):
        problem = notebook_problem(path, root)
        if problem:
            found.append(problem)
    return found + toc_problems(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    found = problems(args.root.resolve())
    for line in found:
        print(f"preflight: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
