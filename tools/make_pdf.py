"""The PDF edition: every page of the built site, in the order of the table of contents, as one PDF.

    python tools/make_pdf.py [--site _build/html] [--out _build/downloads/attention-claims.pdf]

Route (offline, no LaTeX): the site is served on 127.0.0.1 and the Chromium of the browser test
(``/usr/bin/chromium``, driven by Playwright) prints every page listed in ``_toc.yml``, in order,
with ``page.pdf`` once MathJax has typeset every equation and every figure has loaded, using the
site's print stylesheet (``book/_ext/static/print.css``: the article only, no sidebars, buttons or
search; folded code (``hide-input``) left out) and the print rules of this file (``PRINT_EXTRA``,
``FIT_COLUMN``): the page is laid out at the width of the printed column, visible code and
outputs wrap, a display, table or figure wider than the column is scaled down by itself (never
the page: every chapter prints at 100 %), and a block that would leave most of a page empty
before it is allowed to break. A heading keeps the block after it (``KEEP_WITH_NEXT``); one that
printed at a page's foot anyway (measured in the printed part: nothing under it on its page) starts
the next page and the part is printed again (``BREAK_BEFORE``). pypdf then joins the parts behind a
title page and

* turns every link into the site into a link inside the PDF: Chromium writes a named destination
  for every element id of a page (each page gets hidden same-page links to its ids, the only
  ones Chromium writes destinations for), and a link to ``page.html#id`` becomes a jump to that
  destination; links to a figure's image file are dropped, links to other hosts stay external;
* adds a bookmark per page of the table of contents and, nested under it, one per section
  (each claim's section: ``L1 · Linear maps in a row collapse …``);
* prints a page number (and the chapter's title) on every page but the title page, from a second
  Chromium print of running headers laid over the pages, and sets the page labels to match;
* names the document's language (``/Lang``, for screen readers);
* stores the fonts the parts share once, and each figure (a PNG of a few colours, which Chromium
  writes as 24-bit RGB) with an indexed colour space: lossless, 3.3 -> 1.9 MB for the book.

Nothing prints as a raster but the figures: print.css removes every shadow, filter and blend
(Chromium printed each box shadow as a grey JPEG: 662 of them, 11.5 of 19.6 MB).

(One long HTML page of all articles prints too, but MathJax typesets ~3,000 formulas on one page in
minutes.) The PDF is written to ``_build/downloads/`` and copied into the site's ``downloads/``
folder; the landing and reproduce pages link it once the site is built again (``make pdf`` does).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import html
import http.server
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
DEFAULT_SITE = ROOT / "_build" / "html"
DEFAULT_OUT = ROOT / "_build" / "downloads" / "attention-claims.pdf"
LANGUAGE = "en"   # the PDF's /Lang (the site's language, _config.yml: en)
TITLE_PAGE = "(title page)"   # printed from the first page, its article replaced by the title
ARTICLE = re.compile(r'<article class="bd-article"[^>]*>(.*?)</article>', re.S)
MARGINS = {"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"}

PAGE_WIDTH_MM, PAGE_HEIGHT_MM = 210, 297   # A4
COLUMN_PX = round((PAGE_WIDTH_MM - 28) / 25.4 * 96)    # the printed column (A4 less the margins) in CSS px
PAGE_PX = round((PAGE_HEIGHT_MM - 32) / 25.4 * 96)     # the printed height of one page in CSS px
MIN_ZOOM = 0.6   # a display or table that must shrink more than this to fit the column is reported

PRINT_EXTRA = """
  .pdf-title { text-align: center; padding-top: 30vh; }
  .pdf-title h1 { font-size: 2.6em; border: none; }
  /* Code and text outputs wrap at the margin, anywhere if they must (a long token has no space). */
  pre, .cell_input pre, .cell_output pre, .output pre {
    white-space: pre-wrap !important; overflow-wrap: anywhere !important; word-break: break-word;
  }
  /* A wide display or table is scaled by FIT_COLUMN, alone; nothing may widen the page. */
  mjx-container[display="true"] { max-width: 100%; }
  .bd-article { overflow-wrap: break-word; }
  img, svg:not(mjx-container svg) { max-width: 100% !important; }
  img { max-height: 50vh; object-fit: contain; }   /* a figure moved whole to the next page leaves at most half a page */
  /* The site's scroll cue of a formula that overflows its box on screen (a shadow at its edge)
     is a grey smear on paper; nothing scrolls on paper. */
  .math-more-right, .math-more-left { box-shadow: none !important; }
  .bd-article span.math.math-scrolls { overflow: visible !important; }
  /* Tables break between rows (the theme's scroll box would print each table whole). */
  .pst-scrollable-table-container, .table-wrapper { display: block !important; }
"""

# After the print styles: every element wider than the printed column is scaled down by itself
# (CSS zoom), then every block that Chromium must not break (figures, proofs, verdict boxes) and
# that is taller than a third of a page may break after all (moved whole to the next page, it left most
# of a page empty). Returns what it did and whatever still sticks out of the column.
FIT_COLUMN = """([minZoom, pageHeight]) => {
  const article = document.querySelector('.bd-article');
  const right = () => article.getBoundingClientRect().right + 2;   // 2 px: rounding of zoomed boxes
  const zoomed = [];
  const wide = article.querySelectorAll('mjx-container, table, .cell_output .output, .output_area, img, svg');
  for (const el of wide) {
    if (el.closest('mjx-container') && el.tagName !== 'MJX-CONTAINER') continue;   // a part of a formula
    if (el.parentElement.closest('[style*="zoom"]')) continue;   // inside a scaled element: zooms multiply
    const box = el.getBoundingClientRect();
    // An inline formula moves to a line of its own before it sticks out: it must fit the column.
    const inline = el.tagName === 'MJX-CONTAINER' && el.getAttribute('display') !== 'true';
    // (the width of the block it sits in: a table cell or a fold in one clips what sticks out)
    let block = el.parentElement;
    while (block !== article && ['inline', 'inline-block', 'contents'].includes(getComputedStyle(block).display)) {
      block = block.parentElement;
    }
    const style = getComputedStyle(block);
    const blockRoom = block.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const room = inline ? Math.min(article.clientWidth, blockRoom) : right() - 2 - box.left;
    if (inline && box.width <= room) continue;
    const need = Math.max(el.scrollWidth, box.width);
    if (need > room + 1 && room > 0) {
      const zoom = Math.max(0.3, Math.floor(room / need * 1000) / 1000);
      el.style.zoom = zoom;
      zoomed.push({what: el.tagName.toLowerCase() + '.' + (el.className.baseVal ?? el.className), zoom});
    }
  }
  let unbroken = 0;
  for (const el of article.querySelectorAll('figure, .proof, .verdict-box, .admonition, table, tr, .cell')) {
    if (el.getBoundingClientRect().height > pageHeight / 3) {
      el.style.breakInside = 'auto'; el.style.pageBreakInside = 'auto'; unbroken += 1;
    }
  }
  const limit = right();
  const overflow = [];
  for (const el of article.querySelectorAll('*')) {
    if (el.tagName.startsWith('MJX-') && el.tagName !== 'MJX-CONTAINER') continue;   // its container is checked
    if (el.closest('mjx-assistive-mml')) continue;
    const box = el.getBoundingClientRect();
    if (box.width > 0 && box.right > limit && getComputedStyle(el).visibility !== 'hidden') {
      overflow.push(el.tagName.toLowerCase() + '.' + (el.className.baseVal ?? el.className) + ' +' + Math.round(box.right - limit) + 'px');
    }
  }
  return {zoomed, unbroken, overflow: overflow.slice(0, 10), overflowCount: overflow.length,
          smallest: zoomed.reduce((m, z) => Math.min(m, z.zoom), 1),
          pageWidth: document.documentElement.scrollWidth, column: article.clientWidth};
}"""

# A heading printed at the foot of a page with its section on the next (three did): each heading
# and the block after it are wrapped in .keep-with-next (print.css: not broken inside) when the
# block is at most a third of a page; a taller block may break (FIT_COLUMN), and the heading's
# break-after: avoid keeps the block's first lines with it. Returns how many pairs were wrapped.
KEEP_WITH_NEXT = """([pageHeight]) => {
  const article = document.querySelector('.bd-article');
  let kept = 0;
  for (const heading of article.querySelectorAll('h1, h2, h3, h4')) {
    let next = heading.nextElementSibling;
    while (next && next.tagName === 'SPAN' && !next.textContent.trim()) next = next.nextElementSibling;
    if (!next || next.getBoundingClientRect().height > pageHeight / 3) continue;
    let start = heading;   // an empty anchor before the heading goes with it (DESTINATIONS moves it in)
    while (start.previousElementSibling && start.previousElementSibling.tagName === 'SPAN'
           && !start.previousElementSibling.textContent.trim()) start = start.previousElementSibling;
    const keep = document.createElement('div');
    keep.className = 'keep-with-next';
    start.before(keep);
    let node = start;
    while (node) { const after = node.nextSibling; keep.appendChild(node); if (node === next) break; node = after; }
    kept += 1;
  }
  return kept;
}"""

WAIT_FOR_PAGE = """async () => {
  const images = Array.from(document.images);
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map((img) => img.decode().catch(() => null)));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  await document.fonts.ready;
  return {images: images.length, broken: images.filter((i) => !(i.complete && i.naturalWidth > 0)).length,
          math: document.querySelectorAll(".math").length,
          typeset: document.querySelectorAll(".math mjx-container").length};
}"""

# Each heading of the article gets a marker ``pdf-h<n>`` (a zero-width space: Chromium writes a
# named destination for it, DESTINATIONS) so that a heading printed at the foot of a page can be
# found in the printed part (:func:`headings_at_page_foot`). Returns ``{id: [its height with its
# top margin, its font size]}`` in CSS px.
HEADING_MARKS = """() => {
  const found = {};
  document.querySelectorAll('.bd-article h1, .bd-article h2, .bd-article h3, .bd-article h4').forEach((heading, n) => {
    const marker = document.createElement('span');
    marker.id = 'pdf-h' + n;
    marker.textContent = '\\u200b';
    heading.prepend(marker);
    const style = getComputedStyle(heading);
    found[marker.id] = [heading.getBoundingClientRect().height + parseFloat(style.marginTop), parseFloat(style.fontSize)];
  });
  return found;
}"""

# A heading that printed at a page's foot anyway (the block after it could not move with it: a
# tall output, a display, a table) starts the next page (with the empty anchors and the
# .keep-with-next box it opens).
BREAK_BEFORE = """(ids) => {
  for (const id of ids) {
    const heading = document.getElementById(id).closest('h1, h2, h3, h4');
    const keep = heading.parentElement.classList.contains('keep-with-next')
                 && heading.parentElement.firstElementChild === heading ? heading.parentElement : heading;
    keep.style.breakBefore = 'page';
  }
}"""

# Chromium writes a named destination only for an element that a link of the same page points
# to: one hidden same-page link per element id of the article gives every id a destination.
DESTINATIONS = """() => {
  const article = document.querySelector('.bd-article');
  // An empty anchor before a heading (<span id="claim-l1"></span><h2>) stays at the foot of the
  // previous page when the heading moves to the next one: it goes inside the heading. A section's
  // own id marks where its box starts, possibly on the previous page too: its heading gets a
  // marker "pdf-heading-<id>" that merge() prefers.
  for (const span of article.querySelectorAll('span[id]:empty')) {
    const next = span.nextElementSibling;
    if (next && /^H[1-6]$/.test(next.tagName)) { span.textContent = '\\u200b'; next.prepend(span); }
  }
  for (const heading of article.querySelectorAll('h1, h2, h3')) {
    const section = heading.closest('section[id]');   // (a heading may sit in a .keep-with-next)
    if (!section || section.querySelector('h1, h2, h3') !== heading) continue;
    const marker = document.createElement('span');
    marker.id = 'pdf-heading-' + section.id;
    marker.textContent = '\\u200b';   // a zero-width space: an empty inline box may be placed on the page before
    heading.prepend(marker);
  }
  const ids = Array.from(document.querySelectorAll('.bd-article [id]')).map((el) => el.id);
  const box = document.createElement('div');
  box.style.display = 'none';
  for (const id of new Set(ids)) {
    const a = document.createElement('a'); a.href = '#' + encodeURIComponent(id); box.appendChild(a);
  }
  article.appendChild(box);
  return ids.length;
}"""

def toc_pages(root: Path = ROOT) -> list[str]:
    """The site's pages (``book/intro.html``, …) in the order of ``_toc.yml``."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [f"{Path(f).with_suffix('').as_posix()}.html" for f in files]


def title_html(site: Path, pages: list[str]) -> str:
    """The title page's article: the book's title (from the site's logo text) and the date."""
    template = (site / pages[0]).read_text(encoding="utf-8")
    title = re.search(r'<p class="title logo__title">(.*?)</p>', template, re.S)
    title = title.group(1).strip() if title else "attention-claims"
    stamp = datetime.date.today().isoformat()
    return (f'<section class="pdf-title"><h1>{title}</h1><p>The PDF edition of the web book, printed {stamp}.</p>'
            "<p>Folded code (imports, helpers, plotting) is left out; the notebooks hold all of it.</p></section>")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A connection the browser drops when it leaves a page is not an error of the site."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def _serve(directory: Path):
    """The site on 127.0.0.1 from a thread (MathJax loads its fonts and extensions over HTTP)."""
    httpd = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


SECTION = re.compile(r'<section id="([^"]+)"[^>]*>\s*(?:<span id="[^"]*"></span>\s*)*<h2>(.*?)<a class="headerlink"', re.S)


def sections(site: Path, path: str) -> list[tuple[str, str]]:
    """The ``(id, plain-text title)`` of each second-level section of a page (a claim's section:
    ``("l1-linear-maps-…", "L1 · Linear maps in a row collapse — and in every head, W_Vⁱ W_Oⁱ …")``)."""
    if path == TITLE_PAGE:
        return []
    text = (site / path).read_text(encoding="utf-8")
    return [(anchor, plain_text(heading)) for anchor, heading in SECTION.findall(text)]


MAX_BREAK_ROUNDS = 4
FOOT_PT = float(MARGINS["bottom"].removesuffix("mm")) / 25.4 * 72   # the bottom margin in pt


def _drawn(page) -> list[tuple[float, float]]:
    """What a page of a printed part draws, as ``(bottom, top, font size)`` in pt: every text run
    (its baseline twice) and every image (its box; no font size)."""
    found = []
    resources = page.get("/Resources")
    xobjects = resources.get_object().get("/XObject", {}) if resources is not None else {}
    images = {name for name, ref in xobjects.get_object().items() if ref.get_object().get("/Subtype") == "/Image"} \
        if xobjects else set()

    def text(run, cm, tm, font, size):
        if run.strip():
            y = cm[5] + tm[5] * cm[3]
            found.append((y, y, size * abs(tm[3] * cm[3] or 1)))

    def operator(op, args, cm, tm):
        if op == b"Do" and args and args[0] in images:   # an image: the unit square, mapped by the matrix
            ys = (cm[5], cm[5] + cm[3])
            found.append((min(ys), max(ys), None))

    page.extract_text(visitor_text=text, visitor_operand_before=operator)
    return found


def headings_at_page_foot(pdf: Path, marks: dict[str, list[float]]) -> list[str]:
    """The markers (:data:`HEADING_MARKS`) of the headings that a printed part prints with
    nothing under them on their page (their section starts on the next). A marker's named
    destination gives the heading's page and a top (at or above its top margin); the heading's
    lines are the first lines of text of its font size under that top, within its measured
    height, top margin and three lines; nothing may be printed under its last line above the
    bottom margin. (Chromium puts the
    destination of an element moved to the next page at the foot of the page before: no text
    of the heading's size is there, and the heading is not judged on that page.)"""
    import logging

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    reader = PdfReader(pdf)
    drawn: dict[int, list] = {}
    split = []
    for name, dest in reader.named_destinations.items():
        name = str(name).lstrip("/")
        if name not in marks:
            continue
        try:
            index, top = reader.get_destination_page_number(dest), float(dest.top)
        except (KeyError, ValueError, TypeError):
            continue
        if index not in drawn:
            drawn[index] = _drawn(reader.pages[index])
        band, size = (v * 0.75 for v in marks[name])           # CSS px -> pt
        # (the destination's top lies up to the margins before the heading above it: measured
        # 65 pt above a 21 pt heading's baseline)
        lines = sorted((b for b, t, s in drawn[index] if s and abs(s - size) < 0.3 and top - band - 3 * size <= b <= top + 2),
                       reverse=True)
        if not lines:
            continue
        last = lines[0]
        for y in lines[1:]:   # the heading's further lines follow at its line height
            if last - y > 1.6 * size:
                break
            last = y
        under = [t for b, t, s in drawn[index] if FOOT_PT < t < last - size / 2]
        if not under:
            split.append(name)
    return sorted(split, key=lambda n: int(n.removeprefix("pdf-h")))


def indexed_images(writer) -> tuple[int, int, int]:
    """Stores every RGB image of at most 256 colours (the book's figures: matplotlib PNGs of a few
    colours, which Chromium writes as 24-bit RGB) with an indexed colour space: one byte a pixel
    and the exact palette, lossless (the decoded pixels are checked equal). Returns (images
    converted, bytes before, bytes after)."""
    import numpy as np
    from pypdf.generic import ArrayObject, ByteStringObject, NameObject, NumberObject, StreamObject

    converted = before = after = 0
    for obj in writer._objects:
        if not (isinstance(obj, StreamObject) and obj.get("/Subtype") == "/Image"
                and obj.get("/Filter") == "/FlateDecode" and obj.get("/BitsPerComponent") == 8
                and "/DecodeParms" not in obj and "/SMask" not in obj and "/Mask" not in obj):
            continue
        space = obj.get("/ColorSpace")
        base = space.get_object() if space is not None else None
        rgb = base == "/DeviceRGB" or (isinstance(base, ArrayObject) and base[0] == "/ICCBased"
                                       and base[1].get_object().get("/N") == 3)
        width, height = int(obj["/Width"]), int(obj["/Height"])
        data = obj.get_data()
        if not rgb or len(data) != width * height * 3:
            continue
        pixels = np.frombuffer(data, np.uint8).reshape(-1, 3)
        packed = (pixels[:, 0].astype(np.uint32) << 16) | (pixels[:, 1].astype(np.uint32) << 8) | pixels[:, 2]
        palette, index = np.unique(packed, return_inverse=True)
        if len(palette) > 256:
            continue
        lookup = np.stack([(palette >> 16) & 255, (palette >> 8) & 255, palette & 255], axis=1).astype(np.uint8)
        assert np.array_equal(lookup[index.ravel()], pixels), "indexed image differs from the original"
        before += len(obj._data)
        obj.set_data(index.astype(np.uint8).tobytes())
        obj[NameObject("/ColorSpace")] = ArrayObject([NameObject("/Indexed"), space, NumberObject(len(palette) - 1),
                                                      ByteStringObject(lookup.tobytes())])
        after += len(obj._data)
        converted += 1
    return converted, before, after


async def print_pages(site: Path, pages: list[str], folder: Path) -> list[dict]:
    """Print each page (and a title page) to its own PDF in ``folder``; returns what each held."""
    from playwright.async_api import async_playwright

    title = title_html(site, pages)
    results = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        # The viewport is the printed column: what FIT_COLUMN measures is what Chromium prints.
        page = await browser.new_page(viewport={"width": COLUMN_PX, "height": PAGE_PX})
        page.set_default_timeout(600_000)   # a page of a loaded machine (load 20 on 2 cores) took over 120 s
        await page.emulate_media(media="print")
        with _serve(site) as base:
            for number, path in enumerate([TITLE_PAGE, *pages]):
                await page.goto(base + (pages[0] if path == TITLE_PAGE else path), wait_until="load")
                if path == TITLE_PAGE:   # the first page's head and styles, a title as its article
                    await page.evaluate("(html) => { document.querySelector('.bd-article').innerHTML = html; }",
                                        title)
                facts = await page.evaluate(WAIT_FOR_PAGE)
                await page.add_style_tag(content=PRINT_EXTRA)
                facts.update(await page.evaluate(FIT_COLUMN, [MIN_ZOOM, PAGE_PX]))
                facts["kept_with_next"] = await page.evaluate(KEEP_WITH_NEXT, [PAGE_PX])
                marks = await page.evaluate(HEADING_MARKS)
                facts["ids"] = await page.evaluate(DESTINATIONS)
                facts.update(path=path, title=await page.title(), pdf=str(folder / f"{number:03d}.pdf"),
                             sections=sections(site, path), base=base, broken_before=[])
                # (tagged=True / outline=True double the time: pypdf adds the bookmarks)
                await page.pdf(path=facts["pdf"], format="A4", print_background=True, margin=MARGINS)
                # break-after: avoid and .keep-with-next do not hold every heading to its next block:
                # a heading measured at a page's foot in the printed part starts the next page, and
                # the part is printed again (a moved heading can move a later one: a few rounds).
                for _ in range(MAX_BREAK_ROUNDS):
                    split = headings_at_page_foot(Path(facts["pdf"]), marks)
                    if not split:
                        break
                    facts["broken_before"] += split
                    await page.evaluate(BREAK_BEFORE, split)
                    await page.pdf(path=facts["pdf"], format="A4", print_background=True, margin=MARGINS)
                facts["split_headings"] = headings_at_page_foot(Path(facts["pdf"]), marks)
                results.append(facts)
        await browser.close()
    return results


async def print_running_heads(heads: list[str], out: Path) -> None:
    """A PDF with one A4 page per entry of ``heads`` (``""`` for none), each holding only that
    page's running head (the chapter's title) and its number, in the margins, to be laid over the
    printed pages (Chromium numbers each part from 1; the book's numbers run on across parts)."""
    from playwright.async_api import async_playwright

    boxes = "".join(
        f'<div class="p">{"" if not head else f"<span class=h>{html.escape(head)}</span><span class=n>{n}</span>"}</div>'
        for n, head in enumerate(heads, start=1))
    document = f"""<!doctype html><html><head><meta charset="utf-8"><style>
      @page {{ size: A4; margin: 0; }}
      html, body {{ margin: 0; font: 8pt/1 "DejaVu Sans", sans-serif; color: #555; }}
      .p {{ position: relative; width: {PAGE_WIDTH_MM}mm; height: {PAGE_HEIGHT_MM}mm; break-after: page; overflow: hidden; }}
      .h {{ position: absolute; top: 8mm; left: 14mm; right: 14mm; text-align: center; white-space: nowrap;
            overflow: hidden; text-overflow: ellipsis; }}
      .n {{ position: absolute; bottom: 8mm; left: 0; right: 0; text-align: center; font-size: 9pt; color: #333; }}
    </style></head><body>{boxes}</body></html>"""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                   args=["--no-sandbox", "--disable-gpu"])
        page = await browser.new_page()
        await page.set_content(document)
        await page.pdf(path=str(out), format="A4", margin={"top": "0", "bottom": "0", "left": "0", "right": "0"})
        await browser.close()


def plain_text(fragment: str) -> str:
    """HTML with inline TeX as plain text (bookmarks and running heads hold no markup):
    ``why <span …>\\(\\sqrt{d_k}\\)</span>`` → ``why √dₖ``."""
    text = html.unescape(re.sub(r"<[^>]+>", "", fragment))
    for tex, plain in ((r"\sqrt{d_k}", "√dₖ"), (r"\sqrt", "√"), ("d_k", "dₖ"), (r"^\top", "ᵀ"), (r"\top", "ᵀ"),
                       (r"\to", "→"), (r"\cdot", "·"), (r"\ge", "≥"), (r"\le", "≤"), (r"\neq", "≠"),
                       (r"\approx", "≈"), (r"\sum", "Σ"), (r"\operatorname", ""), (r"\mathrm", ""),
                       (r"\mathbb{E}", "E"), (r"\varepsilon", "ε"), (r"\alpha", "α"), (r"\sigma", "σ")):
        text = text.replace(tex, plain)
    text = re.sub(r"\\[()]", "", text)
    text = re.sub(r"\\([A-Za-z]+)", r"\1", text).replace("{", "").replace("}", "")
    return " ".join(text.split())


def bookmark_title(page_title: str) -> str:
    """A page's title as a PDF bookmark: without the site's name and with its inline math as
    text (bookmarks are plain text): ``Cosine … why \\(\\sqrt{d_k}\\) — site`` → ``… why √dₖ``."""
    return plain_text(page_title.split(" — ")[0].strip())


def _destinations(reader) -> dict[str, tuple[int, float | None]]:
    """A part's named destinations: ``{id: (page index in the part, top)}``.

    Chromium puts the destination of an element that a page break moved to the next page (a
    heading kept with what follows it) at the foot of the page before, exactly two bottom margins
    up from the edge (measured: 90.63 pt with 16 mm margins); such a destination is the next
    page's top."""
    foot = 2 * float(MARGINS["bottom"].removesuffix("mm")) / 25.4 * 72 + 1
    found = {}
    pages = len(reader.pages)
    for name, dest in reader.named_destinations.items():
        try:
            index, top = reader.get_destination_page_number(dest), float(dest.top or 0)
        except (KeyError, ValueError, TypeError):
            continue
        if top <= foot and index + 1 < pages:
            index, top = index + 1, None
        found[str(name).lstrip("/")] = (index, top)
    return found


def merge(results: list[dict], heads_pdf: Path | None, out: Path) -> dict:
    """One PDF: links into the site resolved inside it, a bookmark per page and per section,
    running heads and page numbers laid over every page but the title page; fonts and images
    shared by the parts are stored once. Returns counts of what it did."""
    from urllib.parse import unquote, urlsplit

    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import ArrayObject, Fit, FloatObject, NameObject, NullObject, NumberObject, TextStringObject

    writer = PdfWriter()
    starts, dests = {}, {}   # page path -> first page index; (page path, id) -> (page index, top)
    for facts in results:
        first = len(writer.pages)
        reader = PdfReader(facts["pdf"])
        starts[facts["path"]] = first
        for name, (index, top) in _destinations(reader).items():
            dests[(facts["path"], unquote(name))] = (first + index, top)
        writer.append(reader, import_outline=False)
        facts["pages"] = (first, len(writer.pages))

    counts = {"internal": 0, "external": 0, "dropped": 0, "unresolved": []}

    def destination(index: int, top: float | None) -> ArrayObject:
        return ArrayObject([writer.pages[index].indirect_reference, NameObject("/XYZ"), NumberObject(0),
                            FloatObject(top) if top is not None else NullObject(), NumberObject(0)])

    for facts in results:
        base = facts.get("base", "")
        for index in range(*facts["pages"]):
            page = writer.pages[index]
            annotations = page.get("/Annots")
            if not annotations:
                continue
            kept = ArrayObject()
            for ref in annotations:
                annotation = ref.get_object()
                if annotation.get("/Subtype") != "/Link":
                    kept.append(ref)
                    continue
                target = None   # (page path, id or None)
                if "/Dest" in annotation and not isinstance(annotation["/Dest"], ArrayObject):
                    target = (facts["path"], unquote(str(annotation["/Dest"]).lstrip("/")))
                elif "/A" in annotation and "/URI" in annotation["/A"].get_object():
                    uri = str(annotation["/A"].get_object()["/URI"])
                    if not (base and uri.startswith(base)):
                        counts["external"] += 1
                        kept.append(ref)
                        continue
                    parts = urlsplit(uri[len(base):])
                    path = parts.path or (facts["path"] if facts["path"] != TITLE_PAGE else "")
                    target = (path, unquote(parts.fragment) or None)
                else:
                    kept.append(ref)
                    continue
                path, anchor = target
                if anchor and (path, f"pdf-heading-{anchor}") in dests:   # a section: its heading
                    at = dests[(path, f"pdf-heading-{anchor}")]
                elif anchor and (path, anchor) in dests:
                    at = dests[(path, anchor)]
                elif path in starts and not anchor:
                    at = (starts[path], None)
                elif path in starts:   # an id Chromium wrote no destination for: the page's start
                    counts["unresolved"].append(f"{path}#{anchor}")
                    at = (starts[path], None)
                else:   # a figure's image file, the index or a download: nothing to jump to in the PDF
                    counts["dropped"] += 1
                    continue
                for key in ("/A", "/Dest"):
                    if key in annotation:
                        del annotation[key]
                annotation[NameObject("/Dest")] = destination(*at)
                counts["internal"] += 1
                kept.append(ref)
            page[NameObject("/Annots")] = kept

    # Bookmarks: a page of the table of contents, and under it each of its sections.
    counts["bookmarks"] = 0
    for facts in results:
        if facts["path"] == TITLE_PAGE:
            continue
        parent = writer.add_outline_item(title=bookmark_title(facts["title"]), page_number=facts["pages"][0])
        counts["bookmarks"] += 1
        for anchor, heading in facts["sections"]:
            key = next((k for k in ((facts["path"], f"pdf-heading-{anchor}"), (facts["path"], anchor)) if k in dests), None)
            if key:
                index, top = dests[key]
                writer.add_outline_item(title=heading, page_number=index, parent=parent,
                                        fit=Fit.xyz(left=0, top=top, zoom=0) if top is not None else Fit.fit())
                counts["bookmarks"] += 1
            else:
                counts["unresolved"].append(f"{facts['path']}#{anchor} (bookmark)")

    # Running heads and page numbers over every page but the title page; page labels to match.
    if heads_pdf is not None:
        heads = PdfReader(heads_pdf)
        for index in range(1, len(writer.pages)):
            writer.pages[index].merge_page(heads.pages[index], over=True)
            writer.pages[index].compress_content_streams()
    writer.set_page_label(0, len(writer.pages) - 1, style="/D", start=1)

    counts["indexed"] = indexed_images(writer)
    writer.compress_identical_objects(remove_duplicates=True, remove_unreferenced=True)
    writer.add_metadata({"/Title": "attention-claims", "/Creator": "tools/make_pdf.py (Chromium, pypdf)"})
    # the document's language (PDF 1.4 catalogue /Lang): a screen reader reads the book as English
    writer._root_object[NameObject("/Lang")] = TextStringObject(LANGUAGE)
    writer.page_mode = "/UseOutlines"
    with out.open("wb") as handle:
        writer.write(handle)
    counts["pages"] = len(writer.pages)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=DEFAULT_SITE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--pages", nargs="*", help="print only these pages (site paths; default: all of _toc.yml)")
    args = parser.parse_args(argv)
    site, out = args.site.resolve(), args.out.resolve()
    if not (site / "index.html").exists():
        raise SystemExit(f"make_pdf: no built site at {site}: run `make book` first")
    if not CHROMIUM.exists():
        raise SystemExit("make_pdf: no Chromium at /usr/bin/chromium: apt-get install -y chromium")
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    pages = args.pages or toc_pages()
    missing = [p for p in pages if not (site / p).exists()]
    if missing:
        raise SystemExit(f"make_pdf: in _toc.yml but not in the built site {site}: {missing} (build the book first)")
    with tempfile.TemporaryDirectory() as tmp:
        results = asyncio.run(print_pages(site, pages, Path(tmp)))
        broken = [f"{r['path']}: {r['broken']} figures did not load" for r in results if r["broken"]]
        if broken:
            raise SystemExit("make_pdf: " + "; ".join(broken))
        for r in results:
            if r["typeset"] < r["math"]:   # a page without MathJax (no math node) shows its TeX as text
                print(f"make_pdf: warning: {r['path']}: {r['math'] - r['typeset']} of {r['math']} math elements "
                      "not typeset (printed as TeX)", file=sys.stderr)
            if r["overflowCount"]:
                print(f"make_pdf: warning: {r['path']}: {r['overflowCount']} elements wider than the column "
                      f"(Chromium shrinks that page): {r['overflow']}", file=sys.stderr)
            if r["split_headings"]:
                print(f"make_pdf: warning: {r['path']}: {len(r['split_headings'])} headings still printed at a page's "
                      f"foot after {MAX_BREAK_ROUNDS} rounds of breaks", file=sys.stderr)
            if r["smallest"] < MIN_ZOOM:
                print(f"make_pdf: warning: {r['path']}: an element scaled to {r['smallest']:.0%} to fit the column",
                      file=sys.stderr)
        from pypdf import PdfReader

        heads = []   # the title page: no head, no number
        for r in results:
            heads += [bookmark_title(r["title"]) if r["path"] != TITLE_PAGE else ""] * len(PdfReader(r["pdf"]).pages)
        asyncio.run(print_running_heads(heads, Path(tmp) / "heads.pdf"))
        counts = merge(results, Path(tmp) / "heads.pdf", out)
        if counts["unresolved"]:
            print(f"make_pdf: warning: {len(counts['unresolved'])} link targets without a destination "
                  f"(they jump to the page's start): {counts['unresolved'][:10]}", file=sys.stderr)
    facts = {"images": sum(r["images"] for r in results), "math": sum(r["math"] for r in results),
             "zoomed": sum(len(r["zoomed"]) for r in results),
             "broken": sum(len(r["broken_before"]) for r in results), "split": sum(len(r["split_headings"]) for r in results)}
    downloads = site / "downloads"
    downloads.mkdir(exist_ok=True)
    shutil.copy2(out, downloads / out.name)
    print(f"pdf: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} ({out.stat().st_size / 1e6:.1f} MB, "
          f"{counts['pages']} pages, {facts['images']} figures, {facts['math']} math elements, {counts['bookmarks']} bookmarks, "
          f"links: {counts['internal']} inside the PDF, {counts['external']} external, {counts['dropped']} dropped; "
          f"{facts['zoomed']} wide elements scaled; {facts['broken']} headings measured at a page's foot moved to the "
          f"next page, {facts['split']} left there; {counts['indexed'][0]} figures stored indexed, "
          f"{counts['indexed'][1] / 1e6:.1f} -> {counts['indexed'][2] / 1e6:.1f} MB; {time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
