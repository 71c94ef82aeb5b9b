"""The site's layout, its repository buttons and its downloads.

* ``book.css`` (figures never stretched, equations and code that scroll or wrap inside
  themselves, one search box), ``print.css`` (the PDF edition: the article only) and
  ``book.js`` (a displayed equation slightly wider than its column is typeset to fit). MathJax
  is loaded on every page (the sidebar's chapter titles hold math).
* Repository buttons follow one value, ``repository.url`` of ``_config.yml``: when it is set,
  the repository, source and edit buttons appear; when it is empty (the default: nobody has
  confirmed an address), none of them does. There are no launch buttons: Binder and Colab
  cannot run these notebooks (pinned CPU torch, attnref from this repository); the download
  bundle replaces them.
* The ``{downloads}`` directive lists the files that ``make bundle`` and ``make pdf`` put in
  ``_build/downloads/`` (the bundle zip, the PDF), with their sizes; the files are copied into
  the site's ``downloads/`` folder at the end of the build. A file that was not made is listed
  as such (with the command that makes it), never as a broken link.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

STATIC = Path(__file__).resolve().parent / "static"
ROOT = Path(__file__).resolve().parents[2]
#: Where ``make bundle`` and ``make pdf`` leave their files (``ATTENTION_CLAIMS_DOWNLOADS`` overrides).
DOWNLOADS = Path(os.environ.get("ATTENTION_CLAIMS_DOWNLOADS", ROOT / "_build" / "downloads"))
#: The files of the downloads list: (file name, what it is, the command that makes it).
FILES = [
    ("attention-claims.pdf", "The whole book as one PDF (rendered math and figures)", "make pdf"),
    ("attention-claims-bundle.zip",
     "Every notebook, attnref as a wheel, the lock file and a README: run the book on your machine",
     "make bundle"),
]
REPOSITORY_BUTTONS = ("use_repository_button", "use_edit_page_button", "use_source_button")


def configure(app: Sphinx, config) -> None:
    if str(STATIC) not in [str(p) for p in config.html_static_path]:
        config.html_static_path.append(str(STATIC))
    options = config.html_theme_options
    has_repository = bool((options.get("repository_url") or "").strip())
    for button in REPOSITORY_BUTTONS:
        options[button] = has_repository
    options["use_issues_button"] = False
    if not has_repository:
        options.pop("repository_url", None)
    options["launch_buttons"] = {}        # see the module docstring: the bundle instead


def _size(path: Path) -> str:
    size = path.stat().st_size
    return f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size / 1e3:.0f} kB"


class Downloads(SphinxDirective):
    """A list of the book's downloads, linked where they were made."""

    def run(self) -> list[nodes.Node]:
        depth = self.env.docname.count("/")
        items = nodes.bullet_list(classes=["book-downloads"])
        for name, what, command in FILES:
            path = DOWNLOADS / name
            paragraph = nodes.paragraph()
            if path.exists():
                link = nodes.reference("", name, refuri="../" * depth + f"downloads/{name}",
                                       classes=["download-link"])
                paragraph += [nodes.strong("", "", link), nodes.Text(f" ({_size(path)}): {what}.")]
            else:
                paragraph += [nodes.literal(name, name),
                              nodes.Text(f": {what}; not part of this copy of the site (run "),
                              nodes.literal(command, command), nodes.Text(" and rebuild).")]
            items += nodes.list_item("", paragraph)
        return [items]


def reread_downloads(app: Sphinx, env, added, changed, removed) -> list[str]:
    """Pages with a downloads list are read again each build (the files may have changed)."""
    pages = []
    for doc in env.found_docs:
        path = Path(env.doc2path(doc))
        if path.suffix == ".md" and "{downloads}" in path.read_text(encoding="utf-8"):
            pages.append(doc)
    return pages


def copy_downloads(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "downloads"
    for name, _, _ in FILES:
        if (DOWNLOADS / name).exists():
            target.mkdir(exist_ok=True)
            shutil.copy2(DOWNLOADS / name, target / name)


def setup(app: Sphinx) -> dict:
    # MathJax (and every other asset) on every page: the sidebar shows chapter titles with math
    # ($\sqrt{d_k}$) on pages that hold no formula themselves, where Sphinx would leave MathJax out.
    app.set_html_assets_policy("always")
    app.connect("config-inited", configure, priority=900)
    app.add_css_file("book.css")
    app.add_css_file("print.css", media="print")
    app.add_js_file("book.js", loading_method="defer")
    app.add_directive("downloads", Downloads)
    app.connect("env-get-outdated", reread_downloads)
    app.connect("build-finished", copy_downloads)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
