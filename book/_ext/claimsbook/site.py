"""The Sphinx side: placeholders replaced on ``source-read``, the ``{verdict}`` directive, warnings
for verdicts that cannot be placed, pages re-read on every build, no thebe assets."""

from __future__ import annotations

import re
from pathlib import Path

from .index import render_headline, render_index
from .pages import (ANSWERS_PATH, chapter_number, inject_into_notebook, last_notebooks, load_answers,
                    problems as answer_problems, render_answers_page, render_chapter_end, render_chapter_top)
from .report import REPORT_PATH, load_report, render_report
from .scan import cached_scan_book as _scan, notebook_paths
from .verdicts import _verdict_directive

#: Where the generated markdown goes: a fenced placeholder block with an optional argument.
PLACEHOLDER = re.compile(
    r"^(?P<fence>`{3,})\{(?P<name>claims-index|claims-table|execution-report|short-answers)\}[ \t]*(?P<arg>[^\n]*)\n"
    r"(?P=fence)[ \t]*$",
    re.MULTILINE,
)


def _root(app) -> Path:
    return Path(app.srcdir)


def _chapter_notebooks(root: Path) -> set[str]:
    return {p.relative_to(root).with_suffix("").as_posix() for p in notebook_paths(root)}


def source_read(app, docname: str, source: list[str]) -> None:
    text = source[0]
    root = _root(app)
    if docname in _chapter_notebooks(root):
        source[0] = chapter_page(root, app, docname, text)
        return
    if "{claims-" not in text and "{execution-report}" not in text and "{short-answers}" not in text:
        return
    from sphinx.util import logging
    logger = logging.getLogger(__name__)
    book = _scan(root)
    for path in notebook_paths(root):
        app.env.note_dependency(str(path))
    app.env.note_dependency(str(root / ANSWERS_PATH))

    def replace(match: re.Match) -> str:
        name, arg = match["name"], match["arg"].split()
        if name == "claims-index":
            return render_index(book, load_answers(root).get("reasons"))
        if name == "short-answers":
            return render_answers_page(book, load_answers(root))
        if name == "claims-table":
            try:
                return render_headline(book, arg, load_answers(root).get("reasons"))
            except ValueError as error:
                logger.warning(str(error), location=docname)
                return ""
        data, why = load_report(root)
        if why not in (None, "absent"):
            logger.warning(f"execution report {REPORT_PATH.as_posix()} is {why}", location=docname)
        return render_report(root, data, why)

    source[0] = PLACEHOLDER.sub(replace, text)


def chapter_page(root: Path, app, docname: str, text: str) -> str:
    """A chapter notebook's JSON text with its verdict table after the title and, on a chapter's
    last page, the answer to its thread (the notebook file itself is not changed)."""
    book = _scan(root)
    answers = load_answers(root)
    for path in notebook_paths(root):
        app.env.note_dependency(str(path))
    app.env.note_dependency(str(root / ANSWERS_PATH))
    top = render_chapter_top(book, answers, docname)
    number = chapter_number(docname)
    end = render_chapter_end(book, answers, number) if last_notebooks(root).get(number) == docname else ""
    return inject_into_notebook(text, top, end)


def check_verdicts(app) -> None:
    """Warn (an error under -W) about every verdict output the index cannot place, and every
    short answer or reason written for another verdict than the one recorded."""
    from sphinx.util import logging
    logger = logging.getLogger(__name__)
    book = _scan(_root(app))
    for problem in book.problems():
        logger.warning(f"claims index: {problem}")
    for problem in answer_problems(book, load_answers(_root(app)), missing_reasons=False):
        logger.warning(f"{ANSWERS_PATH.as_posix()}: {problem}")


def _phone_label_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{phone-label}`MiniLM:``` — a cell's column name, shown only where a table becomes cards."""
    from docutils import nodes
    return [nodes.inline(rawtext, text, classes=["phone-label"])], []


def _media_role(css_class: str):
    """``{screen-only}`…``` / ``{print-only}`…```: a phrase for the screen or for the printed page
    (where the folds are not printed)."""
    def role(name, rawtext, text, lineno, inliner, options=None, content=None):
        from docutils import nodes
        return [nodes.inline(rawtext, text, classes=[css_class])], []
    return role


def always_reread(app, env, added, changed, removed) -> list[str]:
    """Pages with generated content are re-read on every build (verdicts live in notebooks)."""
    generated = []
    for docname in env.found_docs:
        path = Path(env.doc2path(docname))
        if path.suffix == ".md" and path.exists():
            text = path.read_text(encoding="utf-8")
            if PLACEHOLDER.search(text):
                generated.append(docname)
    return generated


THEBE_MARKERS = ("thebe",)


def drop_thebe(app, pagename, templatename, context, doctree) -> None:
    """Remove the thebe assets from every page.

    Jupyter Book always loads ``sphinx_thebe``; the book does not offer live code (the launch
    buttons open Binder or Colab instead), and its inline configuration script is added twice
    (a ``SyntaxError`` in the console) and names a CDN. Without it nothing on a page refers to
    another host.
    """
    def keep(asset) -> bool:
        filename = str(getattr(asset, "filename", "") or "")
        body = str(getattr(asset, "attributes", {}).get("body", "") or "")
        return not any(m in filename.lower() or m.upper() in body for m in THEBE_MARKERS)

    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [asset for asset in context[key] if keep(asset)]


def drop_thebe_config(app, doctree, docname) -> None:
    """Remove the ``text/x-thebe-config`` block sphinx-thebe appends to every page."""
    from docutils import nodes
    for node in list(doctree.findall(nodes.raw)):
        if "x-thebe-config" in node.astext() or "kernelName =" in node.astext():
            node.parent.remove(node)


STATIC = Path(__file__).resolve().parents[1] / "static"


def add_static_path(app, config) -> None:
    config.html_static_path.append(str(STATIC))


def setup(app) -> dict:
    app.connect("config-inited", add_static_path)
    app.add_css_file("claims.css")
    app.add_css_file("verdict.css")
    app.add_directive("verdict", _verdict_directive())
    app.add_role("phone-label", _phone_label_role)
    app.add_role("screen-only", _media_role("screen-only"))
    app.add_role("print-only", _media_role("print-only"))
    app.add_js_file("claims.js")
    app.add_js_file("interactive.js", loading_method="defer")   # the figures a reader can move
    app.connect("source-read", source_read)
    app.connect("builder-inited", check_verdicts)
    app.connect("env-get-outdated", always_reread)
    app.connect("html-page-context", drop_thebe)
    app.connect("doctree-resolved", drop_thebe_config, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
