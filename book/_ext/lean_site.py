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
* The Font Awesome web font (``fa-solid-900``, 157 kB, 1,400 icons) gets a subset beside it
  (``fa-solid-900-subset.woff``, the icons the pages use: those named by an ``fa-…`` class in a
  page or a theme script, and those the theme's stylesheets draw themselves), declared after the
  theme's font for exactly its characters (``unicode-range``). A character outside the subset
  still finds the full font, which the browser then loads (tests/test_browser.py checks that no
  chapter page needs it).
* The search scripts and the search index (``searchtools.js``, ``language_data.js``,
  ``searchindex.js``; 150 kB) are loaded by the search page only: pydata-sphinx-theme loads them
  on every page for a search-as-you-type box this site does not switch on
  (``templates/layout.html``).
* The themes' stylesheets (pydata-sphinx-theme's 397 kB, Bootstrap included; sphinx-design's,
  MyST-NB's, Sphinx's basic.css, ...) keep only the rules a page of this site can use
  (:func:`purge_css`): a selector that names a class or an id that no page and no script of the
  site holds (not even as a prefix a script completes, ``bs-``) cannot match and is dropped, with
  a rule left without selectors. Classes inside ``:not()``, ``:is()``, ``:where()`` and ``:has()``
  need not be present, so they keep their selector, and so does any selector with an escaped
  character; at-rules other than ``@media``/``@supports``/``@layer``/``@container`` stay whole.
  The book's own stylesheets (``book/_ext/static``: print.css is read by tools/make_pdf.py, which
  adds classes of its own) are left as they are. The stylesheets as they were are kept in the
  build's doctree folder (``UNPURGED``), and tests/test_lean_site.py shows pages with either and
  compares the pixels: the purge changes nothing a reader sees.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from sphinx.application import Sphinx

TEMPLATES = Path(__file__).resolve().parent / "templates"
FONTAWESOME_STUB = ("/* attention-claims (book/_ext/lean_site.py): the icons come from the Font Awesome web"
                    " font of the theme's stylesheet; the 1.49 MB SVG script is not shipped. */\n")


FONT_DIR = Path("vendor") / "fontawesome" / "webfonts"
SUBSET = "fa-solid-900-subset.woff"
#: Private-use characters (Font Awesome's code points) written literally in a stylesheet.
PRIVATE_USE = re.compile("[\ue000-\uf8ff]")


def icon_code_points(outdir: Path) -> set[int]:
    """The Font Awesome characters the built site can show."""
    static = outdir / "_static"
    css_files = list(static.rglob("*.css"))
    by_class: dict[str, int] = {}
    points: set[int] = set()
    for css in css_files:
        text = css.read_text(encoding="utf-8", errors="replace")
        for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", text):
            codes = [int(c, 16) for c in re.findall(r'content:\s*"\\(f[0-9a-f]{3,4})"', body)]
            names = [s.strip() for s in selectors.split(",")]
            if codes and all(re.fullmatch(r"\.fa-[a-z0-9-]+::?before", n) for n in names):
                for name in names:      # Font Awesome's class list: .fa-bars:before{content:"\f0c9"}
                    by_class[re.match(r"\.(fa-[a-z0-9-]+)", name)[1]] = codes[0]
            else:                       # the theme's own rules and variables
                points.update(codes)
                points.update(ord(c) for c in PRIVATE_USE.findall(body))
    used = set()
    for page in [*outdir.rglob("*.html"), *static.rglob("*.js")]:
        used.update(re.findall(r"\bfa-[a-z0-9-]+", page.read_text(encoding="utf-8", errors="replace")))
    return points | {by_class[name] for name in used if name in by_class}


def subset_icons(outdir: Path) -> None:
    from fontTools import subset   # matplotlib's dependency, installed with the book's requirements

    fonts = outdir / "_static" / FONT_DIR
    source = fonts / "fa-solid-900.ttf"
    if not source.exists():
        return
    points = icon_code_points(outdir)
    options = subset.Options()
    options.flavor = "woff"          # zlib: WOFF2 would need the brotli package
    options.layout_features = ["*"]
    font = subset.load_font(str(source), options)
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=sorted(points))
    subsetter.subset(font)
    subset.save_font(font, str(fonts / SUBSET), options)
    ranges = ",".join(f"U+{p:04X}" for p in sorted(points))
    (outdir / "_static" / "icons.css").write_text(
        "/* attention-claims (book/_ext/lean_site.py): the Font Awesome icons the pages use, as a subset\n"
        "   of the theme's font; any other character still comes from the full font. */\n"
        "@font-face{font-display:block;font-family:\"Font Awesome 6 Free\";font-style:normal;font-weight:900;"
        f"src:url({(FONT_DIR / SUBSET).as_posix()}) format(\"woff\");unicode-range:{ranges}}}\n",
        encoding="utf-8")


#: At-rules whose blocks hold rules (purged inside); any other at-rule is kept whole.
NESTING_AT_RULES = ("@media", "@supports", "@layer", "@container")
#: Pseudo-classes whose argument need not match for the selector to match.
ARGUMENT_PSEUDO = re.compile(r":(?:not|is|where|has|matches|-webkit-any|-moz-any)\(")
#: Stylesheets of the book itself: never purged (print.css is read by tools/make_pdf.py, which
#: adds classes of its own).
OWN_CSS = {p.name for p in (Path(__file__).resolve().parent / "static").glob("*.css")} | {"icons.css"}
#: Where the stylesheets are kept as they were before the purge: in the build's doctree folder
#: (``_build/.doctrees``, never published), for tests/test_lean_site.py, which shows the pages with
#: them and with the purged ones and compares what the browser draws.
UNPURGED = "lean_site-unpurged"


def css_items(css: str):
    """The top-level items of a stylesheet: ``(prelude, block)`` for a rule or an at-rule with a
    block, ``(statement, None)`` for ``@import ...;`` and the like. Strings and comments are skipped
    over, so a brace inside either does not count."""
    i, n, start, depth, prelude_end = 0, len(css), 0, 0, 0
    while i < n:
        c = css[i]
        if css.startswith("/*", i):
            end = css.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and css[j] != c:
                j += 2 if css[j] == "\\" else 1
            i = j + 1
            continue
        if c == "\\":
            i += 2
            continue
        if c == "{":
            if depth == 0:
                prelude_end = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                yield css[start:prelude_end], css[prelude_end + 1:i]
                start = i + 1
        elif c == ";" and depth == 0:
            yield css[start:i + 1], None
            start = i + 1
        i += 1
    if css[start:].strip():
        yield css[start:], None


def split_selectors(prelude: str) -> list[str]:
    """A selector list (its comments already taken out: :func:`without_comments`) split at its
    top-level commas (not those inside ``:is(...)``, ``[...]``, a string or after a backslash)."""
    out, depth, current, quote, i = [], 0, "", None, 0
    while i < len(prelude):
        c = prelude[i]
        if c == "\\":
            current += prelude[i:i + 2]
            i += 2
            continue
        if quote:
            quote = None if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(current)
            current = ""
            i += 1
            continue
        current += c
        i += 1
    return [*out, current]


def without_comments(prelude: str) -> tuple[str, list[str]]:
    """``prelude`` with its comments taken out (not a ``/*`` inside a string), and the comments."""
    text, comments, quote, i, n = [], [], None, 0, len(prelude)
    while i < n:
        c = prelude[i]
        if quote is None and prelude.startswith("/*", i):
            end = prelude.find("*/", i + 2)
            end = n if end < 0 else end + 2
            comments.append(prelude[i:end])
            i = end
            continue
        step = 2 if c == "\\" else 1
        if quote and c == quote:
            quote = None
        elif quote is None and c in "\"'":
            quote = c
        text.append(prelude[i:i + step])
        i += step
    return "".join(text), comments


def notices(comments: list[str]) -> str:
    """The comments a stylesheet must keep: licence notices (``/*! ... */``), one a line."""
    return "".join(c + ("" if c.endswith("*/") else "*/") + "\n" for c in comments if c.startswith("/*!"))


def required_names(selector: str) -> list[str] | None:
    """The classes and ids an element (or its ancestors) must carry for ``selector`` to match;
    None when that cannot be read safely (an escaped character)."""
    s = re.sub(r"/\*.*?\*/", "", selector, flags=re.S)
    s = re.sub(r"\"[^\"]*\"|'[^']*'", "", s)
    s = re.sub(r"\[[^\]]*\]", "", s)
    while found := ARGUMENT_PSEUDO.search(s):
        depth, j = 1, found.end()
        while j < len(s) and depth:
            depth += {"(": 1, ")": -1}.get(s[j], 0)
            j += 1
        s = s[:found.start()] + s[j:]
    if "\\" in s:
        return None
    return re.findall(r"[.#](-?[_a-zA-Z][\w-]*)", s)


def purge_css(css: str, used) -> str:
    """``css`` without the selectors that name a class or id for which ``used(name)`` is false.

    The comments before a rule are taken out of its selector list first (a licence notice is
    written out on its own, any other comment left out): Font Awesome's notice in front of
    ``.fa,.fa-solid,...`` holds a comma ("Fonticons, Inc."), and a list split inside the comment
    whose first part was kept opened a comment that never closed, which hid the rules after it
    (the site's icons: menu, contents, search, download, colour mode)."""
    out = []
    for prelude, block in css_items(css):
        if block is None:
            out.append(prelude)
            continue
        prelude, comments = without_comments(prelude)
        prelude = prelude.strip()
        head = prelude.lower()
        out.append(notices(comments))
        if head.startswith("@"):
            if head.startswith(NESTING_AT_RULES):
                inner = purge_css(block, used)
                if inner.strip():
                    out.append(f"{prelude}{{{inner}}}")
            else:
                out.append(f"{prelude}{{{block}}}")
            continue
        kept = [s.strip() for s in split_selectors(prelude)
                if (names := required_names(s)) is None or all(used(name) for name in names)]
        if kept:
            out.append(",".join(kept) + "{" + block + "}")
    return "".join(out)


def site_names(outdir: Path):
    """``used(name)``: is ``name`` a word of a page or a script of the site, or does it begin with a
    word of theirs that ends in a hyphen (a script builds ``bs-tooltip-auto`` from ``bs-``)?"""
    words: set[str] = set()
    files = [p for p in outdir.rglob("*.html") if "_static" not in p.parts]
    files += [p for p in (outdir / "_static").rglob("*.js") if "mathjax" not in p.parts]
    for path in files:
        words.update(re.findall(r"[A-Za-z_][\w-]*", path.read_text(encoding="utf-8", errors="replace")))
    prefixes = tuple(w for w in words if w.endswith("-") and len(w) > 2)
    return lambda name: name in words or name.startswith(prefixes)


def purge_stylesheets(outdir: Path, keep: Path | None = None) -> None:
    """Purge the themes' stylesheets of ``outdir``; with ``keep``, first copy each as it was to
    ``keep`` (same path under it as under ``_static``)."""
    used = site_names(outdir)
    static = outdir / "_static"
    if keep is not None:
        shutil.rmtree(keep, ignore_errors=True)
    for css in static.rglob("*.css"):
        if css.name in OWN_CSS or "mathjax" in css.parts:
            continue
        text = css.read_text(encoding="utf-8")
        if keep is not None:
            original = keep / css.relative_to(static)
            original.parent.mkdir(parents=True, exist_ok=True)
            original.write_text(text, encoding="utf-8")
        css.write_text(purge_css(text, used), encoding="utf-8")


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
    subset_icons(Path(app.outdir))
    purge_stylesheets(Path(app.outdir), keep=Path(app.doctreedir) / UNPURGED)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", add_templates)
    app.add_css_file("icons.css")   # written at the end of the build (subset_icons)
    app.connect("build-finished", prune, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
