"""Serve MathJax 3 from the built site instead of a CDN, so math renders offline.

The MathJax files come from the PyPI package ``django-static-mathjax`` (MathJax 3.2.2, es5
build), installed with the book's requirements. At the end of the build the files the page
needs — the ``tex-chtml`` component, its fonts, the TeX extensions it may autoload, the menu
and the accessibility modules — are copied to ``_static/mathjax/`` of the output, and
``mathjax_path`` points there. They are copied into the *output* only: Jupyter Book adds a
``<script>`` tag for every ``.js`` file under the *source* ``_static`` folder.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

COMPONENT = "tex-chtml.js"
#: What tex-chtml.js loads (fonts, autoloaded TeX extensions, menu, a11y); everything else is left out.
NEEDED = [COMPONENT, "output/chtml", "input/tex/extensions", "ui", "a11y"]


def mathjax_source() -> Path:
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError("MathJax is not installed: run `make install` (package django-static-mathjax)")
    root = Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax" / "es5"
    if not (root / COMPONENT).exists():
        raise ExtensionError(f"MathJax component {COMPONENT} not found under {root}")
    return root


def set_path(app: Sphinx, config) -> None:
    mathjax_source()  # fail early, with a clear message, if the files are missing
    config.mathjax_path = f"mathjax/{COMPONENT}"   # relative paths are relative to _static/


def copy_files(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_source()
    target = Path(app.outdir) / "_static" / "mathjax"
    for item in NEEDED:
        src, dst = source / item, target / item
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", set_path, priority=900)
    app.connect("build-finished", copy_files)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
