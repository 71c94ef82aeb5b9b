"""What a reader on a phone, with a screen reader, or in dark mode meets (issue 47), in headless
Chromium at 360 and 390 px (phones: touch, 3x pixels, as a phone browser lays pages out) and 1400 px.

* Links into a chapter land on their heading: a search hit, a link of the claims index and an
  answer's badge put the heading 64 ± 8 px below the top, after the formulas are typeset and the
  figures above it have loaded (book.js holdTarget). Before: on a phone 147-383 px lower (the
  browser scrolled before the page above the target took its height).
* No inline formula of the prose is wider than its line at 360 and 390 px (book.js breaks one at its
  relations and operators, or sets it smaller): 65 were at 360 px, 43 at 390 px, up to 729 px in a
  283 px line.
* No page scrolls sideways at 360 or 390 px (chapter 6 did by 3 px at 390: a figure's "#" link),
  and no page shows TeX source as text (chapter 4's "0 of 256 at $d_k = 16$", the Rabe & Staats
  reference's "$O(n^2)$").
* Every verdict badge's text is at least 4.5:1 on its badge, light and dark, and each verdict has
  its own sign besides its colour ("premise fails here" was white on orange, 2.45:1).
* Chapter 8 reaches its last verdict in under 60 phone screens, its opening table side by side.
* Hover previews of equations, glossary terms and references (desktop; none on a touch screen);
  a "Show code / Hide code" switch on chapter pages; every page's footer names its build's date and
  commit; the glossary defines the domain terms (pre-LN, RoPE, QK-norm, Parseval frame, GQA).
* The movable figures: each slider tells a screen reader the value shown (aria-valuetext; the
  log-scale sliders announced log10 of it, "1.806" for 64); the marker stands out from the page
  background in dark mode (>= 3:1; it was black on the dark page, 1.12:1), and so does the plot's
  text (>= 4.5:1: D1's and K3's ticks were light on their output's light box, 1:1); H4 says its counts
  exactly ("costs 49,152 more", was "49150").
"""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from pathlib import Path

import pytest

import site_build                              # tests/site_build.py

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-quic"]
PHONES = (360, 390)
WIDTHS = (*PHONES, 1400)
HEADING_TOP, HEADING_SLACK = 64, 8        # the theme's scroll-padding-top: 4rem
MIN_TEXT_CONTRAST, MIN_GRAPHIC_CONTRAST = 4.5, 3.0   # WCAG 1.4.3 (text), 1.4.11 (graphics)
#: Verdict badge classes (claimsbook.markup.BADGE) -> verdict.
BADGES = {"sd-bg-success": "holds", "sd-bg-warning": "holds under conditions", "sd-bg-danger": "does not hold",
          "sd-bg-secondary": "premise fails here", "sd-bg-dark": "not established"}
#: Search queries whose first chapter hit is a link into a chapter (the landing test follows it).
LANDING_SEARCHES = ["cosine attention cannot be sharp", "fused matrix never cheaper"]

playwright_api = pytest.importorskip("playwright.async_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium")


def _ms(idle_seconds: float) -> int:
    """A Playwright time limit in milliseconds: the idle budget scaled by the machine's load."""
    import slowdown    # tools/testenv (on sys.path through tests/conftest.py)
    return round(slowdown.limit(idle_seconds) * 1000)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return site_build.built_site(tmp_path_factory)   # one build per test run (tests/site_build.py)


def pages_of(site: Path) -> list[str]:
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                  if not {"_static", "_sources", "_images"} & set(p.relative_to(site).parts)
                  and p.name != "search.html" and "http-equiv=\"refresh\"" not in p.read_text(errors="replace")[:2000])


def contrast(a: list[float], b: list[float]) -> float:
    """WCAG contrast ratio of two sRGB colours (0-255 channels)."""
    def luminance(c):
        lin = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in (v / 255 for v in c[:3])]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    hi, lo = sorted([luminance(a), luminance(b)], reverse=True)
    return (hi + 0.05) / (lo + 0.05)


# In the page: the heading a link's target names, and where it is on screen.
HEADING = """(id) => {
  const t = document.getElementById(decodeURIComponent(id));
  if (!t) return null;
  let h = t.matches("h1,h2,h3,h4,h5") ? t : t.querySelector("h1,h2,h3,h4,h5");
  if (!h || (t.tagName !== "SECTION" && !t.contains(h))) {   // a label before its heading
    let e = t;
    while (e && !(e.matches && e.matches("h1,h2,h3,h4,h5"))) e = e.nextElementSibling || (e.parentElement && e.parentElement.nextElementSibling);
    h = e || t;
  }
  return Math.round(h.getBoundingClientRect().top * 10) / 10;
}"""
# After the page's network is idle (the figures the browser chose to load have loaded): the
# formulas fitted, the fonts loaded, and the heading's place unchanged over five frames.
SETTLE = """async (id) => {
  const t0 = Date.now();
  const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  const heading = HEADING;
  while (document.documentElement.dataset.mathFitted !== "yes" && Date.now() - t0 < 60000) await frame();
  await document.fonts.ready;
  let last = null, same = 0;
  while (same < 5 && Date.now() - t0 < 60000) {
    await frame();
    const now = heading(id);
    same = now === last ? same + 1 : 0;
    last = now;
  }
  return last;
}""".replace("HEADING", HEADING)

INLINE_TOO_WIDE = """() => {
  const art = document.querySelector(".bd-article") || document.body;
  const line = (el) => { let b = el.parentElement; while (b && getComputedStyle(b).display.startsWith("inline")) b = b.parentElement;
    const s = getComputedStyle(b); return b.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight); };
  return Array.from(art.querySelectorAll("span.math"))
    .filter((s) => !s.closest(".cell_output, .cell_input, table, .interactive-figure"))
    .map((s) => { const c = s.querySelector("mjx-container"); return c ? [c.getBoundingClientRect().width, line(s), s.textContent.slice(0, 60)] : null; })
    .filter((x) => x && x[0] > x[1] + 1).map((x) => `${Math.round(x[0])} px in ${Math.round(x[1])}: ${x[2]}`);
}"""
TEX_AS_TEXT = """() => {
  const art = document.querySelector(".bd-article") || document.body;
  const walker = document.createTreeWalker(art, NodeFilter.SHOW_TEXT);
  const found = []; let n;
  while ((n = walker.nextNode())) {
    if (n.parentElement.closest("script, style, .math, mjx-container, pre, code, .cell_input, .cell_output .output")) continue;
    if (/\\$[^$\\s][^$]*\\$|\\\\(frac|sqrt|cdot|mathrm|top|times)(?![A-Za-z])/.test(n.textContent)) found.push(n.textContent.trim().slice(0, 80));
  }
  return found;
}"""
BADGE_FACTS = """(classes) => Array.from(document.querySelectorAll(".sd-badge")).map((b) => {
  const kind = classes.find((c) => b.classList.contains(c));
  if (!kind) return null;
  const s = getComputedStyle(b), before = getComputedStyle(b, "::before");
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  return {kind, text: b.textContent.trim(), color: rgb(s.color), background: rgb(s.backgroundColor),
          sign: before.content, visible: b.getBoundingClientRect().width > 0};
}).filter(Boolean)"""
FIGURE_FACTS = """() => Array.from(document.querySelectorAll(".interactive-figure")).filter((b) => !b.hidden).map((box) => {
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  let bg = null;
  for (let e = box; e && !bg; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor; if (rgb(c).length === 3 || (rgb(c)[3] || 0) > 0.5) bg = rgb(c); }
  if (!bg) bg = rgb(getComputedStyle(document.body).backgroundColor);
  return {figure: box.dataset.figure, background: bg,
    ticks: Array.from(box.querySelectorAll("svg text")).slice(0, 3).map((t) => rgb(getComputedStyle(t).fill)),
    markers: Array.from(box.querySelectorAll("circle.marker")).map((m) => ({stroke: rgb(getComputedStyle(m).stroke), fill: getComputedStyle(m).fill})),
    sliders: Array.from(box.querySelectorAll('input[type="range"]')).map((i) => ({name: i.name, valuetext: i.getAttribute("aria-valuetext"),
      shown: i.parentElement.querySelector("output").textContent, value: i.value})),
    text: box.querySelector(".interactive-value").textContent};
})"""


async def _landing_links(page, base: str) -> list[str]:
    """Links into chapters: three of the claims index, three answer badges, the first chapter hit
    of each LANDING_SEARCHES query (all relative to the site's root)."""
    links: list[str] = []
    for path, selector in (("book/claims.html", ".bd-article a[href*='notebooks/'][href*='#']"),
                           ("book/answers.html", ".answer-card a.sd-badge[href*='notebooks/'][href*='#'], "
                                                 ".answer-card a[href*='notebooks/'][href*='#']")):
        await page.goto(base + path, wait_until="load")
        hrefs = await page.evaluate(f"Array.from(document.querySelectorAll({selector!r})).map(a => a.href)")
        hrefs = list(dict.fromkeys(h for h in hrefs if "#" in h))
        links += hrefs[len(hrefs) // 4::max(1, len(hrefs) // 3)][:3]   # spread over the list: later chapters too
    for query in LANDING_SEARCHES:
        await page.goto(base + "search.html?" + urllib.parse.urlencode({"q": query}), wait_until="load")
        await page.wait_for_function("(document.querySelector('#search-results .search-summary') || {}).textContent")
        hrefs = await page.evaluate("Array.from(document.querySelectorAll('#search-results li > a')).map(a => a.href)")
        links += [h for h in hrefs if "/notebooks/" in h and "#" in h][:1]
    return [h[len(base):] for h in links]


# Chapter 8 on a phone: the page's height and where its last verdict ends, in screens; its opening
# table's column names.
CHAPTER_8 = """() => {
  const boxes = Array.from(document.querySelectorAll(".verdict-box"));
  const last = boxes[boxes.length - 1];
  const heads = Array.from(document.querySelectorAll(".chapter-verdicts thead th")).map((th) => th.textContent.trim());
  return {screens: document.documentElement.scrollHeight / innerHeight,
          lastVerdict: last ? (last.getBoundingClientRect().bottom + scrollY) / innerHeight : null, heads,
          rows: document.querySelectorAll(".chapter-verdicts tbody tr").length};
}"""


# The "Show code / Hide code" switch: visible in the header, and a click opens every code fold, a
# second folds them again.
CODE_SWITCH = """() => {
  const button = document.querySelector(".article-header-buttons .code-switch");
  const folds = Array.from(document.querySelectorAll(".bd-article details.hide.above-input"));
  if (!button) return {button: false, folds: folds.length};
  const r = button.getBoundingClientRect();
  const before = folds.filter((d) => d.open).length, label0 = button.textContent;
  button.click();
  const opened = folds.filter((d) => d.open).length, label1 = button.textContent;
  button.click();
  return {button: true, visible: r.width > 0 && r.right <= innerWidth, folds: folds.length, before, opened,
          after: folds.filter((d) => d.open).length, labels: [label0, label1]};
}"""


async def _measure(site: Path) -> dict:
    facts: dict = {"landing": {}, "inline": {}, "tex": {}, "sideways": {}, "badges": {}, "figures": {}, "ch8": {}, "stamp": {},
                   "switch": {}}
    pages = pages_of(site)
    with site_build.serve(site) as (base, _):
        async with playwright_api.async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                       args=[*CHROMIUM_ARGS, f"--proxy-server={base.rstrip('/')}"])
            context = await browser.new_context(viewport={"width": 1400, "height": 900})
            page = await context.new_page()
            page.set_default_timeout(_ms(60))
            links = await _landing_links(page, base)
            facts["links"] = links
            await context.close()
            for width in WIDTHS:
                phone = width in PHONES
                context = await browser.new_context(viewport={"width": width, "height": 740 if phone else 900},
                                                    is_mobile=phone, has_touch=phone, device_scale_factor=3 if phone else 1)
                page = await context.new_page()
                page.set_default_timeout(_ms(60))
                for link in links:
                    await page.goto(base + link, wait_until="networkidle")
                    facts["landing"][(width, link)] = await page.evaluate(SETTLE, link.split("#", 1)[1])
                for path in pages:
                    await page.goto(base + path, wait_until="load")
                    await page.wait_for_function("document.documentElement.dataset.mathFitted === 'yes'")
                    if path == "notebooks/08-training.html":
                        facts["ch8"][width] = await page.evaluate(CHAPTER_8)
                    facts["stamp"][(width, path)] = await page.evaluate(
                        "(document.querySelector('.build-stamp') || {textContent: ''}).textContent")
                    if path == "notebooks/04-cosine-vs-dot.html":
                        facts["switch"][width] = await page.evaluate(CODE_SWITCH)
                    facts["inline"][(width, path)] = await page.evaluate(INLINE_TOO_WIDE)
                    facts["tex"][(width, path)] = await page.evaluate(TEX_AS_TEXT)
                    facts["sideways"][(width, path)] = await page.evaluate(
                        "[document.documentElement.scrollWidth, window.innerWidth]")
                    for scheme in ("light", "dark"):
                        if scheme == "dark":
                            await page.emulate_media(color_scheme="dark")
                            await page.wait_for_function("document.documentElement.dataset.theme === 'dark'")
                        facts["badges"][(width, scheme, path)] = await page.evaluate(BADGE_FACTS, list(BADGES))
                        facts["figures"][(width, scheme, path)] = await page.evaluate(FIGURE_FACTS)
                    await page.emulate_media(color_scheme="light")
                await context.close()
            await browser.close()
    return facts


@pytest.fixture(scope="module")
def facts(site: Path) -> dict:
    return asyncio.run(_measure(site))


def test_the_landing_links_were_found(facts) -> None:
    links = facts["links"]
    assert len(links) >= 6 and all("#" in link and link.startswith("notebooks/") for link in links), links


@pytest.mark.parametrize("width", WIDTHS)
def test_a_link_into_a_chapter_lands_on_its_heading(facts, width) -> None:
    off = {link: top for (w, link), top in facts["landing"].items()
           if w == width and (top is None or abs(top - HEADING_TOP) > HEADING_SLACK)}
    assert not off, f"headings not at {HEADING_TOP} ± {HEADING_SLACK} px from the top at {width} px: {off}"


@pytest.mark.parametrize("width", WIDTHS)
def test_no_inline_formula_is_wider_than_its_line(facts, width) -> None:
    wide = {path: found for (w, path), found in facts["inline"].items() if w == width and found}
    assert not wide, f"inline formulas wider than their line at {width} px: {wide}"


@pytest.mark.parametrize("width", PHONES)
def test_no_page_scrolls_sideways_on_a_phone(facts, width) -> None:
    wide = {path: size for (w, path), size in facts["sideways"].items() if w == width and size[0] > size[1]}
    assert not wide, f"pages wider than the screen at {width} px (scroll width, viewport): {wide}"


def test_no_tex_source_on_any_page(facts) -> None:
    found = {path: texts for (w, path), texts in facts["tex"].items() if w == 1400 and texts}
    assert not found, f"TeX source shown as text: {found}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_badge_is_readable_and_marked_by_more_than_colour(facts, width, scheme) -> None:
    badges = [b for (w, s, _), found in facts["badges"].items() if w == width and s == scheme for b in found]
    assert {b["kind"] for b in badges} == set(BADGES), "a verdict's badge is missing from the pages measured"
    low = sorted({(b["kind"], b["text"], round(contrast(b["color"], b["background"]), 2)) for b in badges
                  if contrast(b["color"], b["background"]) < MIN_TEXT_CONTRAST})
    assert not low, f"badge text below {MIN_TEXT_CONTRAST}:1 ({scheme}, {width} px): {low}"
    signs = {}
    for b in badges:
        signs.setdefault(b["kind"], set()).add(b["sign"])
    assert all(len(s) == 1 for s in signs.values()), signs
    first = {kind: next(iter(s)) for kind, s in signs.items()}
    assert all(sign not in ("none", "normal", '""') for sign in first.values()), f"a verdict without a sign: {first}"
    assert len(set(first.values())) == len(BADGES), f"two verdicts share a sign: {first}"


def _figures(facts, width, scheme) -> list[dict]:
    return [f for (w, s, _), found in facts["figures"].items() if w == width and s == scheme for f in found]


@pytest.mark.parametrize("width", WIDTHS)
def test_every_slider_announces_the_value_it_shows(facts, width) -> None:
    sliders = [(f["figure"], s) for f in _figures(facts, width, "light") for s in f["sliders"]]
    assert len(sliders) >= 12, sliders
    wrong = [(fig, s) for fig, s in sliders if s["valuetext"] != s["shown"] or not s["shown"]]
    assert not wrong, f"aria-valuetext differs from the value shown: {wrong}"
    assert any(s["valuetext"] != s["value"] for _, s in sliders)   # the log-scale ones move log10


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_marker_and_the_plot_text_stand_out(facts, width, scheme) -> None:
    figures = [f for f in _figures(facts, width, scheme) if f["markers"]]
    assert figures
    low = [(f["figure"], round(contrast(m["stroke"], f["background"]), 2)) for f in figures for m in f["markers"]
           if contrast(m["stroke"], f["background"]) < MIN_GRAPHIC_CONTRAST]
    assert not low, f"markers below {MIN_GRAPHIC_CONTRAST}:1 against the page ({scheme}, {width} px): {low}"
    faint = [(f["figure"], round(contrast(t, f["background"]), 2)) for f in _figures(facts, width, scheme)
             for t in f["ticks"] if contrast(t, f["background"]) < MIN_TEXT_CONTRAST]
    assert not faint, f"plot text below {MIN_TEXT_CONTRAST}:1 against its background ({scheme}, {width} px): {faint}"


def test_h4_says_its_counts_exactly(facts) -> None:
    from attnref import counts
    h4 = [f for f in _figures(facts, 1400, "light") if f["figure"] == "H4"]
    assert h4, "no H4 figure"
    values = {s["name"]: int(s["shown"].replace(",", "")) for s in h4[0]["sliders"]}
    n, m, d, dk = values["n"], values["m"], values["d"], values["dk"]
    fused = counts.score_multiply_adds(n, d, dk, m, fused=True)
    more = fused - min(counts.score_multiply_adds(n, d, dk, m), counts.score_multiply_adds(n, d, dk, m, absorbed=True))
    assert f"costs {more:,} more" in h4[0]["text"], (more, h4[0]["text"])
    assert f"fused {fused:,}" in h4[0]["text"], (fused, h4[0]["text"])


MAX_CH8_SCREENS = 60   # issue 47 item 7: phone screens (of 740 px) to the end of chapter 8's last verdict


@pytest.mark.parametrize("width", PHONES)
def test_chapter_8_reaches_its_last_verdict_in_under_60_phone_screens(facts, width) -> None:
    """Chapter 8 was 157 screens of 740 px at 360 px, its last verdict at 141: every setting's
    per-seed table, the portability, effects and power tables and the failed checks' evidence
    open. Folded now (cells tagged hide-output; failed evidence folded on a phone), and the opening
    table puts the synthetic and text verdicts side by side."""
    ch8 = facts["ch8"][width]
    assert ch8["lastVerdict"] is not None and ch8["lastVerdict"] < MAX_CH8_SCREENS, ch8


def test_chapter_8_opens_with_the_verdicts_side_by_side(facts) -> None:
    ch8 = facts["ch8"][1400]
    assert any(h.startswith("On Text") for h in ch8["heads"]), ch8["heads"]
    from attnref.book import registry
    claims = [c for c in registry.CLAIMS.values() if c.chapter == 8]
    assert ch8["rows"] == len(claims), ch8   # one row per claim, not one per verdict


@pytest.mark.parametrize("width", WIDTHS)
def test_a_switch_shows_and_folds_all_code(facts, width) -> None:
    switch = facts["switch"][width]
    assert switch["button"] and switch["visible"], switch
    assert switch["before"] == 0 and switch["opened"] == switch["folds"] > 1 and switch["after"] == 0, switch
    assert switch["labels"] == ["Show code", "Hide code"], switch


def test_every_page_says_when_and_from_which_commit_it_was_built(facts) -> None:
    missing = [path for (w, path), text in facts["stamp"].items() if w == 1400
               and not re.fullmatch(r"Built \d{4}-\d\d-\d\d( from commit [0-9a-f]{10}( \+ changes)?)?\.", text.strip())]
    assert not missing, f"pages without the build's date and commit: {missing}"


def test_alt_texts_follow_stacked_panels(site: Path) -> None:
    """Issue 47 item 4: a figure whose caption says Top/Bottom (panels stacked) must not describe
    them as Left/Right to a screen reader (eleven alt texts did)."""
    import html
    bad = []
    for page in sorted((site / "notebooks").glob("*.html")):
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r'<img alt="([^"]*)"', text):
            caption = re.search(r"<figcaption>(.*?)</figcaption>", text[m.end():m.end() + 4000], re.S)
            alt = html.unescape(m[1])
            if caption and re.search(r"\b[Tt]op\b", caption[1]) and re.search(r"\b(Left|Right)\b", alt):
                bad.append((page.name, alt[:60]))
    assert not bad, f"alt texts saying Left/Right for stacked panels: {bad}"


GLOSSARY_TERMS = ("pre-ln", "rope", "qk-norm", "parseval-frame", "gqa")


def test_the_glossary_defines_the_domain_terms(site: Path) -> None:
    text = (site / "book" / "glossary.html").read_text(encoding="utf-8")
    missing = [term for term in GLOSSARY_TERMS if f'id="glossary-{term}"' not in text]
    assert not missing, f"glossary terms without an entry: {missing}"


PREVIEW_LINKS = {"equation": "a.reference.internal[href^='#equation-']",
                 "glossary term": "a.reference.internal[href*='glossary.html#']",
                 "reference": "a.reference.internal[href*='references.html#']"}


async def _previews(site: Path) -> dict:
    found: dict = {}
    with site_build.serve(site) as (base, _):
        async with playwright_api.async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                       args=[*CHROMIUM_ARGS, f"--proxy-server={base.rstrip('/')}"])
            for width in WIDTHS:
                phone = width in PHONES
                context = await browser.new_context(viewport={"width": width, "height": 900}, is_mobile=phone, has_touch=phone)
                page = await context.new_page()
                page.set_default_timeout(_ms(60))
                await page.goto(base + "notebooks/04-cosine-vs-dot.html", wait_until="networkidle")
                await page.wait_for_function("document.documentElement.dataset.mathFitted === 'yes'")
                for kind, selector in PREVIEW_LINKS.items():
                    link = page.locator(".bd-article " + selector).first
                    await link.scroll_into_view_if_needed()
                    await link.hover()
                    shown = None
                    for _ in range(40):   # a preview appears 0.25 s after the pointer rests (fetch: a page)
                        shown = await page.evaluate("(() => { const b = document.getElementById('link-preview');"
                                                    " return b && !b.hidden ? {text: b.textContent.trim(),"
                                                    " math: b.querySelectorAll('mjx-container').length} : null; })()")
                        if shown:
                            break
                        await page.wait_for_timeout(100)
                    found[(width, kind)] = shown
                    await page.mouse.move(1, 1)
                    await page.keyboard.press("Escape")
                await context.close()
            await browser.close()
    return found


@pytest.fixture(scope="module")
def previews(site: Path) -> dict:
    return asyncio.run(_previews(site))


def test_hover_previews_of_equations_terms_and_references(previews) -> None:
    eq, term, ref = (previews[(1400, k)] for k in PREVIEW_LINKS)
    assert eq and eq["math"] >= 1, eq                       # the equation itself, typeset
    assert term and len(term["text"]) > 20, term            # the term's heading and definition
    assert ref and re.search(r"\b(19|20)\d\d\b", ref["text"]), ref   # the entry, with its year
    on_phones = {k: v for k, v in previews.items() if k[0] in PHONES and v}
    assert not on_phones, f"a preview on a touch screen (a tap should follow the link): {on_phones}"
