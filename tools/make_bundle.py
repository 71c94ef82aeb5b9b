"""Build the download bundle: everything a reader needs to run the book's notebooks at home.

    python tools/make_bundle.py [--out _build/downloads/attention-claims-bundle.zip]

The zip holds one folder, ``attention-claims/``, with

* ``notebooks/*.ipynb`` — every chapter, with its stored outputs;
* ``data/`` — the stored decoder measurements (``make measure``) and training results
  (``make experiments``) that chapters 6b and 8 read;
* ``attnref-<version>-py3-none-any.whl`` — the reference package as a wheel
  (``pip wheel --no-deps .``, built from this checkout, offline);
* ``requirements.lock`` — the exact environment the outputs were made with;
* ``README.md`` — how to install (venv, torch first, the lock, the wheel) and run a notebook.

The entries have a fixed timestamp and order, so the same sources give the same zip bytes except
for the wheel, which setuptools stamps itself. ``make bundle`` runs this; ``make book`` runs
``make bundle`` first and the site links the zip (book/_ext/book_site.py).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "_build" / "downloads" / "attention-claims-bundle.zip"
FOLDER = "attention-claims"
EPOCH = (2026, 1, 1, 0, 0, 0)   # every entry's timestamp: the zip depends only on its contents

README = """\
# attention-claims: the notebooks, to run on your own machine

This folder holds every notebook of the book *attention-claims* (with the outputs the book
shows), the reference package `attnref` as a wheel ({wheel}), and `requirements.lock`, the
exact versions the stored outputs were made with. You need Python 3.11 or newer and pip;
the first install downloads about 1 GB (torch, the Jupyter stack, the trained model of chapter 6).

## Install

```bash
cd {folder}
python3 -m venv .venv
. .venv/bin/activate                     # Windows: .venv\\Scripts\\activate
# 1. torch first, the CPU build (an unpinned or default torch on Linux pulls a CUDA build):
pip install torch=={torch} --index-url https://download.pytorch.org/whl/cpu
# 2. everything else, at the versions of the lock:
pip install -r requirements.lock
# 3. the reference package, from this folder:
pip install --no-deps {wheel}
```

## Run a notebook

Interactively: `jupyter lab notebooks/` (JupyterLab is not in the lock: `pip install jupyterlab`),
or `jupyter notebook`, then open a chapter and run all cells.

From the command line, executing a chapter and keeping its outputs next to the original:

```bash
jupyter nbconvert --to notebook --execute notebooks/01-nonlinearity.ipynb --output /tmp/01-executed.ipynb
```

Each chapter runs in about 10 s on one core. Random draws are seeded: `ATTNREF_SEED=3 jupyter ...`
runs a chapter with another seed (the checks and verdicts hold for any seed; the printed numbers
change). The last cell of each claim section records the claim's checks; the verdict is computed
from them, never typed.

What this bundle does not hold: the book's build (Jupyter Book configuration, prose pages) and the
test suite; those are in the book's repository.
"""


def build_wheel(target: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the package sources (setuptools leaves ``build/`` and
    ``*.egg-info`` next to the sources it builds: in the copy, not in the checkout)."""
    source = target / "source"
    source.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", source / "pyproject.toml")
    shutil.copytree(ROOT / "attnref", source / "attnref",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--wheel-dir", str(target), str(source)],
                   check=True, cwd=target)
    (wheel,) = target.glob("attnref-*.whl")
    return wheel


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(f"{FOLDER}/{name}", date_time=EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    archive.writestr(info, data)


def torch_pin() -> str:
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit("requirements.lock pins no torch")


def make_bundle(out: Path) -> Path:
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp))
        partial = out.with_suffix(".zip.part")
        with zipfile.ZipFile(partial, "w") as archive:
            _add(archive, "README.md", README.format(wheel=wheel.name, folder=FOLDER, torch=torch_pin(),
                                                     version=version).encode())
            _add(archive, "requirements.lock", (ROOT / "requirements.lock").read_bytes())
            _add(archive, wheel.name, wheel.read_bytes())
            for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
                _add(archive, f"notebooks/{notebook.name}", notebook.read_bytes())
            # the stored measurements and training results that chapters 6b and 8 read
            for data in sorted((ROOT / "data").rglob("*")):
                if data.is_file():
                    _add(archive, data.relative_to(ROOT).as_posix(), data.read_bytes())
        partial.replace(out)
    print(f"bundle: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} "
          f"({out.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.1f} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    make_bundle(parser.parse_args(argv).out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
