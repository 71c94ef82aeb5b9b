"""Hygiene of the committed notebooks: what strict nbval does not check but a reader would see.

Every committed notebook (a placeholder without code cells is exempt from the output checks):

* has outputs, no error outputs, and was executed top to bottom in one fresh kernel
  (execution counts 1, 2, 3, … over its code cells, each result numbered like its cell);
* uses the kernel ``python3`` and carries exactly the metadata ``tools/execute_notebooks.py``
  writes (no timings, no machine-specific fields);
* shows nothing that depends on the machine or the run: no absolute paths or user names, no
  ipykernel temporary files, no memory addresses, no timestamps.

The last test keeps ``tests/nbval_sanitize.cfg`` minimal: every rule there must say why it is
needed and must match something in a stored output (a rule that matches nothing hides nothing
but could hide a future regression).
"""

from __future__ import annotations

import configparser
import copy
import getpass
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"

sys.path.insert(0, str(ROOT / "tools"))
from execute_notebooks import KERNELSPEC, normalise  # noqa: E402
sys.path.remove(str(ROOT / "tools"))

import nbformat  # noqa: E402

MACHINE_SPECIFIC = [
    (re.compile(r"(?<![\w.])/(?:root|home|work|tmp|Users|private|var/folders)/"), "an absolute machine path"),
    (re.compile(r"ipykernel_\d+"), "an ipykernel temporary file"),
    (re.compile(r"[A-Za-z]:\\\\(?:Users|Documents)"), "a Windows path"),
    (re.compile(re.escape(str(ROOT))), "this checkout's path"),
    (re.compile(r"\bat 0x[0-9a-fA-F]{6,}"), "a memory address (object repr)"),
    (re.compile(r"\b20\d\d-[01]\d-[0-3]\d[ T][0-2]\d:[0-5]\d"), "a timestamp"),
]
_user = getpass.getuser()
if _user not in ("root", ""):
    MACHINE_SPECIFIC.append((re.compile(rf"\b{re.escape(_user)}\b"), "the user name"))

# Binary payloads are not text a reader sees; their bytes are not searched.
BINARY_MIME = ("image/png", "image/jpeg", "application/pdf")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def visible_text(output: dict) -> str:
    """The text of an output a reader (or nbval) sees, with its metadata."""
    parts = [output.get("text", "") if isinstance(output.get("text"), str) else "".join(output.get("text", []))]
    for mime, value in (output.get("data") or {}).items():
        if mime not in BINARY_MIME:
            parts.append(value if isinstance(value, str) else json.dumps(value))
    parts.append(json.dumps(output.get("metadata") or {}))
    parts += output.get("traceback", [])
    return "\n".join(parts)


def needs_outputs(path: Path) -> bool:
    return bool(code_cells(load(path)))


@pytest.fixture(params=NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def notebook(request) -> tuple[str, dict]:
    return request.param.name, load(request.param)


@pytest.fixture(params=NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def executed(request) -> tuple[str, dict]:
    nb = load(request.param)
    if not code_cells(nb):
        pytest.skip(f"{request.param.name} is a placeholder without code cells")
    return request.param.name, nb


def test_every_code_cell_was_executed_and_has_outputs(executed):
    name, nb = executed
    cells = code_cells(nb)
    missing = [i for i, c in enumerate(cells) if c["source"] and c.get("execution_count") is None]
    assert not missing, f"{name}: code cells {missing} were never executed: run `make execute NOTEBOOKS=notebooks/{name}`"
    assert any(c.get("outputs") for c in cells), f"{name}: no outputs at all: run `make execute`"


def test_no_error_outputs(executed):
    name, nb = executed
    errors = [(i, o.get("ename")) for i, c in enumerate(code_cells(nb)) for o in c.get("outputs", [])
              if o["output_type"] == "error"]
    assert not errors, f"{name}: error outputs in code cells {errors}"


def test_execution_counts_are_in_order(executed):
    name, nb = executed
    counts = [c.get("execution_count") for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), f"{name}: execution counts {counts}, not 1, 2, 3, …"
    for count, cell in zip(counts, code_cells(nb)):
        for output in cell.get("outputs", []):
            if output["output_type"] == "execute_result":
                assert output.get("execution_count") == count, f"{name}: result of cell [{count}] numbered otherwise"


def test_kernel_and_metadata_are_normalised(notebook):
    name, nb = notebook
    assert nb["metadata"].get("kernelspec", {}).get("name") == KERNELSPEC["name"], f"{name}: kernel is not python3"
    normalised = nbformat.from_dict(copy.deepcopy(nb))
    normalise(normalised)
    assert normalised == nbformat.from_dict(nb), (
        f"{name}: metadata differ from what tools/execute_notebooks.py writes "
        f"(notebook: {sorted(nb['metadata'])}; cells with 'execution' metadata: "
        f"{[i for i, c in enumerate(nb['cells']) if 'execution' in c.get('metadata', {})]})")
    assert nb["nbformat"] == 4


def test_nothing_machine_specific_is_stored(notebook):
    name, nb = notebook
    texts = [("notebook metadata", json.dumps(nb["metadata"]))]
    for index, cell in enumerate(nb["cells"]):
        texts.append((f"cell {index} metadata", json.dumps(cell.get("metadata", {}))))
        texts += [(f"cell {index} output", visible_text(o)) for o in cell.get("outputs", [])]
    found = [f"{where}: {what} ({match.group(0)!r})"
             for where, text in texts for pattern, what in MACHINE_SPECIFIC
             for match in [pattern.search(text)] if match]
    assert not found, f"{name}: " + "; ".join(found)


def stored_output_texts() -> list[str]:
    texts = []
    for path in NOTEBOOKS:
        for cell in code_cells(load(path)):
            texts += [visible_text(o) for o in cell.get("outputs", [])]
    return texts


def test_every_sanitize_rule_is_explained_and_needed():
    text = SANITIZE.read_text(encoding="utf-8")
    parser = configparser.ConfigParser()
    parser.read_string(text)
    outputs = stored_output_texts()
    for section in parser.sections():
        block = text.split(f"[{section}]", 1)[1].split("\n[", 1)[0]
        assert any(line.strip().startswith("#") for line in block.splitlines()), \
            f"sanitize rule [{section}] does not say why it is needed"
        pattern = re.compile(parser[section]["regex"])
        assert any(pattern.search(o) for o in outputs), (
            f"sanitize rule [{section}] matches no stored output: remove it from {SANITIZE.name}")


def test_the_book_build_ignores_a_second_virtual_environment_in_the_checkout():
    """A checkout with another venv (e.g. `python -m venv env`) must not feed its packages'
    markdown and notebooks to Sphinx (`make book` crashed on one: exclude_patterns listed .venv only)."""
    import yaml
    from sphinx.util.matching import Matcher

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    patterns = Matcher(config["exclude_patterns"])
    # Sphinx skips a directory that matches, with everything below it
    parts = lambda path: ["/".join(path.split("/")[:k]) for k in range(1, path.count("/") + 2)]
    matcher = lambda path: any(patterns(p) for p in parts(path))
    for path in ("env/lib/python3.11/site-packages/pkg/README.md", "venv2/lib/python3.12/site-packages/a/b.ipynb",
                 "myenv/share/jupyter/kernels/x/kernel.md", "docs/DEVELOPING.md"):
        assert matcher(path), f"{path} would be built as a page of the book"
    for path in ("book/intro.md", "notebooks/01-nonlinearity.ipynb"):
        assert not matcher(path), f"{path} is a page of the book"


def test_every_recorded_check_says_what_it_rules_out():
    """Each check in every stored verdict carries its "fails if" line (the bug or alternative it
    rules out; issue #25): a check nobody can say how to fail is a check that cannot fail."""
    missing = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for output in cell.get("outputs", []):
                verdict = (output.get("metadata") or {}).get("attnref_verdict")
                for check in (verdict or {}).get("checks", []):
                    if not (check.get("fails_if") or "").strip():
                        missing.append(f"{path.name} {verdict['id']}: {check['name']}")
    assert not missing, "checks without a fails-if line:\n  " + "\n  ".join(missing)
