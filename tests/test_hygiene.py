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


# --- A book, not a log (issue #29 item 6) -------------------------------------------------------

#: What a reader sees of an output: the richest format the page renders. A plain-text part beside
#: an image, HTML, Markdown or LaTeX is never shown, so only a text-only output shows its repr.
RICH_MIME = ("image/png", "image/jpeg", "image/svg+xml", "text/html", "text/markdown", "text/latex")
#: Reprs a reader should never see: the typeset statement or a sentence says it instead.
REPR_LIKE = [
    (re.compile(r"^(True|False)$"), "a bare True/False (the flag of the last check: assign it, `_ = …`)"),
    (re.compile(r"^\{\s*'[^']*'\s*:"), "a dict repr (show a table: attnref.book.typeset.array)"),
    (re.compile(r"^\(.*,.*\)$", re.S), "a tuple repr (show named equations: typeset.equations)"),
    (re.compile(r"^-?\d+(\.\d+)?$"), "a bare number (say what it counts: typeset.sentence)"),
    (re.compile(r"^Matrix\(\["), "a sympy Matrix repr"),
    (re.compile(r"<[\w.]+ object at 0x"), "an object repr"),
    (re.compile(r"\btensor\("), "a torch tensor repr"),
]
#: A code cell that checks (a recorder call of attnref.book.claims, or an assert) is folded: the
#: reader sees its typeset result and the verdict, and can open the code.
CHECK_CALL = re.compile(r"\.(true|false|at_most|at_least|close|exact)\(|^\s*assert\s", re.M)
FOLDED = {"hide-input", "remove-input", "hide-cell", "remove-cell"}


def shown_plain_text(output: dict) -> str | None:
    """The plain text a reader sees of ``output`` (None when a richer format is shown)."""
    if output["output_type"] == "stream":
        return None if output.get("name") == "stderr" else "".join(output.get("text", ""))
    data = output.get("data") or {}
    if output["output_type"] not in ("execute_result", "display_data") or any(m in data for m in RICH_MIME):
        return None
    text = data.get("text/plain", "")
    return text if isinstance(text, str) else "".join(text)


def reprs_shown(nb: dict) -> list[str]:
    found = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or set(cell.get("metadata", {}).get("tags", [])) & {"remove-output", "remove-cell"}:
            continue
        for output in cell.get("outputs", []):
            text = shown_plain_text(output)
            if text is None or not text.strip():
                continue
            for pattern, what in REPR_LIKE:
                # a stream is prose: only reprs that cannot be sentences count there
                if output["output_type"] == "stream" and what.startswith(("a bare", "a tuple", "a dict")):
                    continue
                if pattern.search(text.strip()):
                    found.append(f"cell {index}: {what}: {text.strip()[:60]!r}")
    return found


def unfolded_check_cells(nb: dict) -> list[int]:
    return [index for index, cell in enumerate(nb["cells"])
            if cell["cell_type"] == "code" and CHECK_CALL.search("".join(cell["source"]))
            and not FOLDED & set(cell.get("metadata", {}).get("tags", []))]


def test_no_bare_flag_or_python_repr_is_shown(executed):
    name, nb = executed
    found = reprs_shown(nb)
    assert not found, f"{name} shows Python reprs instead of a statement:\n  " + "\n  ".join(found)


def test_no_figure_warning_is_shown(executed):
    """plotting.show warns on the cell's stderr about text outside a figure; the page shows it."""
    name, nb = executed
    warned = [index for index, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"
              for output in cell.get("outputs", []) if output["output_type"] == "stream"
              and output.get("name") == "stderr" and "outside the figure" in "".join(output.get("text", ""))]
    assert not warned, f"{name}: figure text outside the figure in cells {warned}"


def test_check_cells_are_folded(notebook):
    name, nb = notebook
    cells = unfolded_check_cells(nb)
    assert not cells, (f"{name}: code cells {cells} run checks but are shown open: tag them hide-input "
                       "(the reader sees the typeset result and the verdict, and can open the code)")


def test_the_presentation_rules_catch_what_they_name():
    """Each rule fails on the output it names and passes on its typeset replacement."""
    def result(text, mime="text/plain"):
        return {"cells": [{"cell_type": "code", "metadata": {}, "source": "x",
                           "outputs": [{"output_type": "execute_result", "data": {mime: text}, "metadata": {}}]}]}
    for shown in ("True", "{'float16': (25*log(2), 11*log(2))}", "(1/d, 3/(d*(d + 2)))", "746",
                  "Matrix([[1, 0]])", "<Foo object at 0x7f00aa11bb22>", "tensor([1., 2.])"):
        assert reprs_shown(result(shown)), shown
    for fine in ("Q1: holds (16/16 checks passed)", "<Figure size 500x320 with 1 Axes>"):
        assert not reprs_shown(result(fine)), fine
    assert not reprs_shown(result(r"$\displaystyle g_0 = 25 \ln 2$", "text/latex"))
    check = {"cells": [{"cell_type": "code", "metadata": {}, "source": "q1.at_most('x', 1, 2)\n", "outputs": []}]}
    assert unfolded_check_cells(check) == [0]
    check["cells"][0]["metadata"]["tags"] = ["hide-input"]
    assert unfolded_check_cells(check) == []
