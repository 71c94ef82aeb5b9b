"""The built site in a real browser: headless Chromium, offline, every page.

The module builds the book with the flags of ``make book`` (``-n -W --keep-going``) into a
private temporary folder (or takes an existing build from ``ATTENTION_CLAIMS_SITE``), serves it
on 127.0.0.1 from a thread, and opens every page in Chromium (the Debian package ``chromium``,
driven by Playwright; never a downloaded browser). Every request to a host other than
127.0.0.1 is recorded and goes nowhere (Chromium's proxy is the site's own server). The tests
then assert on what the crawl saw:

* no request left the site, no JavaScript error, no local resource failed;
* math is typeset by MathJax (every math element holds an ``mjx-container``, no ``merror``);
* every image loads; figures keep a light background in dark mode;
* every internal link resolves (HTTP 200) and every fragment is an ``id`` of its page;
* the download (.ipynb / source) button is there; repository, source and edit buttons appear
  exactly when ``repository.url`` of ``_config.yml`` is set; no launch (Binder, Colab) button;
* the search page finds a word.

A second crawl measures the layout at 1400 px (desktop) and 400 px (phone), every book page and
chapter: no figure displayed with another aspect ratio than its own (2 %), no page that scrolls
sideways at 400 px, every prose equation fitting its column at 1400 px (at 400 px a wider one
scrolls inside itself), one search box on desktop; and per chapter, the verdict box before the
first visible code cell of every claim section and visible code ≤ 25 % of the chapter's height
at both widths.

Screenshots of the landing page and of chapter 1 (light and dark) are kept under
``_build/browser/`` with the crawl's timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-quic"]
BOOK_FLAGS = ["-n", "-W", "--keep-going"]   # the flags of `make book`
ARTEFACTS = ROOT / "_build" / "browser"
HOST = "127.0.0.1"
WIDTHS = (1400, 400)   # desktop and phone viewport widths of the layout crawl
ASPECT_TOLERANCE = 0.02
MAX_CODE_SHARE = 0.25
SEARCH_WORD = "softmax"
TABS = 2   # pages open at once
REFRESH = re.compile(r"<meta[^>]+http-equiv=[\"']?refresh", re.IGNORECASE)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="no Chromium at /usr/bin/chromium: install the Debian package `chromium` (apt-get install -y chromium)")


# ------------------------------------------------------------------------------------------
# Build and serve
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built HTML: ``$ATTENTION_CLAIMS_SITE`` if set, else a private build of the book."""
    if os.environ.get("ATTENTION_CLAIMS_SITE"):
        html = Path(os.environ["ATTENTION_CLAIMS_SITE"]).resolve()
        assert (html / "index.html").exists(), f"ATTENTION_CLAIMS_SITE={html} holds no built site"
        return html
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), *BOOK_FLAGS, "--path-output", str(out)],
                            cwd=ROOT, capture_output=True, text=True)
    log = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)
    problems = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
    assert result.returncode == 0, ("the book does not build with -n -W --keep-going:\n"
                                    + "\n".join(problems[:40] or log.splitlines()[-60:]))
    return out / "_build" / "html"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive: one connection for a page's many assets

    def log_message(self, *args) -> None:
        pass

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok and not self.path.startswith("/"):   # proxy form (Chromium's proxy is this server)
            self.server.proxied.append(f"{self.command} {self.path}")
        return ok


class _Server(http.server.ThreadingHTTPServer):
    proxied: list[str]    # requests for other hosts that reached this server as their proxy

    def handle_error(self, request, client_address) -> None:
        """A connection the browser drops when it leaves a page is not an error of the site."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def server(site: Path):
    with _serve(site) as (url, _):
        yield url


@contextlib.contextmanager
def _serve(directory: Path):
    """Serve ``directory`` on 127.0.0.1 from a thread; yields the base URL and the list of
    requests for other hosts that arrived here as their proxy."""
    httpd = _Server((HOST, 0), functools.partial(_QuietHandler, directory=str(directory)))
    httpd.proxied = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{httpd.server_address[1]}/", httpd.proxied
    finally:
        httpd.shutdown()
        httpd.server_close()


def html_pages(site: Path) -> list[str]:
    """Every HTML page of the site (not the theme's assets), relative to its root."""
    skip = {"_static", "_sources", "_images"}
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if not skip & set(p.relative_to(site).parts))


# ------------------------------------------------------------------------------------------
# The crawl: every page once, in one browser
# ------------------------------------------------------------------------------------------

@dataclass
class PageReport:
    path: str
    seconds: float = 0.0
    redirect: str | None = None
    console_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)          # local resources that did not load
    math_elements: int = 0
    math_rendered: int = 0
    math_errors: int = 0
    unnumbered_displays: list[str] = field(default_factory=list)
    images: int = 0
    broken_images: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)


@dataclass
class Crawl:
    base: str
    pages: dict[str, PageReport]
    external: list[tuple[str, str]]                 # (page, url) of every request to another host
    search_results: int
    dark_figures: list[dict]
    seconds: float


PAGE_FACTS = """async () => {
  const images = Array.from(document.images);
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map((img) => img.decode().catch(() => null)));
  if (document.querySelector(".math") && window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  const math = Array.from(document.querySelectorAll(".math"));
  return {
    math_elements: math.length,
    math_rendered: math.filter((m) => m.querySelector("mjx-container")).length,
    math_errors: document.querySelectorAll("mjx-merror, merror, [data-mjx-error]").length,
    unnumbered_displays: Array.from(document.querySelectorAll("div.math"))
      .filter((m) => !m.closest(".cell_output") && !m.querySelector(".eqno"))   // prose, not sympy output
      .map((m) => m.id || m.textContent.slice(0, 60)),
    images: images.length,
    broken_images: images.filter((i) => !(i.complete && i.naturalWidth > 0)).map((i) => i.getAttribute("src")),
    links: Array.from(document.querySelectorAll("a[href]")).map((a) => a.href),
    ids: Array.from(document.querySelectorAll("[id], a[name]")).map((e) => e.id || e.getAttribute("name")),
  };
}"""

DARK_FIGURES = """() => Array.from(document.querySelectorAll(".cell_output img")).map((img) => ({
  src: img.getAttribute("src"),
  theme: document.documentElement.dataset.theme,
  background: getComputedStyle(img).backgroundColor,
}))"""


def _is_local(url: str, base: str) -> bool:
    return url.startswith(base)


async def _visit(page, site: Path, server: str, path: str, report: PageReport, extras: dict) -> None:
    """Open one page and record what it shows; the landing page, chapter 1 and the search page
    get their extra checks (screenshots, dark mode, a query) on the same visit."""
    query = f"?q={SEARCH_WORD}" if path == "search.html" else ""
    await page.goto(server + path + query, wait_until="load")
    if REFRESH.search((site / path).read_text(encoding="utf-8", errors="replace")):
        # A redirect page (index.html): wait for the browser to follow it.
        await page.wait_for_url(lambda url: url != server + path, timeout=10_000)
        await page.wait_for_load_state("load")
        report.redirect = page.url[len(server):]
        await page.evaluate(PAGE_FACTS)   # let the target settle (MathJax, fonts) before moving on
        return
    facts = await page.evaluate(PAGE_FACTS)
    for key in ("math_elements", "math_rendered", "math_errors", "unnumbered_displays", "images", "broken_images",
                "links"):
        setattr(report, key, facts[key])
    report.ids = set(facts["ids"])
    if path == "search.html":
        # The query the search box submits: results appear once the index is loaded.
        try:
            await page.wait_for_function("document.querySelectorAll('#search-results li').length > 0",
                                         timeout=10_000)
        except Exception:   # a timeout: no result, asserted by the test
            pass
        extras["search_results"] = await page.locator("#search-results li").count()
    elif path == "book/intro.html":
        await page.screenshot(path=str(ARTEFACTS / "landing.png"))
    elif path == "notebooks/01-nonlinearity.html":
        figure = page.locator(".cell_output img").first
        if await figure.count():
            await figure.scroll_into_view_if_needed()
        await page.screenshot(path=str(ARTEFACTS / "chapter.png"))
        # Dark mode: the theme follows the reader's preference.
        await page.emulate_media(color_scheme="dark")
        await page.wait_for_function("document.documentElement.dataset.theme === 'dark'", timeout=5_000)
        extras["dark_figures"] = await page.evaluate(DARK_FIGURES)
        await page.screenshot(path=str(ARTEFACTS / "chapter-dark.png"))
        await page.emulate_media(color_scheme="light")


async def _tab(context, site: Path, server: str, pages: dict[str, PageReport], queue: list[str],
               extras: dict) -> None:
    """One browser tab: open the pages of ``queue`` one after the other."""
    page = await context.new_page()
    current = {"page": ""}

    def report() -> PageReport:
        return pages[current["page"]]

    page.on("console", lambda msg: msg.type == "error" and report().console_errors.append(
        f"{msg.text} ({msg.location.get('url', '')})"))
    page.on("pageerror", lambda error: report().console_errors.append(f"uncaught: {error}"))
    page.on("response", lambda r: r.status >= 400 and _is_local(r.url, server)
            and report().failed.append(f"{r.status} {r.url}"))
    # ERR_ABORTED is a request cut short by leaving the page (Chromium fetches the favicon after
    # the load event): the crawl's doing, not the site's. A missing file is a 404, caught above.
    page.on("requestfailed", lambda r: _is_local(r.url, server) and r.failure != "net::ERR_ABORTED"
            and report().failed.append(f"{r.failure} {r.url}"))
    while queue:
        path = current["page"] = queue.pop(0)
        t0 = time.perf_counter()
        await _visit(page, site, server, path, pages[path], extras)
        pages[path].seconds = time.perf_counter() - t0
    await page.close()


async def _crawl(playwright_api, site: Path, server: str) -> Crawl:
    pages = {path: PageReport(path) for path in html_pages(site)}
    external: list[tuple[str, str]] = []
    extras: dict = {"search_results": 0, "dark_figures": []}
    start = time.perf_counter()
    # Nothing may leave the site, and nothing can: every request that is not to the loopback
    # address goes to a "proxy" that is the site's own server (loopback is never proxied), which
    # answers it with an error, so no request reaches another host — the browser's own
    # background requests (component updates, accounts) included, which no page listener sees.
    # Every request of a page to another host is also recorded, and the test fails on it. (Intercepting requests with Playwright's route()
    # instead would switch off Chromium's cache: every page would reload and recompile its
    # scripts, half again the CPU time of the crawl.)
    args = [*CHROMIUM_ARGS, f"--proxy-server={server.rstrip('/')}"]
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=args, headless=True)
        context = await browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")

        def record(request) -> None:
            url = request.url
            if urlsplit(url).scheme in ("http", "https", "ws", "wss") and not _is_local(url, server):
                try:
                    page = request.frame.url
                except Exception:   # a request without a frame (a worker)
                    page = "?"
                external.append((page, url))

        context.on("request", record)
        context.on("websocket", lambda ws: external.append(("?", ws.url)))
        queue = list(pages)
        await asyncio.gather(*(_tab(context, site, server, pages, queue, extras) for _ in range(TABS)))
        await browser.close()
    return Crawl(server, pages, external, extras["search_results"], extras["dark_figures"],
                 time.perf_counter() - start)


@pytest.fixture(scope="module")
def crawl(site: Path, server: str) -> Crawl:
    playwright_api = pytest.importorskip("playwright.async_api",
                                         reason="the Python package playwright is not installed")
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(_crawl(playwright_api, site, server))
    (ARTEFACTS / "timings.json").write_text(json.dumps(
        {"pages": len(result.pages), "tabs": TABS, "seconds": round(result.seconds, 2),
         "per_page": {p: round(r.seconds, 3) for p, r in result.pages.items()}}, indent=2) + "\n")
    return result


# ------------------------------------------------------------------------------------------
# The assertions
# ------------------------------------------------------------------------------------------

def test_every_page_was_opened(crawl: Crawl) -> None:
    expected = {"index.html", "search.html", "book/intro.html", "book/claims.html", "book/reproduce.html",
                "book/notation.html", "book/references.html", "notebooks/01-nonlinearity.html"}
    assert expected <= set(crawl.pages), f"pages missing from the build: {sorted(expected - set(crawl.pages))}"
    assert crawl.pages["index.html"].redirect == "book/intro.html"


def test_no_request_leaves_the_site(crawl: Crawl) -> None:
    assert not crawl.external, "requests to other hosts (sent to a dead end, never out):\n" + "\n".join(
        f"{page}: {url}" for page, url in crawl.external)


def test_the_crawl_catches_requests_to_other_hosts(tmp_path: Path) -> None:
    # The check above must be able to fail: a one-page site that asks three other hosts for an
    # image (https, by name), a script (http, an IP literal) and a stylesheet. Each request is
    # recorded, and each went to the dead-end proxy (the site's server), not to its host.
    playwright_api = pytest.importorskip("playwright.async_api",
                                         reason="the Python package playwright is not installed")
    outside = ["https://example.com/figure.png", "http://192.0.2.1/script.js", "https://cdn.example.org/style.css"]
    (tmp_path / "page.html").write_text(
        "<!doctype html><html><head><link rel='icon' href='data:,'>"
        f"<link rel='stylesheet' href='{outside[2]}'></head>"
        f"<body><p>text</p><img src='{outside[0]}'><script src='{outside[1]}'></script></body></html>")
    with _serve(tmp_path) as (url, proxied):
        result = asyncio.run(_crawl(playwright_api, tmp_path, url))
    assert sorted(external for _, external in result.external) == sorted(outside)
    assert result.pages["page.html"].broken_images == [outside[0]]
    # (Chromium's own background requests, e.g. to update.googleapis.com, end there too.)
    page_hosts = [entry for entry in proxied if any(host in entry for host in ("example", "192.0.2.1"))]
    assert sorted(page_hosts) == ["CONNECT cdn.example.org:443", "CONNECT example.com:443",
                                  "GET http://192.0.2.1/script.js"], proxied


def test_no_javascript_errors(crawl: Crawl) -> None:
    errors = [f"{r.path}: {e}" for r in crawl.pages.values() for e in r.console_errors]
    assert not errors, "console errors:\n" + "\n".join(errors)


def test_every_local_resource_loads(crawl: Crawl) -> None:
    failed = [f"{r.path}: {f}" for r in crawl.pages.values() for f in r.failed]
    assert not failed, "resources that failed to load:\n" + "\n".join(failed)


def test_math_is_rendered(crawl: Crawl) -> None:
    with_math = {p: r for p, r in crawl.pages.items() if r.math_elements}
    # Pages known to hold math: the landing page, the notation page, chapter 1.
    assert {"book/intro.html", "book/notation.html", "notebooks/01-nonlinearity.html"} <= set(with_math)
    unrendered = {p: f"{r.math_elements - r.math_rendered} of {r.math_elements}"
                  for p, r in with_math.items() if r.math_rendered != r.math_elements}
    assert not unrendered, f"math left untypeset by MathJax: {unrendered}"
    errors = {p: r.math_errors for p, r in crawl.pages.items() if r.math_errors}
    assert not errors, f"MathJax errors (merror nodes): {errors}"


def test_displayed_equations_are_numbered(crawl: Crawl) -> None:
    unnumbered = {p: r.unnumbered_displays for p, r in crawl.pages.items() if r.unnumbered_displays}
    assert not unnumbered, f"displayed equations without a number: {unnumbered}"


def test_every_image_loads(crawl: Crawl) -> None:
    broken = {p: r.broken_images for p, r in crawl.pages.items() if r.broken_images}
    assert not broken, f"images that did not load: {broken}"
    assert crawl.pages["notebooks/01-nonlinearity.html"].images >= 1


def test_figures_are_readable_in_dark_mode(crawl: Crawl) -> None:
    assert crawl.dark_figures, "chapter 1 shows no figure"
    for figure in crawl.dark_figures:
        assert figure["theme"] == "dark"
        # The theme puts a light, opaque background behind every output image in dark mode.
        assert figure["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), figure


def test_internal_links_resolve(crawl: Crawl) -> None:
    links = {link for r in crawl.pages.values() for link in r.links if _is_local(link, crawl.base)}
    assert links
    status: dict[str, int] = {}
    broken = []
    for link in sorted(links):
        url, fragment = urldefrag(link)
        if url not in status:
            try:
                with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10) as response:
                    status[url] = response.status
            except urllib.error.HTTPError as error:
                status[url] = error.code
        if status[url] != 200:
            broken.append(f"{link}: HTTP {status[url]}")
            continue
        path = unquote(urlsplit(url).path).lstrip("/")
        path = path + "index.html" if path.endswith("/") or not path else path
        if fragment and path in crawl.pages and unquote(fragment) not in crawl.pages[path].ids:
            broken.append(f"{link}: no id {unquote(fragment)!r} on {path}")
    assert not broken, "broken internal links:\n" + "\n".join(broken)


def repository() -> tuple[str, str]:
    """``repository.url`` and ``repository.branch`` of ``_config.yml`` (the url may be empty)."""
    config = (yaml.safe_load((ROOT / "_config.yml").read_text()) or {}).get("repository") or {}
    return (config.get("url") or "").strip().rstrip("/"), config.get("branch") or "main"


def test_download_buttons_and_repository_buttons_only_with_an_address(crawl: Crawl) -> None:
    url, branch = repository()
    problems = []
    for path, report in crawl.pages.items():
        if not (path.startswith("notebooks/") or path.startswith("book/")):
            continue
        stem = path.removesuffix(".html")
        suffix = ".ipynb" if path.startswith("notebooks/") else ".md"
        # The source button of a markdown page adds ?plain=1 (show the text, not GitHub's rendering).
        links = {link.removesuffix("?plain=1") for link in report.links}
        wanted = {"download": f"{crawl.base}_sources/{stem}{suffix}"}
        if url:
            wanted |= {"source": f"{url}/blob/{branch}/{stem}{suffix}", "edit": f"{url}/edit/{branch}/{stem}{suffix}"}
        else:   # no address: no button may point at a guessed repository
            problems += [f"{path}: a repository link without repository.url: {link}" for link in links
                         if re.match(r"https://(github\.com|gitlab\.com)/", link)]
        problems += [f"{path}: no {name} button ({want})" for name, want in wanted.items() if want not in links]
        problems += [f"{path}: a launch button ({link})" for link in links
                     if "mybinder.org" in link or "colab.research.google.com" in link]
    assert not problems, "\n".join(problems)


def test_search_finds_a_word(crawl: Crawl) -> None:
    assert crawl.search_results > 0, f"searching for {SEARCH_WORD!r} found nothing"



# ------------------------------------------------------------------------------------------
# Layout at desktop and phone width
# ------------------------------------------------------------------------------------------

LAYOUT_FACTS = """async () => {
  const images = Array.from(document.querySelectorAll(".bd-article img"));
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map((img) => img.decode().catch(() => null)));
  if (document.querySelector(".math") && window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  // book.js marks the page once it has fitted the displayed equations to their columns.
  await new Promise((done) => { const t0 = Date.now(); (function wait() {
    if (document.documentElement.dataset.mathFitted || Date.now() - t0 > 5000) done(); else setTimeout(wait, 50);
  })(); });
  const shown = (e) => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; };
  const label = (e) => e.getAttribute("src") || e.id || (e.textContent || "").trim().slice(0, 60);
  const distorted = images.filter((i) => i.naturalWidth > 0 && shown(i)).map((i) => {
    const r = i.getBoundingClientRect();
    return {what: label(i), ratio: (r.width / r.height) / (i.naturalWidth / i.naturalHeight)};
  }).filter((d) => Math.abs(d.ratio - 1) > %(tolerance)s);
  const doc = document.documentElement;
  // What sticks out of the page, when it scrolls sideways: elements not inside a scroll box.
  const culprits = [];
  if (doc.scrollWidth > doc.clientWidth) {
    for (const e of document.querySelectorAll(".bd-article *")) {
      if (e.getBoundingClientRect().right <= doc.clientWidth + 1 || !shown(e)) continue;
      let p = e.parentElement, boxed = false;
      while (p && p !== document.body) { if (getComputedStyle(p).overflowX !== "visible") { boxed = true; break; }
        p = p.parentElement; }
      if (!boxed) culprits.push(e.tagName.toLowerCase() + "." + String(e.className).split(" ")[0]);
    }
  }
  // Displayed equations of the prose (sympy's outputs in cells scroll in their cell).
  const displays = Array.from(document.querySelectorAll("div.math")).filter((m) => shown(m) && !m.closest(".cell_output"));
  const too_wide = [], unscrollable = [];
  for (const m of displays) {
    const box = m.querySelector("mjx-container"), math = m.querySelector("mjx-container > mjx-math");
    if (!box || !math) continue;
    if (math.getBoundingClientRect().width > box.clientWidth + 1) {
      too_wide.push(label(m));
      if (!["auto", "scroll"].includes(getComputedStyle(box).overflowX)) unscrollable.push(label(m));
    }
  }
  const search_boxes = Array.from(document.querySelectorAll(".search-button-field, #searchbox, form.bd-search"))
    .filter(shown).length;
  // Claim sections: the verdict box before the first code cell that shows its code.
  const code_shown = (cell) => Array.from(cell.querySelectorAll(".cell_input")).some((i) => shown(i) && !i.closest("details:not([open])"));
  const claims = Array.from(document.querySelectorAll(".bd-article span[id^='claim-']")).map((anchor) => {
    const section = anchor.closest("section") || anchor.parentElement;
    const verdict = section.querySelector(".verdict-box");
    const code = Array.from(section.querySelectorAll(".cell")).find(code_shown);
    const first = !!verdict && (!code || !!(verdict.compareDocumentPosition(code) & Node.DOCUMENT_POSITION_FOLLOWING));
    return {id: anchor.id, verdict: !!verdict, verdict_first: first};
  });
  const article = document.querySelector(".bd-article");
  const code_height = Array.from(document.querySelectorAll(".bd-article .cell_input"))
    .filter((i) => shown(i) && !i.closest("details:not([open])"))
    .reduce((sum, i) => sum + i.getBoundingClientRect().height, 0);
  return {distorted, page_scroll: doc.scrollWidth > doc.clientWidth, scroll_width: doc.scrollWidth,
          client_width: doc.clientWidth, culprits: Array.from(new Set(culprits)).slice(0, 8),
          equations: displays.length, too_wide, unscrollable, search_boxes, claims,
          code_share: article ? code_height / article.getBoundingClientRect().height : 0, figures: images.length};
}""" % {"tolerance": ASPECT_TOLERANCE}


def layout_pages(site: Path) -> list[str]:
    """The reading pages: the book's prose pages and the chapters."""
    return [p for p in html_pages(site) if p.startswith(("book/", "notebooks/"))]


async def _layout_crawl(playwright_api, server: str, pages: list[str]) -> dict[tuple[int, str], dict]:
    facts: dict[tuple[int, str], dict] = {}
    args = [*CHROMIUM_ARGS, f"--proxy-server={server.rstrip('/')}"]
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=args, headless=True)
        for width in WIDTHS:
            context = await browser.new_context(viewport={"width": width, "height": 900}, color_scheme="light")
            page = await context.new_page()
            for path in pages:
                await page.goto(server + path, wait_until="load")
                facts[(width, path)] = await page.evaluate(LAYOUT_FACTS)
                if path == "notebooks/01-nonlinearity.html":
                    await page.screenshot(path=str(ARTEFACTS / f"chapter-{width}.png"))
            await context.close()
        await browser.close()
    return facts


@pytest.fixture(scope="module")
def layout(site: Path, server: str) -> dict[tuple[int, str], dict]:
    playwright_api = pytest.importorskip("playwright.async_api",
                                         reason="the Python package playwright is not installed")
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(_layout_crawl(playwright_api, server, layout_pages(site)))
    (ARTEFACTS / "layout.json").write_text(json.dumps({f"{w} {p}": f for (w, p), f in result.items()}, indent=1) + "\n")
    return result


def test_no_figure_is_distorted(layout) -> None:
    distorted = [f"{width} px {path}: {d['what']} at {d['ratio']:.2f}× its aspect ratio"
                 for (width, path), facts in layout.items() for d in facts["distorted"]]
    assert sum(f["figures"] for f in layout.values()) > 0, "no figure on any page"
    assert not distorted, "figures displayed with another aspect ratio than their own:\n" + "\n".join(distorted)


def test_no_page_scrolls_sideways_on_a_phone(layout) -> None:
    sideways = [f"{path}: {facts['scroll_width']} px wide in a {facts['client_width']} px window "
                f"(sticking out: {', '.join(facts['culprits']) or '?'})"
                for (width, path), facts in layout.items() if width == min(WIDTHS) and facts["page_scroll"]]
    assert not sideways, "pages that scroll sideways at 400 px:\n" + "\n".join(sideways)


def test_displayed_equations_fit_the_column_on_desktop(layout) -> None:
    assert any(f["equations"] for f in layout.values()), "no displayed equation on any page"
    wide = [f"{path}: {', '.join(facts['too_wide'])}" for (width, path), facts in layout.items()
            if width == max(WIDTHS) and facts["too_wide"]]
    assert not wide, "displayed equations wider than the column at 1400 px:\n" + "\n".join(wide)


def test_a_wide_equation_scrolls_inside_itself_on_a_phone(layout) -> None:
    stuck = [f"{width} px {path}: {', '.join(facts['unscrollable'])}" for (width, path), facts in layout.items()
             if facts["unscrollable"]]
    assert not stuck, "equations wider than the column that cannot scroll:\n" + "\n".join(stuck)


def test_one_search_box_on_desktop(layout) -> None:
    counts = {path: facts["search_boxes"] for (width, path), facts in layout.items() if width == max(WIDTHS)}
    assert all(n == 1 for n in counts.values()), f"search boxes per page at 1400 px: {counts}"


def test_verdict_before_the_first_code_of_every_claim_section(layout) -> None:
    sections = [(path, c) for (width, path), facts in layout.items() if width == max(WIDTHS) for c in facts["claims"]]
    assert sections, "no claim section (an anchor (claim-<id>)=) on any page"
    late = [f"{path}: {c['id']} ({'verdict after code' if c['verdict'] else 'no verdict box'})"
            for path, c in sections if not c["verdict_first"]]
    assert not late, f"{len(late)} of {len(sections)} claim sections:\n" + "\n".join(late)


def test_visible_code_is_at_most_a_quarter_of_each_chapter(layout) -> None:
    shares = {f"{path} at {width} px": facts["code_share"] for (width, path), facts in layout.items()
              if path.startswith("notebooks/")}              # at every width: figures shrink on a phone
    assert shares, "no chapter"
    over = {path: f"{share:.0%}" for path, share in shares.items() if share > MAX_CODE_SHARE}
    assert not over, f"chapters whose visible code is more than {MAX_CODE_SHARE:.0%} of their height: {over}"
