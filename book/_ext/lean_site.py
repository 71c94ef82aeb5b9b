"""Leave out of the built site what no reader needs: files no page requests, scripts that
do nothing here.

* The themes copy into ``_static/`` their JavaScript/CSS source maps (``*.map``, about 3 MB,
  read only by a browser's developer tools) and the translation catalogues of
  sphinx-book-theme (``_static/locales``, used at build time, never by a page): removed at the
  end of the build, which keeps the site — and the GitHub Pages artefact — small.
* ``_static/scripts/fontawesome.js`` (1.49 MB, Font Awesome's every icon as SVG, loaded by
  every page of pydata-sphinx-theme) is replaced by a one-line script. The handful of icons the
  pages show (menu, contents, download, search, colour mode, the sidebar's arrows) are drawn by
  the theme's own stylesheet from the Font Awesome web font, which pydata-sphinx-theme's CSS
  loads anyway (its admonition and navigation icons use it).
* The search scripts and the search index (``searchtools.js``, ``language_data.js``,
  ``searchindex.js``; 150 kB) are loaded by the search page only: pydata-sphinx-theme loads them
  on every page for a search-as-you-type box this site does not switch on
  (``templates/layout.html``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx

TEMPLATES = Path(__file__).resolve().parent / "templates"
FONTAWESOME_STUB = ("/* attention-claims (book/_ext/lean_site.py): the icons come from the Font Awesome web"
                    " font of the theme's stylesheet; the 1.49 MB SVG script is not shipped. */\n")


def add_templates(app: Sphinx, config) -> None:
    if str(TEMPLATES) not in [str(p) for p in config.templates_path]:
        config.templates_path.insert(0, str(TEMPLATES))


def prune(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    for source_map in static.rglob("*.map"):
        source_map.unlink()
    shutil.rmtree(static / "locales", ignore_errors=True)
    fontawesome = static / "scripts" / "fontawesome.js"
    if fontawesome.exists():
        fontawesome.write_text(FONTAWESOME_STUB, encoding="utf-8")
        (static / "scripts" / "fontawesome.js.LICENSE.txt").unlink(missing_ok=True)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", add_templates)
    app.connect("build-finished", prune, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
