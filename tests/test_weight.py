"""What a phone reader downloads and sees, measured in Chromium (issue 36 items 5 and 6).

The site (``$ATTENTION_CLAIMS_SITE`` or this run's private build, tests/site_build.py) is served
from 127.0.0.1 with text files gzip-compressed, as GitHub Pages serves them, and every page of it
(the redirect ``index.html`` aside) is opened in headless Chromium at 360 px, the narrowest phone
the book is written for:

* **Weight.** Each page is opened with the browser's cache disabled (a first visit) and every
  request it makes until the network is idle is counted (Chromium's DevTools protocol):
  the decoded bytes (what the phone stores and parses: HTML, CSS, scripts, MathJax and its
  fonts, the figures on and near the first screen) are at most 1.5 MB per page. Figures further
  down load as the reader scrolls to them (``loading="lazy"``, book/_ext/book_site.py); the
  weight with every figure loaded is recorded too (``decoded_all_figures``), not bounded here.
* **MathJax transferred once.** A second pass opens every page in one browser with its cache on,
  as a reader who goes from page to page: MathJax's bundle crosses the network once (the bytes on
  the wire of all its requests together are less than twice its compressed size), under one URL.
* **Evidence on screen.** With every fold open, each cell of the evidence tables' Measured, Held to
  and Fails if columns lies inside the 360 px screen (the tables are stacked into one card per
  check below 600 px) and shows its column's name.
* **Figure text.** Every figure is drawn with text of at least ``plotting.MIN_TEXT_PT`` figure
  points (attnref.book.plotting.show raises smaller text to it); at the width the page shows the
  figure at 360 px, that text is at least ``plotting.MIN_DISPLAYED_PT`` (9) CSS points.
* **Displayed formulas.** On a phone an equation's number gives a display that would not fit
  beside it the whole column (it moves above the display, book.js class ``eqno-apart``).

The measurements are written to ``_build/browser/weight.json`` (per page: decoded and transferred
bytes, the largest files, the displays that scroll, the figures' shown text size).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import site_build                              # tests/site_build.py
from attnref.book import plotting

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-quic"]
ARTEFACTS = ROOT / "_build" / "browser"
PHONE = 360                   # CSS px: the narrowest phone the book is written for
MAX_DECODED = 1_500_000       # bytes per page on a first visit, every request counted
MATHJAX = "tex-chtml-book.js"  # book/_ext/offline_mathjax.py
EVIDENCE_COLUMNS = ("Measured", "Held to", "Fails if")
REFRESH = re.compile(r"<meta[^>]+http-equiv=[\"']?refresh", re.IGNORECASE)
LOAD_TIMEOUT_MS = 300_000     # the shared machine can be very slow (a chapter took 70-180 s under load 12)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="no Chromium at /usr/bin/chromium: install the Debian package `chromium` (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return site_build.built_site(tmp_path_factory)


class _PagesHandler(site_build._QuietHandler):
    """The test server's handler, with GitHub Pages' caching header (``Cache-Control:
    max-age=600``): without one the browser keeps no copy of a gzip-compressed response (the
    server sends no validator) and every page would download MathJax again."""

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()


@pytest.fixture(scope="module")
def server(site: Path):
    with site_build.serve(site, handler=_PagesHandler) as (url, _):
        yield url


def pages(site: Path) -> list[str]:
    """Every HTML page of the site but a redirect (``index.html`` sends the reader to the intro)."""
    skip = {"_static", "_sources", "_images"}
    found = []
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site)
        if skip & set(rel.parts) or REFRESH.search(path.read_text(encoding="utf-8", errors="replace")):
            continue
        found.append(rel.as_posix())
    return found


#: Waits for the page to be typeset and fitted, then reads the phone layout's facts.
PAGE_FACTS = """async () => {
  if (document.querySelector(".math") && window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  await new Promise((done) => { const t0 = Date.now(); (function wait() {
    if (document.documentElement.dataset.mathFitted || Date.now() - t0 > 20000) done(); else setTimeout(wait, 50);
  })(); });
  const shown = (e) => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; };
  // Displayed formulas of the prose: which need a swipe; where a number sits beside a display
  // that does not fit, the display's share of the column.
  const displays = Array.from(document.querySelectorAll("div.math")).filter((m) => shown(m) && !m.closest(".cell_output"));
  let scrolling = 0; const cramped = [];
  for (const m of displays) {
    const box = m.querySelector("mjx-container"), math = m.querySelector("mjx-container > mjx-math");
    if (!box || !math) continue;
    const wide = math.getBoundingClientRect().width > box.clientWidth + 1;
    if (wide) scrolling += 1;
    const number = m.querySelector(".eqno");
    if (wide && number && shown(number) && box.getBoundingClientRect().width < m.clientWidth - 2) {
      cramped.push((m.id || m.textContent.trim().slice(0, 50)) + `: ${Math.round(box.getBoundingClientRect().width)} of ${m.clientWidth} px`);
    }
  }
  return {displays: displays.length, scrolling, cramped,
          page_width: document.documentElement.clientWidth, page_scroll_width: document.documentElement.scrollWidth};
}"""

#: Loads every figure (they load lazily, as the reader scrolls to them) and reads the width the page
#: shows each at and the width it was drawn for (its style width, 100 px per figure inch:
#: attnref.book.plotting).
FIGURE_FACTS = """async () => {
  const images = Array.from(document.querySelectorAll(".bd-article img"));
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map((img) => img.decode().catch(() => null)));
  const shown = (e) => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; };
  return images.filter((img) => img.closest(".cell_output") && shown(img)).map((img) => ({
    src: img.getAttribute("src"), shown_px: img.getBoundingClientRect().width,
    drawn_px: parseFloat(img.style.width) || img.naturalWidth / 2}));
}"""

#: Opens every fold and reads where each evidence cell of the named columns lies.
EVIDENCE_FACTS = """(columns) => {
  document.querySelectorAll("details").forEach((d) => { d.open = true; });
  const width = document.documentElement.clientWidth;
  const cells = [], off = [], unlabelled = [];
  for (const table of document.querySelectorAll(".evidence-table table")) {
    const names = Array.from(table.querySelectorAll("thead th")).map((th) => th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      Array.from(row.children).forEach((cell, i) => {
        if (!columns.includes(names[i]) || !cell.textContent.trim()) return;
        const r = cell.getBoundingClientRect();
        const what = `${names[i]}: ${cell.textContent.trim().slice(0, 40)}`;
        cells.push(what);
        let clipped = false;   // cut off by a box that scrolls or hides what overflows it
        for (let p = cell.parentElement; p && p !== document.body; p = p.parentElement) {
          if (getComputedStyle(p).overflowX === "visible") continue;
          const b = p.getBoundingClientRect();
          if (r.right > b.right + 1 || r.left < b.left - 1) clipped = true;
        }
        if (r.width <= 0 || r.left < -1 || r.right > width + 1 || clipped) off.push(what);
        const label = getComputedStyle(cell, "::before").content;
        if (!label || !label.includes(names[i])) unlabelled.push(what);
      });
    }
  }
  return {cells: cells.length, off, unlabelled};
}"""


def _cdp_counter(cdp, requests: dict) -> None:
    cdp.on("Network.requestWillBeSent",
           lambda e: e["request"]["url"].startswith(("http:", "https:"))
           and requests.setdefault(e["requestId"], {"url": e["request"]["url"]}))
    cdp.on("Network.responseReceived",
           lambda e: requests.get(e["requestId"], {}).update(status=e["response"]["status"]))
    cdp.on("Network.dataReceived",
           lambda e: requests.get(e["requestId"], {}).update(
               decoded=requests.get(e["requestId"], {}).get("decoded", 0) + e["dataLength"]))
    cdp.on("Network.loadingFinished",
           lambda e: requests.get(e["requestId"], {}).update(wire=e["encodedDataLength"]))
    cdp.on("Network.loadingFailed",
           lambda e: requests.get(e["requestId"], {}).update(failed=e.get("errorText", "?")))


async def _settle(page, requests: dict) -> None:
    await page.wait_for_load_state("networkidle", timeout=LOAD_TIMEOUT_MS)
    for _ in range(50):   # the last responses' events
        if all("wire" in r or "failed" in r for r in requests.values()):
            return
        await asyncio.sleep(0.1)


async def _phone_crawl(playwright_api, server: str, paths: list[str]) -> dict:
    facts: dict = {"pages": {}, "mathjax": []}
    args = [*CHROMIUM_ARGS, f"--proxy-server={server.rstrip('/')}"]
    async with playwright_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=args, headless=True)
        # 1. First visits: an empty cache for every page.
        context = await browser.new_context(viewport={"width": PHONE, "height": 800})
        page = await context.new_page()
        cdp = await context.new_cdp_session(page)
        requests: dict = {}
        await cdp.send("Network.enable")
        await cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        _cdp_counter(cdp, requests)
        for path in paths:
            requests.clear()
            await page.goto(server + path, wait_until="load", timeout=LOAD_TIMEOUT_MS)
            found = await page.evaluate(PAGE_FACTS)
            await _settle(page, requests)
            done = [r for r in requests.values() if "wire" in r]
            found["weight"] = {
                "decoded": sum(r.get("decoded", 0) for r in done), "wire": sum(r["wire"] for r in done),
                "requests": len(done),
                "failed": [f"{r['failed']} {r['url']}" for r in requests.values() if "failed" in r],
                "unfinished": [r["url"] for r in requests.values() if "wire" not in r and "failed" not in r],
                "largest": sorted(((r.get("decoded", 0), urlsplit(r["url"]).path) for r in done), reverse=True)[:8]}
            # The whole page: every figure loaded, as by a reader who scrolls to the end.
            found["figures"] = await page.evaluate(FIGURE_FACTS)
            await _settle(page, requests)
            found["weight"]["decoded_all_figures"] = sum(r.get("decoded", 0) for r in requests.values() if "wire" in r)
            found["evidence"] = await page.evaluate(EVIDENCE_FACTS, list(EVIDENCE_COLUMNS))
            facts["pages"][path] = found
        await context.close()
        # 2. A reader going from page to page: one browser, its cache on.
        context = await browser.new_context(viewport={"width": PHONE, "height": 800})
        page = await context.new_page()
        cdp = await context.new_cdp_session(page)
        requests = {}
        await cdp.send("Network.enable")
        _cdp_counter(cdp, requests)
        for path in paths:
            requests.clear()
            await page.goto(server + path, wait_until="load", timeout=LOAD_TIMEOUT_MS)
            await _settle(page, requests)
            facts["mathjax"] += [{"page": path, "url": urlsplit(r["url"])._replace(scheme="", netloc="").geturl(),
                                  "wire": r.get("wire", 0), "status": r.get("status")}
                                 for r in requests.values() if "/mathjax/" in r["url"] and r["url"].split("?")[0].endswith(".js")]
        await context.close()
        await browser.close()
    return facts


@pytest.fixture(scope="module")
def phone(site: Path, server: str) -> dict:
    playwright_api = pytest.importorskip("playwright.async_api",
                                         reason="the Python package playwright is not installed")
    facts = asyncio.run(_phone_crawl(playwright_api, server, pages(site)))
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    (ARTEFACTS / "weight.json").write_text(json.dumps(facts, indent=1) + "\n")
    return facts


def test_every_page_weighs_at_most_1_5_mb_decoded_on_a_first_visit(site: Path, phone: dict) -> None:
    """Fails if a page's first visit decodes more than 1.5 MB: MathJax's full ``tex-chtml.js``
    (1.16 MB) or its es5 components (0.75 MB) instead of the book's bundle (0.45 MB), the themes'
    stylesheets unpurged (pydata-sphinx-theme.css 0.40 MB instead of 0.12), folded code
    highlighted again (chapter 4's HTML 0.36 -> 0.75 MB), Font Awesome's 1.5 MB SVG script back."""
    weights = {path: facts["weight"] for path, facts in phone["pages"].items()}
    assert len(weights) >= 15, sorted(weights)
    # The weighing sees what a page needs: at least its own HTML and, where it has math, MathJax.
    bundle = (site / "_static" / "mathjax" / MATHJAX).stat().st_size
    for path, w in weights.items():
        html = (site / path).stat().st_size
        assert w["decoded"] >= html + bundle, (path, w["decoded"], html, bundle)
    failed = {p: w["failed"] for p, w in weights.items() if w["failed"]}
    assert not failed, f"requests that failed: {failed}"
    unfinished = {p: w["unfinished"] for p, w in weights.items() if w["unfinished"]}
    assert not unfinished, f"requests still running when the page was weighed: {unfinished}"
    heavy = {p: f"{w['decoded'] / 1e6:.2f} MB decoded in {w['requests']} requests; largest: "
                + ", ".join(f"{name} {size / 1e3:.0f} kB" for size, name in w["largest"][:5])
             for p, w in weights.items() if w["decoded"] > MAX_DECODED}
    assert not heavy, f"pages over {MAX_DECODED / 1e6} MB decoded on a first visit:\n" + "\n".join(
        f"{p}: {text}" for p, text in heavy.items())


def test_mathjax_is_transferred_once_under_one_url(site: Path, phone: dict) -> None:
    """Fails if a page asks for MathJax under another URL (``tex-chtml-book.js`` without its
    ``?v=``, as pages written before the file was copied did): the browser's cache keeps one copy
    per URL, so the second URL downloads it again; or if a page loads MathJax twice."""
    loads = phone["mathjax"]
    paths = [load for load in loads if load["url"].split("?")[0].endswith("/" + MATHJAX)]
    assert {load["page"] for load in paths} == set(phone["pages"]), "pages that did not load MathJax"
    per_page = {}
    for load in paths:
        per_page[load["page"]] = per_page.get(load["page"], 0) + 1
    assert all(n == 1 for n in per_page.values()), {p: n for p, n in per_page.items() if n != 1}
    urls = {load["url"] for load in paths}
    assert len(urls) == 1, f"MathJax under {len(urls)} URLs: {sorted(urls)}"
    others = sorted({load["url"] for load in loads} - urls)
    assert not [u for u in others if re.search(r"/mathjax/[^/]+\.js", u)], f"other MathJax components: {others}"
    # Bytes on the wire: one compressed copy (plus the headers of the other pages' cache checks).
    import gzip
    compressed = len(gzip.compress((site / "_static" / "mathjax" / MATHJAX).read_bytes(), compresslevel=6))
    wire = sum(load["wire"] for load in paths)
    assert compressed <= wire < 2 * compressed, (
        f"MathJax crossed the network with {wire} bytes over {len(paths)} pages; one copy is {compressed}")


def test_evidence_columns_are_on_screen_at_360_px(phone: dict) -> None:
    """Fails if an evidence table keeps its six columns on a phone (its Measured, Held to and
    Fails if cells then lie right of the screen, in a box that scrolls: claims.css's stacked
    rows for ``.evidence-table`` below 600 px removed) or loses its column names (book.js's
    data-label, claims.css's ``::before``)."""
    evidence = {path: facts["evidence"] for path, facts in phone["pages"].items()}
    assert sum(e["cells"] for e in evidence.values()) > 100, "too few evidence cells seen"
    off = {p: e["off"][:5] for p, e in evidence.items() if e["off"]}
    assert not off, f"evidence cells off-screen at {PHONE} px: {off}"
    unlabelled = {p: e["unlabelled"][:5] for p, e in evidence.items() if e["unlabelled"]}
    assert not unlabelled, f"evidence cells without their column's name at {PHONE} px: {unlabelled}"


def test_figure_text_is_at_least_9_pt_at_360_px(phone: dict) -> None:
    """Fails if the page shows a figure narrower than its text allows at 360 px: wider side
    padding of the article on a phone, a figure drawn wider than plotting.DISPLAY_WIDTH (its text
    then shrinks more), or a smaller MIN_TEXT_PT."""
    figures = [(path, f) for path, facts in phone["pages"].items() for f in facts["figures"]]
    assert len(figures) >= 30, len(figures)
    small = []
    for path, f in figures:
        shown = plotting.displayed_points(plotting.MIN_TEXT_PT, f["shown_px"], f["drawn_px"] / 100)
        f["text_pt"] = shown
        if not shown >= plotting.MIN_DISPLAYED_PT:
            small.append(f"{path} {f['src']}: {f['shown_px']:.0f} of {f['drawn_px']:.0f} px, text {shown:.2f} pt")
    assert not small, f"figure text below {plotting.MIN_DISPLAYED_PT} pt at {PHONE} px:\n" + "\n".join(small)


def test_an_equation_number_leaves_a_wide_display_the_column(phone: dict) -> None:
    """Fails if, on a phone, a display that does not fit still shares its row with its number
    (book.js's ``eqno-apart`` or book.css's rule for it removed): the number took 40-60 px of a
    300 px column from formulas that then scrolled."""
    assert sum(f["displays"] for f in phone["pages"].values()) > 50
    cramped = {p: f["cramped"][:4] for p, f in phone["pages"].items() if f["cramped"]}
    assert not cramped, f"wide displays beside their number at {PHONE} px: {cramped}"
    sideways = {p: f"{f['page_scroll_width']} px" for p, f in phone["pages"].items()
                if f["page_scroll_width"] > f["page_width"]}
    assert not sideways, f"pages that scroll sideways at {PHONE} px: {sideways}"


#: Prose displays allowed to scroll sideways at 360 px: page -> {equation label: why it cannot be
#: broken into lines}. Empty: every display of the prose is broken into lines that fit.
SCROLLING_DISPLAYS_ALLOWED: dict[str, dict[str, str]] = {}


def test_no_displayed_formula_of_the_prose_scrolls_sideways_at_360_px(phone: dict) -> None:
    """Fails if a displayed formula of the prose (``div.math`` outside cell outputs) is wider
    than its column at 360 px even after book.js has fitted it (its number moved above it, the
    display shrunk to at most ``MIN_SCALE_PHONE``, 68 %): a display written on one line, as 31 of
    87 were before issue 36 item 5 (392-850 px wide in 229-328 px columns), an ``aligned`` block
    joined back into one line, or book.js's shrinking of displays on a phone removed."""
    facts = phone["pages"]
    # The measurement saw the book's formulas typeset: every page loaded MathJax, and the
    # chapters' displays were found (an untypeset display has no box and would count as fitting).
    assert sum(f["displays"] for f in facts.values()) > 80, {p: f["displays"] for p, f in facts.items()}
    loaded = {load["page"] for load in phone["mathjax"]}
    assert loaded == set(facts), f"pages without MathJax: {sorted(set(facts) - loaded)}"
    unknown = set(SCROLLING_DISPLAYS_ALLOWED) - set(facts)
    assert not unknown, f"the allow-list names pages the site does not have: {sorted(unknown)}"
    scrolling = {path: f"{f['scrolling']} of {f['displays']} displays scroll"
                 for path, f in facts.items()
                 if f["scrolling"] > len(SCROLLING_DISPLAYS_ALLOWED.get(path, {}))}
    assert not scrolling, (
        f"displayed formulas of the prose that scroll sideways at {PHONE} px (break them into "
        f"aligned lines, or allow-list them with the reason): {scrolling}")
