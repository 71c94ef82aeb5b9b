"""Serve MathJax 3 from the built site instead of a CDN, so math renders offline.

The MathJax files come from the PyPI package ``django-static-mathjax`` (MathJax 3.2.2, es5
build), installed with the book's requirements. Before any page is written (and again at the
end of the build) the files the pages need — MathJax's loader (``startup.js``), the core, the TeX
input, the CHTML output, its fonts and the TeX extensions a formula may autoload; not the menu nor
the accessibility modules (0.76 MB instead of ``tex-chtml.js``'s 1.16 MB) — are copied to
``_static/mathjax/`` of the output, and ``mathjax_path`` points there. They are copied into the *output* only: Jupyter Book adds a
``<script>`` tag for every ``.js`` file under the *source* ``_static`` folder.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

#: The combined component the book used to load (1.16 MB: core, TeX input, CHTML output and fonts,
#: but also the 426 kB context menu and the assistive MathML): kept as the check that the files exist.
COMPONENT = "tex-chtml.js"
#: What the pages load instead: MathJax's loader, which fetches the components LOAD names (core,
#: the TeX input with its default packages, the CHTML output and its TeX font data, about 0.76 MB)
#: and any TeX extension a formula autoloads; no menu, no accessibility modules.
STARTUP = "startup.js"
LOAD = ["input/tex", "output/chtml"]
NEEDED = [STARTUP, COMPONENT, "core.js", "input/tex.js", "output/chtml.js", "output/chtml",
          "input/tex/extensions"]


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
    config.mathjax_path = f"mathjax/{STARTUP}"   # relative paths are relative to _static/
    settings = dict(config.mathjax3_config or {})
    loader = dict(settings.get("loader") or {})
    loader["load"] = list(dict.fromkeys([*(loader.get("load") or []), *LOAD]))
    settings["loader"] = loader
    config.mathjax3_config = settings


def copy_early(app: Sphinx) -> None:
    """Copy the files before any page is written: Sphinx adds ``?v=<checksum>`` to an asset's URL
    only when the file is in the output already, and a page written before the copy got the plain
    URL — one file under two URLs, downloaded twice."""
    copy_files(app, None)


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
    app.connect("builder-inited", copy_early)
    app.connect("build-finished", copy_files)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
