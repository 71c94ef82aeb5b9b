"""Build the download bundle: everything a reader needs to run the book's notebooks at home.

    python tools/make_bundle.py [--out _build/downloads/attention-claims-bundle.zip]

The zip holds one folder, ``attention-claims/``, with

* ``notebooks/*.ipynb`` — every chapter, with its stored outputs;
* ``data/`` — the stored decoder measurements and training results that chapters 6b and 8 read;
* ``tools/measure_decoder.py``, ``tools/measure_gemma.py``, ``tools/run_experiments.py`` — the scripts that recompute them;
* ``attnref-<version>-py3-none-any.whl`` — the reference package as a wheel
  (``pip wheel --no-deps .``, built from this checkout, offline);
* ``requirements-reader.lock`` (+ ``requirements-reader-nodeps.lock``) — the notebooks' runtime only,
  at the versions the stored outputs were made with (tools/make_reader_lock.py; a subset of the
  developers' ``requirements.lock`` with equal pins);
* ``README.md`` — the install and run commands (every one of them is run by tests/test_bundle.py
  from the unpacked zip; ``make bundle-check`` runs them against the package registry) and, per
  chapter, whether it recomputes what it shows or reads stored results, and how to recompute them.

The entries have a fixed timestamp and order, so the same sources give the same zip bytes except
for the wheel, which setuptools stamps itself. ``make bundle`` runs this; ``make book`` runs
``make bundle`` first and the site links the zip (book/_ext/book_site.py).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import reader_numbers  # noqa: E402  (the measured numbers, shared with the reproduce page)
DEFAULT_OUT = ROOT / "_build" / "downloads" / "attention-claims-bundle.zip"
FOLDER = "attention-claims"
EPOCH = (2026, 1, 1, 0, 0, 0)   # every entry's timestamp: the zip depends only on its contents
LOCKS = ("requirements-reader.lock", "requirements-reader-nodeps.lock")
TOOLS = ("tools/measure_decoder.py", "tools/measure_gemma.py", "tools/run_experiments.py",
         "tools/measure_ch10.py", "tools/measure_ch10b.py")
EXAMPLE = "02-linear-layers"   # the chapter the README runs as its example (a fast one)

# The chapters that read stored results instead of computing them (the README says so, with the
# command that recomputes them; tests/test_bundle.py checks that exactly these notebooks read data/).
STORED = {
    "06b-trained-decoder": (
        "reads `data/smollm2-measurements.npz` and `.json` (the trained decoder run over the text set)",
        "python tools/measure_decoder.py", "{measure_time}"),
    "06c-qk-norm-model": (
        "reads `data/gemma3-measurements.npz` and `.json` (Gemma 3 270M run over the text set and a long text) "
        "and `data/audit/*/report.json` (`attnref audit` on the three trained models)",
        "python tools/measure_gemma.py && python -m attnref.audit.book_models",
        "a time not yet measured on an idle machine; each audit's own time is in its report, `seconds`"),
    "08-training": (
        "reads `data/experiments/e*.json` (the training runs) and `data/experiments/portable/` (the same "
        "runs on torch's portable kernels)",
        "python tools/run_experiments.py --jobs 2 && ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 "
        "python tools/run_experiments.py --jobs 2 --recheck --out data/experiments/portable",
        "{experiments_time}, the recheck on the portable kernels included"),
    "10-ffn-memory": (
        "reads `data/ch10-measurements.npz` and `.json` (the FFN slot weights, attention weights, sink "
        "blocks and norm statistics of the three trained models on the text set)",
        "python tools/measure_ch10.py",
        "a time not yet measured on an idle machine; the file's own `total_seconds` holds it"),
    "10b-basis-and-gates": (
        "reads `data/ch10b-measurements.json` (SmolLM2 and Gemma 3 with every weight rotated, against the "
        "unrotated models)",
        "python tools/measure_ch10b.py",
        "a time not yet measured on an idle machine; the file's own `total_seconds` holds it"),
}

README = """\
# attention-claims: the notebooks, to run on your own machine

This folder holds every notebook of the book *attention-claims* (with the outputs the book
shows), the reference package `attnref` as a wheel ({wheel}), the stored results two chapters
read (`data/`) with the scripts that recompute them (`tools/`), and `requirements-reader.lock`:
the {packages} packages the notebooks need when they run, at the exact versions the stored outputs
were made with (the book's own build and tests need more; their lock is in the book's repository).
You need {python} and pip; the install downloads {download}; torch's CPU build is most of it.

## Install

```bash
python3 -m venv .venv
. .venv/bin/activate
pip install torch=={torch} --index-url https://download.pytorch.org/whl/cpu
pip install -r requirements-reader.lock
pip install --no-deps -r requirements-reader-nodeps.lock
pip install --no-deps {wheel}
```

Run these in this folder. On Windows, activate with `.venv\\Scripts\\activate`. torch comes
first and from its CPU index: the default torch on Linux is a CUDA build of several GB.
`requirements-reader-nodeps.lock` holds the trained decoder of chapter 6 (a 98 MB file inside
a wheel), installed without the packages it declares but the notebooks never import.

## Run a chapter

```bash
jupyter execute notebooks/{example}.ipynb --output {example}-run
```

This runs every cell of chapter {example_number} and writes the executed notebook next to it
(`notebooks/{example}-run.ipynb`); an error in any cell stops it with the cell and the traceback.
`--inplace` overwrites the notebook instead. To read and run the chapters interactively, install
JupyterLab (not in the lock): `pip install jupyterlab`, then `jupyter lab notebooks/`.

Random draws are seeded: `ATTNREF_SEED=3 jupyter execute …` runs a chapter with another seed (the
checks and verdicts hold for any seed; the printed numbers change). The last cell of each claim
section records the claim's checks; the verdict is computed from them, never typed.

## What each chapter computes

{chapters}

What this bundle does not hold: the book's build (Jupyter Book configuration, prose pages) and the
test suite; those are in the book's repository.
"""


def chapter_lines(notebooks: list[Path]) -> str:
    """One line per notebook: whether it recomputes what it shows, or reads stored results and how
    to recompute those."""
    lines = []
    for notebook in notebooks:
        title = notebook.stem
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                heading = re.search(r"^#\s+(.+)$", "".join(cell["source"]), re.M)
                if heading:
                    title = heading.group(1).replace("\\sqrt{d_k}", "√dₖ").replace("$", "").strip()
                    break
        if notebook.stem in STORED:
            what, command, duration = STORED[notebook.stem]
            duration = duration.format(**reader_numbers.phrases())   # book/_data/numbers.yml
            lines.append(f"- `{notebook.name}` ({title}): {what}; recompute them with `{command}` "
                         f"({duration}), then run the chapter.")
        else:
            lines.append(f"- `{notebook.name}` ({title}): recomputes everything it shows when it runs.")
    return "\n".join(lines)


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
    for line in (ROOT / LOCKS[0]).read_text().splitlines():
        if line.startswith("torch=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit(f"{LOCKS[0]} pins no torch")


def readme(wheel: str, notebooks: list[Path]) -> str:
    packages = sum(1 for name in LOCKS for line in (ROOT / name).read_text().splitlines()
                   if line and not line.startswith("#"))
    number = re.match(r"0*(\d+)", EXAMPLE).group(1)
    # the measured sizes and times: one source with the reproduce page (book/_data/numbers.yml)
    numbers = reader_numbers.phrases()
    return README.format(wheel=wheel, torch=torch_pin(), packages=packages, example=EXAMPLE,
                         example_number=number, chapters=chapter_lines(notebooks), **numbers)


def make_bundle(out: Path) -> Path:
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    stale = subprocess.run([sys.executable, str(ROOT / "tools" / "make_reader_lock.py"), "--check"],
                           capture_output=True, text=True)
    if stale.returncode:
        raise SystemExit(stale.stdout.strip() or stale.stderr.strip())
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(Path(tmp))
        partial = out.with_suffix(".zip.part")
        with zipfile.ZipFile(partial, "w") as archive:
            _add(archive, "README.md", readme(wheel.name, notebooks).encode())
            for name in LOCKS:
                _add(archive, name, (ROOT / name).read_bytes())
            _add(archive, wheel.name, wheel.read_bytes())
            for notebook in notebooks:
                _add(archive, f"notebooks/{notebook.name}", notebook.read_bytes())
            for tool in TOOLS:
                _add(archive, tool, (ROOT / tool).read_bytes())
            # the stored measurements and training results that chapters 6b and 8 read
            for data in sorted((ROOT / "data").rglob("*")):
                if data.is_file():
                    _add(archive, data.relative_to(ROOT).as_posix(), data.read_bytes())
        partial.replace(out)
    print(f"bundle: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} "
          f"({out.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.1f} s)")
    return out


def readme_commands(text: str) -> list[str]:
    """The shell commands of the README's ``bash`` blocks, in order (what a reader types)."""
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line.strip() for block in blocks for line in block.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def check_install(bundle: Path, folder: Path) -> int:
    """``make bundle-check``: unpack the bundle into an empty ``folder`` and run the README's commands
    there exactly as written (a real install from the package registry, then the example chapter);
    prints the time and the size of the new environment."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    zipfile.ZipFile(bundle).extractall(folder)
    here = folder / FOLDER
    commands = readme_commands((here / "README.md").read_text())
    script = "set -euo pipefail\n" + "".join(f"echo '+ {c}'\n{c}\n" for c in commands)
    start = time.perf_counter()
    # A clean environment: no virtual environment of this checkout, no PYTHONPATH.
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if ".venv" not in p)
    result = subprocess.run(["bash", "-c", script], cwd=here, env=env)
    seconds = time.perf_counter() - start
    size = sum(f.stat().st_size for f in (here / ".venv").rglob("*") if f.is_file() and not f.is_symlink())
    print(f"bundle-check: {'passed' if result.returncode == 0 else 'FAILED'}: {len(commands)} README commands in "
          f"{seconds:.0f} s; the new environment holds {size / 1e9:.2f} GB ({here / '.venv'})")
    return result.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check-install", type=Path, metavar="DIR",
                        help="do not build: unpack --out into DIR and run its README's commands (make bundle-check)")
    args = parser.parse_args(argv)
    if args.check_install:
        return check_install(args.out.resolve(), args.check_install.resolve())
    make_bundle(args.out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
