"""Leave out of the built site the files that no page ever requests.

The themes copy into ``_static/`` their JavaScript/CSS source maps (``*.map``, about 3 MB,
read only by a browser's developer tools) and the translation catalogues of
sphinx-book-theme (``_static/locales``, used at build time, never by a page). Removing them
at the end of the build keeps the site — and the GitHub Pages artefact — small.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx


def prune(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    for source_map in static.rglob("*.map"):
        source_map.unlink()
    shutil.rmtree(static / "locales", ignore_errors=True)


def setup(app: Sphinx) -> dict:
    app.connect("build-finished", prune, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
