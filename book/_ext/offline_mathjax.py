"""Serve MathJax 3 from the built site instead of a CDN, so math renders offline, in one small file.

Every page loads one script, ``_static/mathjax/tex-chtml-book.js`` (448 kB): MathJax 3.2.2's
``tex-chtml`` component (loader, startup, core, TeX input with its default packages, CHTML output
and its TeX font data) without the context menu and the assistive MathML, compiled from MathJax's
TypeScript for ES2019 browsers by ``book/_ext/mathjax_bundle/build.mjs`` (esbuild; the recipe, the
versions and the file's sha256 are in that folder's README.md). The published es5 build of the
same components is 754 kB (``startup.js`` + ``core.js`` + ``input/tex.js`` + ``output/chtml.js``
+ its font data), and its ``tex-chtml.js`` 1.16 MB.

The files the bundle fetches when a page needs them (the CHTML web fonts, ``output/chtml/fonts/
woff-v2``, and the TeX extensions a formula may autoload, ``input/tex/extensions``) come from the
PyPI package ``django-static-mathjax`` (MathJax 3.2.2), installed with the book's requirements.
Everything is copied to ``_static/mathjax/`` of the output before any page is written (Sphinx adds
``?v=<checksum>`` to an asset's URL only when the file is in the output already: a page written
before the copy got the plain URL, one file under two URLs, downloaded twice) and again at the end
of the build. They are copied into the *output* only: Jupyter Book adds a ``<script>`` tag for
every ``.js`` file under the *source* ``_static`` folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

#: The book's MathJax bundle and the folder that holds its recipe.
BUNDLE_DIR = Path(__file__).resolve().parent / "mathjax_bundle"
BUNDLE = "tex-chtml-book.js"
#: What the bundle fetches from the installed MathJax when a page needs it.
NEEDED = ["output/chtml/fonts/woff-v2", "input/tex/extensions"]


def mathjax_source() -> Path:
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError("MathJax is not installed: run `make install` (package django-static-mathjax)")
    root = Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax" / "es5"
    missing = [item for item in NEEDED if not (root / item).is_dir()]
    if missing:
        raise ExtensionError(f"MathJax's {', '.join(missing)} not found under {root}")
    return root


def recorded_sha256() -> str:
    """The bundle's sha256 as its README records it."""
    found = re.search(r"sha256 ([0-9a-f]{64})", (BUNDLE_DIR / "README.md").read_text(encoding="utf-8"))
    if not found:
        raise ExtensionError(f"{BUNDLE_DIR / 'README.md'} records no sha256 of {BUNDLE}")
    return found[1]


def bundle() -> Path:
    path = BUNDLE_DIR / BUNDLE
    if not path.exists():
        raise ExtensionError(f"{path} is missing: rebuild it as {BUNDLE_DIR / 'README.md'} says")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != recorded_sha256():
        raise ExtensionError(f"{path} is not the file its README records (sha256 {digest}): "
                             "rebuild it with build.mjs and record the new sha256")
    return path


def set_path(app: Sphinx, config) -> None:
    mathjax_source()  # fail early, with a clear message, if the files are missing
    bundle()
    config.mathjax_path = f"mathjax/{BUNDLE}"   # relative paths are relative to _static/


def copy_early(app: Sphinx) -> None:
    """Copy the files before any page is written (see the module docstring)."""
    copy_files(app, None)


def copy_files(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    target = Path(app.outdir) / "_static" / "mathjax"
    for item in NEEDED:
        shutil.copytree(source / item, target / item, dirs_exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(bundle(), target / BUNDLE)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", set_path, priority=900)
    app.connect("builder-inited", copy_early)
    app.connect("build-finished", copy_files)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
