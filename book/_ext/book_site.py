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
* Search: each chapter names, in ``QUESTIONS`` below, the readers' questions it answers; their
  words become the page's ``<meta name="keywords">``, which Sphinx's search index reads as words
  of the page. Sphinx's search returns only pages that hold every word of a query, so a chapter
  that answers "why is there no activation after self-attention" in other words (a quadratic
  form, a cubic, LayerNorm) was not found. (The snippets under each result are made readable by
  ``book.js``.)
* The browser tab's title is plain text: a title with math (chapter 4's ``\\sqrt{d_k}``) shows
  its symbols (``√d_k``), not its TeX source.
* Every page's footer says when the site was built and from which commit (:func:`build_stamp`).
* Page weight: folded code is not syntax-highlighted (:func:`plain_folded_code`) and a notebook's
  figures load lazily (:func:`lazy_figures`).
* The ``{downloads}`` directive lists the files that ``make bundle`` and ``make pdf`` put in
  ``_build/downloads/`` (the bundle zip, the PDF), with their sizes; the files are copied into
  the site's ``downloads/`` folder at the end of the build. A file that was not made is listed
  as such (with the command that makes it), never as a broken link.
"""

from __future__ import annotations

import os
import re
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
     "Every notebook, attnref as a wheel, the stored results chapters 6b and 8 read, the reader lock "
     "and a README: run the book on your machine",
     "make bundle"),
]
#: The questions a reader types that each chapter answers (the words of the search index's
#: keywords). Each entry is checked by tests/test_browser.py: the search page, asked the question,
#: lists the chapter.
QUESTIONS = {
    "notebooks/01-nonlinearity": [
        "why is there no activation function after self-attention",
        "is self-attention linear or nonlinear; where is the nonlinearity in a transformer",
    ],
    "notebooks/02-linear-layers": [
        "why is there no activation after self-attention: are the output projection and the FFN linear layers in a row",
    ],
    "notebooks/04-cosine-vs-dot": [
        "cosine similarity instead of dot product attention",
        "why divide by the square root of d_k",
    ],
    "notebooks/05-multi-head": [
        "is W_Q W_K^T low rank; fuse the query and key matrices into one matrix per head",
    ],
    "notebooks/06-trained-model": [
        "is W_Q W_K^T low rank in a trained model; cosine similarity instead of dot product attention on real activations",
    ],
    "notebooks/06b-trained-decoder": [
        "is W_Q W_K^T low rank in a trained decoder with rotary positions",
    ],
    "notebooks/07-depth": [
        "why is there no activation after self-attention or after the residual connection, as in ResNets",
    ],
    "notebooks/08-training": [
        "why is there no activation after self-attention: does one help in training",
        "cosine similarity instead of dot product attention: does it train as well",
        "is W_Q W_K^T low rank: does a fused full-rank matrix train better",
    ],
}
#: The short answers page: its cards' questions and readers' words (book/_data/answers.yml) are its
#: keywords, and the search page's scorer opens it first, at the card, for a query in those words.
ANSWERS_DOC = "book/answers"
ANSWERS_YML = ROOT / "book" / "_data" / "answers.yml"
SCORER_TEMPLATE = Path(__file__).resolve().parent / "search_scorer.js"


#: The key terms of each source thread (../shared/seeds), in its readers' words: the search page
#: matches a query against a card's question, its "search" words and these (a reader asking about
#: ResNets asks seed 001's question, not seed 000's). Variants of spelling (multihead, feedforward,
#: cosine distance ...) need no entry: search_scorer.js reads them in the book's spelling.
THREAD_TERMS = {
    "activation-after-projections": "nonlinear activation function on the projected query key value; "
                                    "only linear transformations; additive attention; graph attention; "
                                    "tanh or relu on q k v",
    "activation-after-residual": "activation after the multi-head attention layer and the residual "
                                 "connections; add & norm; resnet residual block; no relu or nonlinearity "
                                 "between two linear layers; pre-activation; batch norm; conv",
    "attention-vs-linear-layer": "attention layer versus an MLP, feed-forward or dense layer; both outputs are "
                                 "weighted sums of the previous layer; context of the other word vectors; "
                                 "how are they different",
    "cosine-vs-dot": "cosine distance versus dot-product attention; content-based attention; alignment score; "
                     "differ only by a factor, the norm of the key; scaled dot product; divide by a constant; "
                     "vanishing gradients",
    "fused-matrix": "one single matrix W instead of the pair W_Q and W_K; product of the query and key "
                    "projection matrices multiplied together; d_model by d_model; fewer parameters; "
                    "rank deficient; inefficient to compute",
}


def answer_cards() -> dict[str, str]:
    """``{"#answer-<id>": "<question as plain text> | <readers' words> | <thread's key terms>"}`` for
    every short answer."""
    import yaml
    threads = (yaml.safe_load(ANSWERS_YML.read_text(encoding="utf-8")) or {}).get("threads") or []
    cards = {}
    for thread in threads:
        question = re.sub(r"\$([^$]*)\$", lambda m: tex_to_text(m[1]), str(thread.get("question", "")))
        cards[f"#answer-{thread['id']}"] = " | ".join([question, str(thread.get("search", "")),
                                                      THREAD_TERMS.get(str(thread["id"]), "")])
    return cards


def write_search_scorer(app: Sphinx, config) -> None:
    """The search page's scorer (search_scorer.js with the cards filled in), through html_search_scorer."""
    import json
    code = SCORER_TEMPLATE.read_text(encoding="utf-8")
    code = code.replace("/*ANSWERS*/ {}", json.dumps(answer_cards(), ensure_ascii=False))
    code = code.replace('/*ANSWERS_PAGE*/ ""', json.dumps(ANSWERS_DOC))
    target = Path(app.doctreedir) / "search_scorer.js"
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists() or target.read_text(encoding="utf-8") != code:
        target.write_text(code, encoding="utf-8")
    config.html_search_scorer = str(target)


REPOSITORY_BUTTONS = ("use_repository_button", "use_edit_page_button", "use_source_button")


def configure(app: Sphinx, config) -> None:
    if str(STATIC) not in [str(p) for p in config.html_static_path]:
        config.html_static_path.append(str(STATIC))
    options = config.html_theme_options
    has_repository = bool((options.get("repository_url") or "").strip())
    for button in REPOSITORY_BUTTONS:
        options[button] = has_repository
    options["use_issues_button"] = has_repository   # an issue link only where the repository has an address
    if not has_repository:
        options.pop("repository_url", None)
    options["launch_buttons"] = {}        # see the module docstring: the bundle instead
    options["extra_footer"] = (options.get("extra_footer") or "") + build_stamp(options.get("repository_url"))
    # the measured numbers a reader plans by (book/_data/numbers.yml), as the bundle's README says them
    import reader_numbers
    config.myst_substitutions = {**(getattr(config, "myst_substitutions", None) or {}), **reader_numbers.phrases()}


def build_stamp(repository_url: str | None = None) -> str:
    """The footer line of every page: the build's date (UTC, or ``SOURCE_DATE_EPOCH``) and the commit
    it was built from (``+ changes`` when the working tree differed), linked when the repository
    has an address. Nothing about the machine."""
    import datetime
    import subprocess
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc) if epoch and epoch.isdigit()
            else datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%d")
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    commit = git("rev-parse", "HEAD")
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        return f'<p class="build-stamp">Built {when}.</p>'
    dirty = " + changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    short = commit[:10]
    url = (repository_url or "").strip().rstrip("/")
    shown = f'<a href="{url}/commit/{commit}"><code>{short}</code></a>' if url else f"<code>{short}</code>"
    return f'<p class="build-stamp">Built {when} from commit {shown}{dirty}.</p>'


def keywords(questions: list[str]) -> list[str]:
    """The distinct words of ``questions`` (lower case, in order), split as Sphinx's search
    splits a query: ``W_Q W_K^T`` gives ``w_q``, ``w_k`` and ``t``; ``self-attention`` gives
    ``self`` and ``attention``."""
    words: list[str] = []
    for question in questions:
        for word in re.findall(r"\w+", question.lower()):
            if word not in words:
                words.append(word)
    return words


def add_keywords(app: Sphinx, doctree: nodes.document) -> None:
    questions = QUESTIONS.get(app.env.docname)
    if app.env.docname == ANSWERS_DOC:
        questions = [text.replace(" | ", "; ") for text in answer_cards().values()]
    if questions:
        doctree += nodes.meta(name="keywords", content=", ".join(keywords(questions)))


#: TeX commands of titles and their plain-text symbols (a title is short: a few suffice).
TITLE_SYMBOLS = {"cdot": "·", "top": "ᵀ", "times": "×", "le": "≤", "ge": "≥", "leq": "≤", "geq": "≥",
                 "to": "→", "approx": "≈", "in": "∈", "infty": "∞", "alpha": "α", "beta": "β",
                 "sigma": "σ", "tau": "τ", "varepsilon": "ε", "epsilon": "ε", "ell": "ℓ"}


def tex_to_text(tex: str) -> str:
    """Plain text of a short TeX formula: ``\\sqrt{d_k}`` -> ``√d_k``, ``W_K^\\top`` -> ``W_Kᵀ``."""
    tex = re.sub(r"\s*\\cdot\s*", "·", tex)
    text = re.sub(r"\\sqrt\s*\{([^{}]*)\}", lambda m: "√" + (m[1] if re.fullmatch(r"[\w]+", m[1]) else f"({m[1]})"), tex)
    text = re.sub(r"\^\s*\{?\\top\}?", "ᵀ", text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: TITLE_SYMBOLS.get(m[1], "" if m[1] in ("mathrm", "operatorname",
                                                                                     "mathbf", "text") else m[1]), text)
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "")).strip()


def plain_title(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """The browser tab's title (and the printed page's heading) without TeX source."""
    for key in ("title", "pagetitle"):
        value = context.get(key)
        if isinstance(value, str) and "\\(" in value:
            context[key] = re.sub(r"\\\((.*?)\\\)", lambda m: tex_to_text(m[1]), value)
        elif isinstance(value, str) and key == "pagetitle" and "\\" in value:
            context[key] = tex_to_text(value)


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


def plain_folded_code(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Folded code (cells tagged ``hide-input``) is not syntax-highlighted: Pygments wraps every token
    in a ``<span>``, which made most of a chapter's HTML (chapter 4: 746 kB) for code a reader sees
    only by unfolding it. The text is unchanged; it shows in the fold without colours."""
    for cell in doctree.findall(nodes.container):
        if "tag_hide-input" not in cell.get("classes", []):
            continue
        for source in cell.findall(nodes.container):
            if "cell_input" in source.get("classes", []):
                for block in source.findall(nodes.literal_block):
                    block["language"] = "none"


def lazy_figures(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """A notebook's figures load as the reader scrolls to them (``loading="lazy"``): a first visit
    on a phone fetches the figures on and near its first screen, not a chapter's every PNG
    (chapter 4's ten figures are 381 kB). The browser tests and the PDF printer load them all."""
    for cell in doctree.findall(nodes.container):
        if "cell_output" in cell.get("classes", []):
            for image in cell.findall(nodes.image):
                image["loading"] = "lazy"


def tex_in_link_text(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """A link that takes its text from a title with a formula (``{doc}`` and ``{ref}`` without a
    text: "9 · Attention without the n \\times m matrix") reads it as plain symbols, "n × m" (Sphinx
    writes the title's TeX source as the link's text)."""
    for reference in doctree.findall(nodes.reference):
        for text in list(reference.findall(nodes.Text)):
            if "\\" in text and re.search(r"\\[A-Za-z]+", text) and not any(
                    isinstance(a, (nodes.math, nodes.literal)) for a in _ancestors(text.parent)):
                text.parent.replace(text, nodes.Text(tex_to_text(str(text))))


def _ancestors(node: nodes.Node):
    while node is not None:
        yield node
        node = node.parent


def setup(app: Sphinx) -> dict:
    # MathJax (and every other asset) on every page: the sidebar shows chapter titles with math
    # ($\sqrt{d_k}$) on pages that hold no formula themselves, where Sphinx would leave MathJax out.
    app.set_html_assets_policy("always")
    app.connect("config-inited", configure, priority=900)
    app.connect("config-inited", write_search_scorer, priority=900)
    app.add_css_file("book.css")
    app.add_css_file("print.css", media="print")
    app.add_js_file("book.js", loading_method="defer")
    app.add_directive("downloads", Downloads)
    app.connect("env-get-outdated", reread_downloads)
    app.connect("build-finished", copy_downloads)
    app.connect("doctree-read", add_keywords)
    app.connect("doctree-resolved", plain_folded_code)
    app.connect("doctree-resolved", lazy_figures)
    app.connect("doctree-resolved", tex_in_link_text)
    app.connect("html-page-context", plain_title, priority=900)   # after sphinx-book-theme's pagetitle
    return {"parallel_read_safe": True, "parallel_write_safe": True}
