"""The generated claims pages in headless Chromium, at 1400 px (desktop) and 400 px (phone).

Measured, not looked up: the claims index's table fits the content column at 1400 px (its right
edge inside the article, every model column on screen) and turns into stacked cards at 400 px
(nothing wider than the viewport, so no sideways scroll); every chapter page shows its verdict
table right after its title; the evidence tables of the verdict boxes are folded (closed
``<details>`` whose summary reads "n/n checks ✓", the ✓ column first) and print unfolded; the
short-answers page has one card per source question; the figures a reader can move show the
chapter's values as their controls move, and their text is readable on a phone (every SVG and HTML
text at least ``plotting.MIN_DISPLAYED_PT`` at 360 and 390 px, no two texts overlapping, none
outside the SVG, controls at least 24 px high). Screenshots of the three pages at both
widths go to ``_build/browser-claims/`` (or ``$ATTENTION_CLAIMS_SHOTS``).

The site is ``$ATTENTION_CLAIMS_SITE`` if set, else a private build (as in ``test_browser.py``,
which starts the browser and serves the site the same way: no request leaves 127.0.0.1).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import site_build                              # tests/site_build.py

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-quic"]
BOOK_FLAGS = ["-n", "-W", "--keep-going"]
DESKTOP, PHONE = 1400, 400
#: Every chapter page (a chapter added later is measured too: no list to keep up to date).
CHAPTERS = sorted(p.relative_to(ROOT).with_suffix("").as_posix() for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
#: Phone widths at which every table must fit its column (a common phone, a small one).
PHONES = (390, 360)

playwright_api = pytest.importorskip("playwright.async_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium")


def _ms(idle_seconds: float) -> int:
    """A Playwright time limit in milliseconds: the idle budget scaled by the machine's load."""
    import slowdown    # tools/testenv (on sys.path through tests/conftest.py)
    return round(slowdown.limit(idle_seconds) * 1000)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return site_build.built_site(tmp_path_factory)   # one build per test run (tests/site_build.py)


MEASURE = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main");
  const a = article.getBoundingClientRect();
  const table = document.querySelector("table.claims-compact");
  const t = table ? table.getBoundingClientRect() : null;
  const cells = table ? Array.from(table.querySelectorAll("tbody tr:nth-child(2) td")).map(
      td => { const r = td.getBoundingClientRect(); return {left: r.left, right: r.right, display: getComputedStyle(td).display}; }) : [];
  const rows = table ? Array.from(table.querySelectorAll("tbody tr")).map(tr => tr.getBoundingClientRect().height) : [];
  rows.sort((x, y) => x - y);
  return {
    viewport: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    article: {left: a.left, right: a.right, width: a.width},
    table: t && {left: t.left, right: t.right, width: t.width, height: t.height},
    cells, medianRow: rows.length ? rows[Math.floor(rows.length / 2)] : 0,
    folds: document.querySelectorAll("details.claim-fold").length,
    openFolds: document.querySelectorAll("details.claim-fold[open]").length,
  };
}"""

#: Every table of the page, every fold opened first: how far each reaches past its container (a
#: stacked table fits; a table that keeps its columns is as wide as they need).
TABLES_FIT = """() => {
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const article = document.querySelector("article.bd-article") || document.querySelector("main");
  const column = article.getBoundingClientRect();
  return Array.from(article.querySelectorAll("table")).map(t => {
    const box = t.parentElement.getBoundingClientRect(), r = t.getBoundingClientRect();
    const hidden = Array.from(t.querySelectorAll("td")).filter(td => {
      const c = td.getBoundingClientRect(); return c.width > 0 && c.right > column.right + 1; }).length;
    return {cls: (t.closest("[class*=table]") || t).className, width: r.width, box: box.width,
            over: Math.max(r.right - Math.min(box.right, column.right), 0), cellsOffScreen: hidden,
            labelled: Array.from(t.querySelectorAll("td[data-label]")).length};
  });
}"""

CHAPTER_FACTS = """() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main");
  const title = article.querySelector("h1");
  const tables = article.querySelectorAll(".chapter-verdicts table");
  let next = title ? title.nextElementSibling : null;
  while (next && !next.matches(".chapter-verdicts, .chapter-verdicts *") && next.tagName === "A") next = next.nextElementSibling;
  const folds = Array.from(article.querySelectorAll("details.evidence-fold"));
  const firstHeader = folds.length ? folds[0].querySelector("table th") : null;
  return {
    tables: tables.length,
    tableAfterTitle: !!(next && next.matches(".chapter-verdicts")),
    tableTop: tables.length ? tables[0].getBoundingClientRect().top + window.scrollY : null,
    folds: folds.length,
    closed: folds.filter(d => !d.open).length,
    summaries: folds.map(d => d.querySelector("summary").textContent.trim()),
    firstHeader: firstHeader ? firstHeader.textContent.trim() : null,
    answer: !!Array.from(article.querySelectorAll("h2")).find(h => h.textContent.includes("The answer to the thread")),
    scrollWidth: document.documentElement.scrollWidth, viewport: window.innerWidth,
    eqLabels: Array.from(article.querySelectorAll(".evidence-table td")).filter(td => /\\beq-[a-z0-9]/.test(td.textContent)).length,
  };
}"""


def _shots() -> Path:
    out = Path(os.environ.get("ATTENTION_CLAIMS_SHOTS") or ROOT / "_build" / "browser-claims")
    out.mkdir(parents=True, exist_ok=True)
    return out


async def _measure(site: Path) -> dict:
    facts: dict = {}
    shots = _shots()
    with site_build.serve(site) as (base, _):
        async with playwright_api.async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                       args=[*CHROMIUM_ARGS, f"--proxy-server={base.rstrip('/')}"])
            for width in (DESKTOP, PHONE):
                context = await browser.new_context(viewport={"width": width, "height": 900}, color_scheme="light")
                page = await context.new_page()
                page.set_default_timeout(_ms(30))   # load-scaled (tools/testenv/slowdown.py)
                await page.goto(base + "book/claims.html", wait_until="load")
                facts[("index", width)] = await page.evaluate(MEASURE)
                await page.screenshot(path=str(shots / f"claims-index-{width}.png"))
                await page.goto(base + "book/answers.html", wait_until="load")
                facts[("answers", width)] = await page.evaluate(
                    "() => ({cards: document.querySelectorAll('.answer-card').length,"
                    " badges: document.querySelectorAll('.answer-card .sd-badge').length,"
                    " scrollWidth: document.documentElement.scrollWidth, viewport: window.innerWidth})")
                await page.screenshot(path=str(shots / f"answers-{width}.png"))
                for chapter in CHAPTERS if width == DESKTOP else CHAPTERS[1:2]:   # the phone: one chapter
                    await page.goto(base + chapter + ".html", wait_until="load")
                    facts[(chapter, width)] = await page.evaluate(CHAPTER_FACTS)
                    if chapter == CHAPTERS[1]:
                        await page.screenshot(path=str(shots / f"chapter-02-top-{width}.png"))
                await context.close()
            for width in PHONES:        # every table fits its column: the landing page, a chapter's
                context = await browser.new_context(viewport={"width": width, "height": 800}, color_scheme="light")
                page = await context.new_page()
                page.set_default_timeout(_ms(30))   # load-scaled (tools/testenv/slowdown.py)
                for path in ("index.html", "notebooks/02-linear-layers.html", "notebooks/08-training.html"):
                    await page.goto(base + path, wait_until="load")
                    await page.wait_for_function("document.documentElement.dataset.mathFitted === 'yes'")
                    facts[("tables", path, width)] = await page.evaluate(TABLES_FIT)
                    if path == "index.html":
                        await page.screenshot(path=str(shots / f"landing-{width}.png"), full_page=True)
                await context.close()
            # print: the folds open (Chromium ≥ 131 prints ::details-content as styled for print)
            context = await browser.new_context(viewport={"width": DESKTOP, "height": 900})
            page = await context.new_page()
            page.set_default_timeout(_ms(30))   # load-scaled (tools/testenv/slowdown.py)
            await page.goto(base + CHAPTERS[1] + ".html", wait_until="load")
            await page.emulate_media(media="print")
            facts["print"] = await page.evaluate(
                "() => Array.from(document.querySelectorAll('details.evidence-fold')).map(d => {"
                " const t = d.querySelector('table'); return t ? t.getBoundingClientRect().height : 0; })")
            await context.close()
            await browser.close()
    return facts


@pytest.fixture(scope="module")
def facts(site: Path) -> dict:
    import asyncio
    return asyncio.run(_measure(site))


def test_claims_index_fits_the_column_at_1400(facts) -> None:
    f = facts[("index", DESKTOP)]
    assert f["table"], "no table.claims-compact on the claims index"
    assert f["table"]["right"] <= f["article"]["right"] + 1, f"table {f['table']} wider than the column {f['article']}"
    assert all(c["right"] <= f["article"]["right"] + 1 for c in f["cells"]), f["cells"]
    assert f["scrollWidth"] <= f["viewport"], "the page scrolls sideways at 1400 px"
    assert f["folds"] > 40 and f["openFolds"] == 0, "the deciding detail is not folded"
    assert f["medianRow"] < 160, f"median row {f['medianRow']:.0f} px tall"


def test_claims_index_becomes_cards_on_a_phone(facts) -> None:
    f = facts[("index", PHONE)]
    assert f["scrollWidth"] <= f["viewport"], f"sideways scroll at 400 px: {f['scrollWidth']} > {f['viewport']}"
    assert f["table"]["right"] <= f["viewport"], f["table"]
    assert {c["display"] for c in f["cells"]} <= {"block", "inline-block", "none"}, f["cells"]


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_short_answers_page(facts, width) -> None:
    f = facts[("answers", width)]
    assert f["cards"] == 5 and f["badges"] >= 5 * 3
    assert f["scrollWidth"] <= f["viewport"]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_opens_with_its_verdicts_and_folds_its_evidence(facts, chapter) -> None:
    f = facts[(chapter, DESKTOP)]
    assert f["tables"] == 1 and f["tableAfterTitle"], f
    assert f["folds"] >= 1 and f["closed"] == f["folds"] - sum("✗" in s for s in f["summaries"])
    assert all(re.fullmatch(r"\d+/\d+ checks ✓( · \d+ ✗)?", s) for s in f["summaries"]), f["summaries"]
    assert f["firstHeader"] == "Passed", f"the ✓ column is not first: {f['firstHeader']!r}"
    assert f["eqLabels"] == 0, "an evidence row shows an equation label instead of its number"
    if (chapter, PHONE) in facts:
        phone = facts[(chapter, PHONE)]
        assert phone["tables"] == 1 and phone["scrollWidth"] <= phone["viewport"], phone


def test_every_chapter_ends_with_the_answer_to_its_thread(facts) -> None:
    # the answer follows a chapter's last page (chapter 6 ends with 6c, chapter 10 with 10b), and only
    # that page: a chapter of several pages must not repeat it; chapter 9 (F1) goes beyond the seed
    # threads: it answers none
    by_chapter: dict[str, list[str]] = {}
    for c in CHAPTERS:
        by_chapter.setdefault(re.match(r"notebooks/(\d+)", c)[1], []).append(c)
    last = [pages[-1] for number, pages in sorted(by_chapter.items()) if number != "09"]
    earlier = [c for pages in by_chapter.values() for c in pages[:-1]]
    assert {"notebooks/06c-qk-norm-model", "notebooks/10b-basis-and-gates"} <= set(last), last
    assert all(facts[(c, DESKTOP)]["answer"] for c in last), [c for c in last if not facts[(c, DESKTOP)]["answer"]]
    assert not any(facts[(c, DESKTOP)]["answer"] for c in earlier), [c for c in earlier if facts[(c, DESKTOP)]["answer"]]


def test_folded_evidence_prints_unfolded(facts) -> None:
    heights = facts["print"]
    assert heights and min(heights) > 0, f"a folded evidence table prints empty: {heights}"


@pytest.mark.parametrize("width", PHONES)
@pytest.mark.parametrize("path", ["index.html", "notebooks/02-linear-layers.html", "notebooks/08-training.html"])
def test_every_table_fits_its_column_on_a_phone(facts, path, width) -> None:
    """The landing page's verdict table (520 px in a 358 px box at 390 px, a badge cut off), the
    evidence tables (Measured / Held to / Fails if off-screen) and the stored-result tables of
    chapter 8 become one card per row on a phone: no table reaches past its container, no cell
    past the column; the evidence cards name each value's column (data-label)."""
    tables = facts[("tables", path, width)]
    assert tables, f"{path}: no table measured"
    wide = [t for t in tables if t["over"] > 1 or t["cellsOffScreen"]]
    assert not wide, f"{path} at {width} px: {len(wide)} of {len(tables)} tables reach past their column: {wide[:3]}"
    evidence = [t for t in tables if "evidence-table" in t["cls"]]
    assert all(t["labelled"] for t in evidence), "an evidence table's cells carry no column names"


# ------------------------------------------------------------------------------------------
# Figures a reader can move (book/_ext/static/interactive.js, after the verdict boxes; D1 after its figure)
# ------------------------------------------------------------------------------------------

#: Each interactive figure: its page and three settings of its controls.
MOVABLE = {
    "C5": ("notebooks/04-cosine-vs-dot.html", [{"beta": 1, "n": 64}, {"beta": 3, "n": 1000}, {"beta": 0.5, "n": 2}]),
    "C2": ("notebooks/04-cosine-vs-dot.html", [{"r": 1}, {"r": 5}, {"r": 20}]),
    "C3": ("notebooks/04-cosine-vs-dot.html", [{"dk": 1}, {"dk": 64}, {"dk": 512}]),
    "L4": ("notebooks/02-linear-layers.html", [{"d": 2}, {"d": 100}, {"d": 4096}]),
    "H4": ("notebooks/05-multi-head.html", [{"n": 1, "m": 4096, "d": 256, "dk": 32},
                                            {"n": 512, "m": 512, "d": 512, "dk": 64},
                                            {"n": 100, "m": 2000, "d": 1024, "dk": 512}]),
    # D1 draws the notebook's stored draws: every control is set at each setting (the regimes are
    # checkboxes: 1 ticked, 0 not)
    "D1": ("notebooks/07-depth.html", [{"l": 24, "q": 50, "span": 96, "none": 1, "plain": 1, "kept": 1},
                                       {"l": 96, "q": 10, "span": 96, "none": 0, "plain": 1, "kept": 1},
                                       {"l": 6, "q": 90, "span": 12, "none": 1, "plain": 0, "kept": 1}]),
}

MOVE = """([figure, setting]) => {
  const box = document.querySelector(`.interactive-figure[data-figure="${figure}"]`);
  if (!box) return null;
  const curves = () => Array.from(box.querySelectorAll("path.curve")).map(p => p.getAttribute("d")).join("|");
  const before = curves();
  for (const [name, value] of Object.entries(setting)) {
    const input = box.querySelector(`input[name="${name}"]`);
    if (input.type === "checkbox") input.checked = Boolean(value);
    else input.value = input.step === "any" ? Math.log10(value) : value;
    input.dispatchEvent(new Event("input"));
  }
  const marker = box.querySelector("circle.marker");
  return {hidden: box.hidden, value: Number(box.dataset.value), text: box.querySelector(".interactive-value").textContent,
          before, after: curves(), marker: marker && [marker.getAttribute("cx"), marker.getAttribute("cy")],
          width: box.getBoundingClientRect().width, curves: box.querySelectorAll("path.curve").length,
          values: box.dataset.values ? JSON.parse(box.dataset.values) : null};
}"""


#: D1's regime checkboxes and the regime each ticks (the notebook's names).
D1_REGIMES = {"none": "no skips", "plain": "plain skips", "kept": "kept apart"}


def d1_stored() -> dict:
    """D1's numbers as notebook 07 stores them after its static figure, read here from the
    committed notebook's JSON (not through the page's script, nor attnref's reader)."""
    import json
    cells = json.loads((ROOT / "notebooks" / "07-depth.ipynb").read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        for output in cell.get("outputs", []):
            html = "".join(output.get("data", {}).get("text/html", ""))
            found = re.search(r'data-figure="D1" hidden><script type="application/json">(.*?)</script>', html, re.S)
            if found:
                return json.loads(found.group(1).replace("<\\/", "</"))
    raise AssertionError("notebook 07 stores no data for D1 (make execute NOTEBOOKS=notebooks/07-depth.ipynb)")


def d1_expected(s: dict) -> dict:
    """Per variant of the ticked regimes that was run to depth l: its stored log10 r_l of the draw
    at percentile q."""
    data = d1_stored()
    row = data["percentiles"].index(s["q"])
    ticked = {regime for box, regime in D1_REGIMES.items() if s[box]}
    return {v["name"]: v["log10_r"][row][s["l"]] for v in data["series"]
            if v["regime"] in ticked and s["l"] < len(v["log10_r"][row])}


def expected_value(figure: str, s: dict) -> float:
    """What the chapter's formula gives, computed here with numpy and attnref (not the page's JS);
    for D1 the notebook's stored value of the plain-skip stack (else the first variant shown)."""
    import numpy as np
    from attnref import counts
    if figure == "D1":
        shown = d1_expected(s)
        return shown.get("attention + skip", next(iter(shown.values())))
    if figure == "C5":        # cosine scores times beta: the largest weight's cap e^(2b)/(e^(2b) + n - 1)
        return float(np.exp(2 * s["beta"]) / (np.exp(2 * s["beta"]) + s["n"] - 1))
    if figure == "C2":        # softmax of |q| cos_j: the weight of the best key
        z = s["r"] * np.array([0.9, 0.6, 0.3, 0.0, -0.5])
        return float(np.exp(z - z.max())[0] / np.exp(z - z.max()).sum())
    if figure == "C3":        # Var[q . k] of independent unit-variance components
        return float(s["dk"])
    if figure == "L4":        # E[cos^2] of two isotropic directions
        return 1.0 / s["d"]
    n, m, d, dk = s["n"], s["m"], s["d"], s["dk"]
    fused = counts.score_multiply_adds(n, d, dk, m, fused=True)
    best = min(counts.score_multiply_adds(n, d, dk, m), counts.score_multiply_adds(n, d, dk, m, absorbed=True))
    return float(fused - best)


#: Every text of a movable figure as the reader sees it: its font size in CSS px times the SVG's
#: scale (displayed size over viewBox), its box on the screen; pairs of texts whose boxes overlap;
#: texts reaching out of the SVG's box; the HTML texts of the figure (title, controls, sentence) and
#: the height of every control (a finger's tap target).
TEXTS = """(figure) => {
  const box = document.querySelector(`.interactive-figure[data-figure="${figure}"]`);
  const svg = box.querySelector("svg"), s = svg.getBoundingClientRect(), vb = svg.viewBox.baseVal;
  const scale = Math.min(s.width / vb.width, s.height / vb.height);
  const texts = Array.from(svg.querySelectorAll("text")).map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * scale,
            left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  });
  const overlaps = [];
  texts.forEach((a, i) => texts.slice(i + 1).forEach(b => {
    if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5 &&
        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5) overlaps.push([a.text, b.text]);
  }));
  const outside = texts.filter(a => a.left < s.left - 0.5 || a.right > s.right + 0.5 ||
                                    a.top < s.top - 0.5 || a.bottom > s.bottom + 0.5).map(a => a.text);
  const html = Array.from(box.querySelectorAll("p, label, output, span")).filter(e => e.textContent.trim())
    .map(e => ({text: e.textContent.trim().slice(0, 40), px: parseFloat(getComputedStyle(e).fontSize)}));
  return {texts, overlaps, outside, html, svg: {width: s.width, height: s.height},
          controls: Array.from(box.querySelectorAll("input")).map(i => ({name: i.name, height: i.getBoundingClientRect().height})),
          scrollWidth: document.documentElement.scrollWidth};
}"""
#: The widths at which the movable figures' text is measured: a small phone, a common one, a laptop.
TEXT_WIDTHS = (360, 390, DESKTOP)


async def _move(site: Path) -> dict:
    found: dict = {"texts": {}}
    pages: dict = {}
    for figure, (path, settings) in MOVABLE.items():
        pages.setdefault(path, []).append(figure)
    with site_build.serve(site) as (base, _):
        async with playwright_api.async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                       args=[*CHROMIUM_ARGS, f"--proxy-server={base.rstrip('/')}"])
            page = await browser.new_page(viewport={"width": 390, "height": 900})
            page.set_default_timeout(_ms(60))   # load-scaled (tools/testenv/slowdown.py); long pages
            weight: dict = {}
            page.on("response", lambda r: r.url.endswith("interactive.js") and weight.setdefault("js", r.url))
            for path, figures in pages.items():    # each page loaded once, its figures moved in turn
                await page.set_viewport_size({"width": 390, "height": 900})
                await page.goto(base + path, wait_until="load")
                await page.evaluate("document.fonts.ready.then(() => true)")
                for figure in figures:
                    found[figure] = []
                    for setting in MOVABLE[figure][1]:
                        found[figure].append(await page.evaluate(MOVE, [figure, setting]))
                        if found[figure][-1] is not None:
                            found["texts"][(figure, 390, len(found[figure]))] = await page.evaluate(TEXTS, figure)
                    if figure in ("C5", "H4", "D1"):
                        box = page.locator(f'.interactive-figure[data-figure="{figure}"]')
                        await box.scroll_into_view_if_needed()
                        await box.screenshot(path=str(_shots() / f"interactive-{figure}-390.png"))
                # the same page turned into a smaller phone and a laptop: the plots redraw at their new width
                for width in (360, DESKTOP):
                    await page.set_viewport_size({"width": width, "height": 900})
                    await page.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
                    for figure in figures:
                        for k, setting in enumerate(MOVABLE[figure][1] if width == 360 else MOVABLE[figure][1][:1]):
                            if await page.evaluate(MOVE, [figure, setting]) is not None:
                                found["texts"][(figure, width, k + 1)] = await page.evaluate(TEXTS, figure)
                        if width == 360:
                            box = page.locator(f'.interactive-figure[data-figure="{figure}"]')
                            await box.scroll_into_view_if_needed()
                            await box.screenshot(path=str(_shots() / f"interactive-{figure}-360.png"))
            await browser.close()
    found["js_bytes"] = (ROOT / "book" / "_ext" / "static" / "interactive.js").stat().st_size
    return found


@pytest.fixture(scope="module")
def moved(site: Path) -> dict:
    import asyncio
    return asyncio.run(_move(site))


@pytest.mark.parametrize("figure", list(MOVABLE))
def test_a_figure_the_reader_moves_shows_the_chapters_values(moved, figure) -> None:
    """Moving a control redraws the plot, and at three settings the value shown equals what the
    chapter's formula gives in Python (attnref's counts for H4)."""
    results = moved[figure]
    assert all(r is not None for r in results), f"no interactive figure {figure} on its page"
    for setting, r in zip(MOVABLE[figure][1], results):
        assert not r["hidden"] and r["width"] <= 390, r
        expected = expected_value(figure, setting)
        assert r["value"] == pytest.approx(expected, rel=1e-9), (setting, r["value"], expected, r["text"])
    assert any(r["before"] != r["after"] for r in results) or len({r["marker"] and tuple(r["marker"]) for r in results}) == 3, \
        "moving the controls changed neither a curve nor the marker"
    assert len({tuple(r["marker"]) for r in results}) == 3, "the marker did not move with the controls"


def test_the_movable_figures_add_little_weight(moved) -> None:
    assert moved["js_bytes"] <= 300_000


def test_d1_shows_the_notebooks_stored_draws(moved) -> None:
    """At three settings of depth, percentile, span and regimes the page shows, for every variant
    of the ticked regimes run to that depth and for no other, the notebook's stored log10 r_l; one
    curve per variant shown; the sentence names the draw's rank. Bugs caught: a percentile row or a
    depth off by one, a regime toggle that hides the wrong curves, a variant's data under another's
    name."""
    data = d1_stored()
    for setting, r in zip(MOVABLE["D1"][1], moved["D1"]):
        expected = d1_expected(setting)
        assert r["values"] is not None and set(r["values"]) == set(expected), (setting, r["values"])
        for name, value in expected.items():
            assert r["values"][name] == pytest.approx(value, rel=1e-12, abs=0), (setting, name)
        ticked = {regime for box, regime in D1_REGIMES.items() if setting[box]}
        assert r["curves"] == sum(v["regime"] in ticked for v in data["series"]), (setting, r["curves"])
        rank = setting["q"] * (data["draws"] - 1) // 100 + 1
        assert f"rank {rank} of {data['draws']}" in r["text"], r["text"]


def test_d1_adds_at_most_300_kb_to_its_page(moved) -> None:
    """The stored numbers in chapter 7's page plus the whole script the page loads for them."""
    import json
    cells = json.loads((ROOT / "notebooks" / "07-depth.ipynb").read_text(encoding="utf-8"))["cells"]
    stored = sum(len("".join(o["data"]["text/html"]).encode()) for c in cells for o in c.get("outputs", [])
                 if 'data-figure="D1"' in "".join(o.get("data", {}).get("text/html", "")))
    assert 0 < stored and stored + moved["js_bytes"] <= 300_000, (stored, moved["js_bytes"])


@pytest.mark.parametrize("width", TEXT_WIDTHS)
@pytest.mark.parametrize("figure", list(MOVABLE))
def test_movable_figure_text_is_readable_on_a_phone(moved, figure, width) -> None:
    """Every text of a movable figure (ticks, axis labels, legend, reference labels; and the HTML
    title, control names and sentence) shows at least plotting.MIN_DISPLAYED_PT CSS points (1 pt =
    4/3 px) at 360 and 390 px, as the static figures do (tests/test_weight.py), and on a laptop;
    no two texts of the plot overlap and none leaves the SVG's box; on a phone every control is a
    tap target at least 24 px high; the page does not scroll sideways. Measured at each of the figure's three
    settings on a phone (one on a laptop), the 360 px plots redrawn after the page was resized.
    Fails if the plot is drawn in a fixed viewBox scaled to the column (its text then shrinks with
    it: 5.9 pt at 360 px, 6.5 pt at 390 px), if an axis label is not wrapped to its axis (C2's x
    label leaves the SVG at 360 px), if a legend stays inside a phone's plot or a middle tick is
    kept where it touches its neighbours (texts overlap), or if the sliders keep Chromium's 16 px."""
    from attnref.book import plotting
    floor_px = plotting.MIN_DISPLAYED_PT * 4 / 3
    measured = {k: v for k, v in moved["texts"].items() if k[0] == figure and k[1] == width}
    assert len(measured) == (3 if width != DESKTOP else 1), f"{figure} at {width} px: measured {sorted(measured)}"
    for (_, _, setting), f in sorted(measured.items()):
        where = f"{figure} at {width} px, setting {setting}"
        assert len(f["texts"]) >= 7, f"{where}: only {len(f['texts'])} texts (ticks and labels missing)"
        small = [(t["text"], round(t["px"] * 3 / 4, 2)) for t in f["texts"] if not t["px"] >= floor_px]
        assert not small, f"{where}: SVG text below {plotting.MIN_DISPLAYED_PT} pt: {small}"
        small = [(t["text"], t["px"]) for t in f["html"] if not t["px"] >= floor_px]
        assert not small, f"{where}: HTML text below {plotting.MIN_DISPLAYED_PT} pt: {small}"
        assert not f["overlaps"], f"{where}: texts overlap: {f['overlaps']}"
        assert not f["outside"], f"{where}: texts leave the SVG ({f['svg']}): {f['outside']}"
        low = [c for c in f["controls"] if not c["height"] >= 24]
        assert f["controls"] and (width == DESKTOP or not low), f"{where}: controls under 24 px high: {low}"
        assert f["scrollWidth"] <= width, f"{where}: the page scrolls sideways ({f['scrollWidth']} px)"
