"""attnref as the ecosystem installs it: the wheel, with its core dependencies only.

The test builds the wheel from a copy of the sources (``pip wheel --no-deps --no-build-isolation``:
offline, with this environment's setuptools), makes a scratch venv without pip, and installs the
wheel into it with this environment's pip (``--no-index --no-deps``). The venv sees exactly the
distributions attnref declares as core (torch, numpy) and what torch itself requires (its
``Requires-Dist``: filelock, typing-extensions, sympy, networkx, jinja2, fsspec, …): each one's
modules and ``.dist-info`` are symlinked into one folder that a ``.pth`` file adds to the venv.
scipy, matplotlib, IPython, safetensors, tokenizers, transformers and gguf are not there.

From a folder outside the repository the new interpreter then (1) imports attnref from the venv's
site-packages, not this checkout; (2) computes attention, multi-head attention (QK-norm through the
hook too) and a layer, against torch's SDPA and ``nn.MultiheadAttention``; (3) imports none of the
extras' packages on ``import attnref``; (4) meets an import that needs an extra with an error
naming it (``pip install 'attnref[book]'``); and ``pip check`` finds every declared requirement of
attnref satisfied. Nothing reaches the network. About 30 s of CPU; on the shared build machine at
load 15 the wall time was 9 minutes (pip alone took a minute of wall time for 3 s of CPU).
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ("torch", "numpy")
EXTRAS_ONLY = ("scipy", "matplotlib", "IPython", "safetensors", "tokenizers", "transformers", "gguf")


def _requirement_names(distribution: str) -> list[str]:
    names = []
    for requirement in metadata.distribution(distribution).requires or []:
        if "extra ==" in requirement:
            continue
        names.append(re.split(r"[ <>=!~;\[]", requirement, maxsplit=1)[0])
    return names


def _closure(names) -> set[str]:
    """The distributions ``names`` need, their requirements included (those installed here)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(key)
        todo.extend(_requirement_names(name))
    return seen


def _link_distribution(name: str, folder: Path) -> None:
    """Symlink a distribution's top-level modules and its .dist-info into ``folder``."""
    dist = metadata.distribution(name)
    base = Path(dist.locate_file(""))
    tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
    for top in tops:
        source = base / top
        target = folder / top
        if source.exists() and not target.exists() and not top.endswith(".pth") and top != "__pycache__":
            target.symlink_to(source)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "attnref", source / "attnref", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "--disable-pip-version-check", "-q", "-w", str(dist), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("attnref-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    core = tmp / "core"
    core.mkdir()
    allowed = _closure(CORE)
    for name in sorted(allowed):
        _link_distribution(name, core)
    (site / "attnref-core-dependencies.pth").write_text(f"{core}\n")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
                                "--no-deps", "--disable-pip-version-check", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return {"python": python, "site": site, "allowed": allowed, "elsewhere": elsewhere, "wheel": wheel}


def _run(scratch: dict, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return subprocess.run([str(scratch["python"]), "-c", code], cwd=scratch["elsewhere"], env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_scratch_environment_holds_the_core_dependencies_only(scratch):
    """fails_if: the environment leaks this checkout's packages (then the test would prove nothing)."""
    assert not any(name.lower() in scratch["allowed"] for name in EXTRAS_ONLY)
    result = _run(scratch, "import importlib.util as u; print([m for m in %r if u.find_spec(m)])" % (EXTRAS_ONLY,))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_wheel_computes_attention_from_another_directory(scratch):
    """fails_if: the wheel misses a module, the core imports an extra's package, or attnref is found
    in this checkout instead of the venv."""
    code = r"""
import sys, torch, attnref
from attnref import qknorm
assert attnref.__file__.startswith(%r), attnref.__file__
heavy = sorted({m.split('.')[0] for m in sys.modules} & {'sympy', 'scipy', 'matplotlib', 'IPython', 'safetensors',
                                                         'tokenizers', 'transformers', 'gguf'})
assert not heavy, heavy
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
ours = attnref.scaled_dot_product_attention(q, k, v, causal=True).output
theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
assert torch.allclose(ours, theirs, atol=1e-12)
w = attnref.MultiHeadWeights.random(8, 2, generator=g)
x = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
module = w.to_torch()
assert torch.allclose(attnref.multi_head_attention(x, weights=w).output, module(x, x, x)[0], atol=1e-12)
layer = attnref.EncoderLayer.random(8, 2, 16, generator=g)
assert torch.allclose(attnref.encoder_layer(x, weights=layer).output, layer.to_torch()(x), atol=1e-12)
normed = attnref.multi_head_attention(x, weights=w, attention=qknorm.qk_norm()).output
assert normed.shape == (2, 5, 8) and not torch.allclose(normed, module(x, x, x)[0])
print("ok")
""" % (str(scratch["site"]),)
    result = _run(scratch, code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


def test_a_missing_extra_is_named(scratch):
    """fails_if: scipy is a core dependency again (then it would be here) or the error is the bare
    'No module named scipy'."""
    result = _run(scratch, "from attnref.analysis import stats; stats.clopper_pearson(3, 10, 0.05)")
    assert result.returncode != 0
    assert "pip install 'attnref[book]'" in result.stderr and "scipy" in result.stderr, result.stderr[-2000:]
    result = _run(scratch, "import attnref.book.plotting")
    assert "pip install 'attnref[book]'" in result.stderr and "matplotlib" in result.stderr, result.stderr[-2000:]
    result = _run(scratch, "import scipy")          # not attnref's import: the plain error
    assert "No module named 'scipy'" in result.stderr and "attnref" not in result.stderr


def test_pip_check_finds_the_declared_requirements(scratch):
    """attnref's Requires-Dist (without extras) is torch and numpy, and the scratch venv satisfies it."""
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(scratch["python"]), "show", "attnref"],
                            capture_output=True, text=True, timeout=120)
    assert re.search(r"^Requires: numpy, torch$", result.stdout, re.M), result.stdout
    result = subprocess.run([sys.executable, "-m", "pip", "--python", str(scratch["python"]), "check"],
                            capture_output=True, text=True, timeout=120)
    assert "attnref" not in result.stdout, result.stdout


def test_stored_data_outside_the_repository_say_where_they_are(scratch):
    """An installed package has no data/ beside it: the error says where the stored results are and
    how the lookup finds them, not 'site-packages/data/... is missing: run make experiments'.
    fails_if: the message names a make target only (there is no Makefile in site-packages)."""
    result = _run(scratch, "from attnref.training import results; results.load('E1')")
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert "e1.json was not found" in message and "download bundle, folder data/" in message, message
    assert "ATTNREF_EXPERIMENTS" in message and "site-packages/data" not in message.split("(looked in")[0]
