"""The download bundle (``make bundle``, tools/make_bundle.py) runs a notebook outside this checkout.

What the test does, offline:

1. builds the bundle into a temporary folder and unpacks it;
2. creates a fresh virtual environment (``python -m venv --without-pip``) and installs the
   bundle's attnref wheel into it with ``pip --python <venv> install --no-deps --no-index``;
3. executes one chapter from the unpacked bundle (the fastest of the last ``make bench``) in a
   kernel running on the new environment's interpreter, and checks that every cell ran without
   an error, that ``attnref`` was imported from the new environment (not from this checkout),
   and that the notebook recorded the verdicts of its chapter's claims, each the expected one.

Honest limits: the bundle's third-party dependencies (torch, sympy, matplotlib, myst-nb, …, about
1 GB) are NOT reinstalled from ``requirements.lock``; the project's ``.venv`` site-packages are put
on the new environment's path by a ``.pth`` file, read-only (their own ``.pth`` files, among them
the editable install of attnref, are not processed: this checkout's attnref is not importable
there). So the test shows that the wheel is complete and importable, that the notebooks in the
zip run from the zip's folder against the bundled attnref, and that the README's install steps name
files that exist; it does not show that ``pip install -r requirements.lock`` resolves on a new
machine (``make install`` does that from the same lock, on every fresh CI machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_bundle  # noqa: E402

from attnref.book import claims  # noqa: E402

FALLBACK_NOTEBOOK = "02-linear-layers"


def fastest_notebook() -> str:
    report = ROOT / "book" / "_data" / "report.json"
    try:
        timed = [(n["seconds"], n["name"]) for n in json.loads(report.read_text())["notebooks"]
                 if n.get("status") == "ok" and n["name"] in {c.notebook.split("/")[-1] for c in claims.CHAPTERS.values()}
                 and (ROOT / "notebooks" / f"{n['name']}.ipynb").exists()]
        return min(timed)[1] if timed else FALLBACK_NOTEBOOK
    except (OSError, KeyError, ValueError):
        return FALLBACK_NOTEBOOK


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "attention-claims-bundle.zip"
    make_bundle.make_bundle(out)
    return out


def test_bundle_holds_notebooks_wheel_lock_and_readme(bundle: Path) -> None:
    names = set(zipfile.ZipFile(bundle).namelist())
    notebooks = {f"attention-claims/notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert notebooks and notebooks <= names
    assert {"attention-claims/README.md", "attention-claims/requirements.lock"} <= names
    (wheel,) = [n for n in names if n.endswith(".whl")]
    readme = zipfile.ZipFile(bundle).read("attention-claims/README.md").decode()
    # The README's install order: venv, torch first, the lock, then the wheel by its file name.
    steps = [readme.index(s) for s in ("python3 -m venv", "pip install torch==", "pip install -r requirements.lock",
                                       f"pip install --no-deps {wheel.rsplit('/', 1)[1]}")]
    assert steps == sorted(steps)
    assert zipfile.ZipFile(bundle).read("attention-claims/requirements.lock") == (ROOT / "requirements.lock").read_bytes()


def test_the_wheel_holds_every_module_of_attnref(bundle: Path) -> None:
    """Every ``.py`` file and stored data file of attnref is in the wheel (a subpackage missing
    from pyproject.toml's package list would leave its chapter unable to import it)."""
    archive = zipfile.ZipFile(bundle)
    (wheel_name,) = [n for n in archive.namelist() if n.endswith(".whl")]
    with zipfile.ZipFile(archive.open(wheel_name)) as wheel:
        shipped = {n for n in wheel.namelist() if n.startswith("attnref/")}
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "attnref").rglob("*")
               if p.is_file() and p.suffix in (".py", ".safetensors") and "__pycache__" not in p.parts}
    missing = sorted(sources - shipped)
    assert not missing, f"not in the wheel (add the package to pyproject.toml): {missing}"


def test_a_notebook_runs_from_the_unpacked_bundle_in_a_fresh_venv(bundle: Path, tmp_path: Path) -> None:
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient

    folder = tmp_path / "unpacked"
    zipfile.ZipFile(bundle).extractall(folder)
    folder = folder / "attention-claims"
    (wheel,) = folder.glob("attnref-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # The project's dependencies, read-only, after the venv's own site-packages (see the docstring).
    (site / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", "--disable-pip-version-check", str(wheel)], check=True)
    where = subprocess.run([str(python), "-c", "import attnref; print(attnref.__file__)"], check=True,
                           capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert Path(where).is_relative_to(venv), f"attnref imported from {where}, not from the new venv"

    # A kernel on the new interpreter, run from the unpacked notebooks' folder, offline and
    # one-threaded like every kernel of the tests (tools/testenv holds no attnref).
    kernels = tmp_path / "kernels"
    spec_dir = kernels / "kernels" / "bundle-venv"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "bundle venv", "language": "python",
        "env": {"PYTHONPATH": str(ROOT / "tools" / "testenv"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}}))
    name = fastest_notebook()
    path = folder / "notebooks" / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import attnref; print(attnref.__file__)"))
    manager = KernelManager(kernel_name="bundle-venv",
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels / "kernels")]))
    client = NotebookClient(nb, km=manager, timeout=300, kernel_name="bundle-venv",
                            resources={"metadata": {"path": str(path.parent)}})
    old = os.environ.pop("ATTNREF_SEED", None)
    try:
        client.execute()   # raises CellExecutionError with the failing cell on the first error
    finally:
        if old is not None:
            os.environ["ATTNREF_SEED"] = old
    imported = "".join(o.get("text", "") for o in nb.cells[-1].outputs).strip()
    assert Path(imported).is_relative_to(venv), f"the kernel imported attnref from {imported}"

    verdicts = [o.metadata[claims.METADATA_KEY] for cell in nb.cells for o in cell.get("outputs", [])
                if claims.METADATA_KEY in o.get("metadata", {})]
    chapter = next(c.number for c in claims.CHAPTERS.values() if c.notebook.endswith(name))
    expected_ids = {c.id for c in claims.CLAIMS.values() if c.chapter == chapter}
    recorded = {v["id"] for v in verdicts if not v.get("model")}
    assert expected_ids <= recorded, f"{name}: no verdict recorded for {sorted(expected_ids - recorded)}"
    wrong = [f"{v['id']}: {v['verdict']} (expected {v['expected']})" for v in verdicts
             if v.get("expected") and v["verdict"] != v["expected"]]
    assert not wrong, f"{name}: verdicts that differ from the catalogue: {wrong}"
