"""The PDF edition: every page of the built site, in the order of the table of contents, as one PDF.

    python tools/make_pdf.py [--site _build/html] [--out _build/downloads/attention-claims.pdf]

Route (offline, no LaTeX): the site is served on 127.0.0.1 and the Chromium of the browser test
(``/usr/bin/chromium``, driven by Playwright) prints every page listed in ``_toc.yml``, in order,
with ``page.pdf`` once MathJax has typeset every equation and every figure has loaded, using the
site's print stylesheet (``book/_ext/static/print.css``: the article only, no sidebars, buttons or
search; folded code (``hide-input``) left out, visible code wrapped). pypdf joins the parts behind
a title page, with a bookmark per page, and stores the fonts the parts share once. (One long
HTML page of all articles prints too, but MathJax typesets ~2,000 formulas on one page in minutes.) The PDF is written to ``_build/downloads/`` and copied into the site's ``downloads/``
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
TITLE_PAGE = "(title page)"   # printed from the first page, its article replaced by the title
ARTICLE = re.compile(r'<article class="bd-article"[^>]*>(.*?)</article>', re.S)
MARGINS = {"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"}

PRINT_EXTRA = """
  .pdf-title { text-align: center; padding-top: 30vh; }
  .pdf-title h1 { font-size: 2.6em; border: none; }
"""

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


async def print_pages(site: Path, pages: list[str], folder: Path) -> list[dict]:
    """Print each page (and a title page) to its own PDF in ``folder``; returns what each held."""
    from playwright.async_api import async_playwright

    title = title_html(site, pages)
    results = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = await browser.new_page(viewport={"width": 1100, "height": 1400})
        page.set_default_timeout(120_000)
        await page.emulate_media(media="print")
        with _serve(site) as base:
            for number, path in enumerate([TITLE_PAGE, *pages]):
                await page.goto(base + (pages[0] if path == TITLE_PAGE else path), wait_until="load")
                if path == TITLE_PAGE:   # the first page's head and styles, a title as its article
                    await page.evaluate("(html) => { document.querySelector('.bd-article').innerHTML = html; }",
                                        title)
                facts = await page.evaluate(WAIT_FOR_PAGE)
                await page.add_style_tag(content=PRINT_EXTRA)
                facts.update(path=path, title=await page.title(), pdf=str(folder / f"{number:03d}.pdf"))
                # (tagged=True / outline=True double the time: pypdf adds the bookmarks)
                await page.pdf(path=facts["pdf"], format="A4", print_background=True, margin=MARGINS)
                results.append(facts)
        await browser.close()
    return results


def bookmark_title(page_title: str) -> str:
    """A page's title as a PDF bookmark: without the site's name and with its inline math as
    text (bookmarks are plain text): ``Cosine … why \\(\\sqrt{d_k}\\) — site`` → ``… why √dₖ``."""
    text = page_title.split(" — ")[0].strip()
    text = text.replace("\\sqrt{d_k}", "√dₖ").replace("d_k", "dₖ")
    return re.sub(r"\\[()]", "", text)


def merge(results: list[dict], out: Path) -> int:
    """One PDF with a bookmark per page; fonts and images shared by the parts are stored once."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for facts in results:
        first = len(writer.pages)
        writer.append(PdfReader(facts["pdf"]), import_outline=False)
        if facts["path"] != TITLE_PAGE:
            writer.add_outline_item(title=bookmark_title(facts["title"]), page_number=first)
    writer.compress_identical_objects(remove_duplicates=True, remove_unreferenced=True)
    writer.add_metadata({"/Title": "attention-claims", "/Creator": "tools/make_pdf.py (Chromium, pypdf)"})
    with out.open("wb") as handle:
        writer.write(handle)
    return len(writer.pages)


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
        count = merge(results, out)
    facts = {"images": sum(r["images"] for r in results), "math": sum(r["math"] for r in results)}
    downloads = site / "downloads"
    downloads.mkdir(exist_ok=True)
    shutil.copy2(out, downloads / out.name)
    print(f"pdf: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} ({out.stat().st_size / 1e6:.1f} MB, "
          f"{count} pages, {facts['images']} figures, {facts['math']} math elements, {time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
