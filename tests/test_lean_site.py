"""The themes' stylesheets, purged (book/_ext/lean_site.py), draw the site exactly as before.

pydata-sphinx-theme.css (397 kB, a quarter of a first visit) was first shipped whole because its
purge made the desktop header's buttons and the sidebar's search field lose their icons. The cause:
the rule that gives every Font Awesome icon its font and box, ``.fa,.fa-brands,...,.fas``, is
preceded by the font's licence comment, which holds a comma ("Fonticons, Inc."); the purge split
the selector list at that comma, dropped the part that named ``.com`` and kept ``Inc. */ .fa-...``,
an invalid selector, so the browser dropped the whole rule (elsewhere the kept half opened a
comment that never closed and hid the rules after it). Now comments are taken out of a selector
list before it is split; licence notices are written out on their own.

* Unit cases: the licence comment with a comma, comments and strings inside a selector list.
* Chromium as the independent parser: the installed pydata-sphinx-theme.css and the other purged
  sheets, parsed by Chromium (CSSOM) before and after a purge with several sets of used names:
  every rule of the purged sheet is a rule of the original one (same conditions, selector and
  declarations), and every selector of the original whose classes and ids are all used is there.
* The built site: pages shown with the purged stylesheets and with the originals (kept by the
  build in ``_build/.doctrees/lean_site-unpurged``, copied over a copy of the site) at 1400 px, at 390 px, in dark mode at 1400 px and at 390 px with the
  Contents drawer open: the screenshots are identical pixel for pixel.
"""

from __future__ import annotations

import asyncio
import random
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import lean_site  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-quic",
                 "--hide-scrollbars"]
FA_NOTICE = ("/*!\n * Font Awesome Free 6.5.2 by @fontawesome - https://fontawesome.com\n"
             " * Copyright 2024 Fonticons, Inc.\n */\n")


def _uncommented(css: str) -> str:
    """``css`` without its closed comments (an unclosed ``/*`` stays, and shows)."""
    return re.sub(r"/\*.*?\*/", "", css, flags=re.S)


# ------------------------------------------------------------------------------------------
# Unit cases
# ------------------------------------------------------------------------------------------

def test_a_licence_comment_with_a_comma_before_a_selector_list():
    """Fails if the purge splits a selector list inside a comment (pydata-sphinx-theme.css's
    icons vanished: ``Inc. */ .fa-solid`` is no selector) or loses the licence notice."""
    used = {"fa-solid", "fa-bars"}.__contains__
    css = FA_NOTICE + '.fa,.fa-solid{display:inline-block}.fa-bars:before{content:"\\f0c9"}.fa-gone:before{x:1}'
    out = lean_site.purge_css(css, used)
    assert _uncommented(out).strip() == '.fa-solid{display:inline-block}.fa-bars:before{content:"\\f0c9"}', out
    assert out.count("/*") == out.count("*/") == 1 and "Fonticons, Inc." in out, out


def test_a_notice_before_a_rule_that_goes_is_kept_and_closed():
    """Fails if a kept notice is left open (it would hide the rules after it)."""
    out = lean_site.purge_css("/*! a, b .c */.gone{x:1}.kept{y:2}", {"kept"}.__contains__)
    assert _uncommented(out).strip() == ".kept{y:2}" and out.startswith("/*! a, b .c */"), out


def test_comments_strings_and_escapes_inside_a_selector_list():
    """Fails if a comma inside a comment, an attribute string or after a backslash splits the list."""
    used = {"math", "toc"}.__contains__
    assert lean_site.purge_css(".math,/* x, .y */.gone{a:1}", used) == ".math{a:1}"
    assert lean_site.purge_css('.math[title="a,.gone"],.gone{b:2}', used) == '.math[title="a,.gone"]{b:2}'
    assert lean_site.purge_css(".a\\,b,.toc{c:3}", used) == ".a\\,b,.toc{c:3}"
    # a "/*" inside a string is no comment
    assert lean_site.purge_css('a[href^="/*"],.toc{d:4}', used) == 'a[href^="/*"],.toc{d:4}'


# ------------------------------------------------------------------------------------------
# Chromium's parser as the oracle
# ------------------------------------------------------------------------------------------

#: Every style rule of a stylesheet as Chromium parses it: [conditions, selector, declarations,
#: "style"], one entry per selector of a list; any other rule as [conditions, its text, "", "other"].
CSSOM_RULES = """(text) => {
  const sheet = new CSSStyleSheet();
  sheet.replaceSync(text);
  const out = [];
  const split = (list) => { const parts = []; let depth = 0, cur = "", quote = null;
    for (const c of list) {
      if (quote) { if (c === quote) quote = null; }
      else if (c === '"' || c === "'") quote = c;
      else if ("([".includes(c)) depth++;
      else if (")]".includes(c)) depth--;
      else if (c === "," && depth === 0) { parts.push(cur.trim()); cur = ""; continue; }
      cur += c; }
    parts.push(cur.trim()); return parts; };
  const walk = (rules, context) => { for (const rule of rules) {
    if (rule instanceof CSSStyleRule) {
      for (const s of split(rule.selectorText)) out.push([context, s, rule.style.cssText, "style"]);
    } else if (rule.cssRules) {
      const head = rule.cssText.slice(0, rule.cssText.indexOf("{")).trim();
      walk(rule.cssRules, context + " " + head);
    } else { out.push([context, rule.cssText, "", "other"]); }
  } };
  walk(sheet.cssRules, "");
  return out;
}"""


def _theme_sheets() -> dict[str, str]:
    import pydata_sphinx_theme
    import sphinx_design
    pst = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / "styles"
    sheets = {"pydata-sphinx-theme.css": (pst / "pydata-sphinx-theme.css").read_text(encoding="utf-8")}
    design = next(Path(sphinx_design.__file__).parent.rglob("sphinx-design.min.css"), None)
    if design is not None:
        sheets["sphinx-design.min.css"] = design.read_text(encoding="utf-8")
    return sheets


def _names(css: str) -> list[str]:
    return sorted(set(re.findall(r"[.#](-?[_a-zA-Z][\w-]*)", _uncommented(css))))


async def _parse_all(texts: list[str]) -> list[list]:
    from playwright.async_api import async_playwright
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = await browser.new_page()
        parsed = [await page.evaluate(CSSOM_RULES, text) for text in texts]
        await browser.close()
    return parsed


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
def test_chromium_parses_the_purged_theme_as_the_original_minus_the_unused_selectors():
    """Fails if a purge alters or invents a rule (a comma split inside a comment or a string, a
    block glued to the wrong selectors, an unclosed comment hiding what follows: Chromium then
    drops or changes rules) or drops a selector whose classes and ids are all used."""
    pytest.importorskip("playwright.async_api", reason="the Python package playwright is not installed")
    sheets = _theme_sheets()
    cases = []   # (sheet, used names) : all used, none used, and random halves
    for name, css in sheets.items():
        names = _names(css)
        cases.append((name, set(names)))
        cases.append((name, set()))
        for seed in range(3):
            cases.append((name, set(random.Random(seed).sample(names, len(names) // 2))))
    purged = [lean_site.purge_css(sheets[name], used.__contains__) for name, used in cases]
    parsed = asyncio.run(_parse_all([*sheets.values(), *purged]))
    originals = dict(zip(sheets, parsed[:len(sheets)]))
    for (name, used), out, rules in zip(cases, purged, parsed[len(sheets):]):
        original = originals[name]
        assert len(original) > (1000 if name.startswith("pydata") else 100), (name, len(original))
        before = {tuple(r) for r in original}
        after = {tuple(r) for r in rules}
        invented = after - before
        assert not invented, f"{name}, {len(used)} names used: rules not in the original: {sorted(invented)[:5]}"
        expected = set()
        for context, selector, block, kind in before:
            names = lean_site.required_names(selector) if kind == "style" else None
            if names is None or all(n in used for n in names):
                expected.add((context, selector, block, kind))
        lost = expected - after
        assert not lost, f"{name}, {len(used)} names used: selectors lost: {sorted(lost)[:5]}"
        if not used:
            assert len(out) < len(sheets[name]) / 2, (name, len(out))


# ------------------------------------------------------------------------------------------
# The built site, with the purged stylesheets and with the originals
# ------------------------------------------------------------------------------------------

PAGES = ("book/intro.html", "notebooks/04-cosine-vs-dot.html", "book/claims.html")
#: (name, width, colour scheme, drawer opened before the screenshot)
VIEWS = (("1400", 1400, "light", None), ("390", 390, "light", None),
         ("1400-dark", 1400, "dark", None), ("390-contents", 390, "light", "secondary"))
SETTLE = """async () => {
  await new Promise((done) => { const t0 = Date.now(); (function wait() {
    const theme = document.documentElement.dataset.theme;
    if (theme === "light" || theme === "dark" || Date.now() - t0 > 60000) done(); else setTimeout(wait, 50); })(); });
  if (document.querySelector(".math") && window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const images = Array.from(document.images); images.forEach((i) => { i.loading = "eager"; });
  await Promise.all(images.map((i) => i.decode().catch(() => null)));
  await document.fonts.ready;
  await new Promise((done) => { const t0 = Date.now(); (function wait() {
    if (!document.querySelector(".math") || document.documentElement.dataset.mathFitted || Date.now() - t0 > 60000) done(); else setTimeout(wait, 50); })(); });
  await new Promise((r) => setTimeout(r, 300));
  return document.documentElement.dataset.theme;
}"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    import site_build                              # tests/site_build.py
    return site_build.built_site(tmp_path_factory)


async def _screenshots(site: Path) -> dict:
    """Screenshots (PNG bytes) of PAGES of ``site`` in VIEWS."""
    import site_build
    from playwright.async_api import async_playwright
    shots = {}
    with site_build.serve(site) as (base, _):
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, f"--proxy-server={base.rstrip('/')}"])
            for name, width, scheme, drawer in VIEWS:
                context = await browser.new_context(viewport={"width": width, "height": 900},
                                                    color_scheme=scheme, reduced_motion="reduce")
                page = await context.new_page()
                for path in PAGES:
                    await page.goto(base + path, wait_until="load", timeout=600_000)
                    await page.wait_for_load_state("networkidle", timeout=600_000)
                    assert await page.evaluate(SETTLE) == scheme, (path, name)
                    if drawer:
                        button = page.locator(f".{drawer}-toggle").locator("visible=true")
                        if not await button.count():     # a page without sections (the landing page)
                            continue
                        await button.first.click()
                        await page.wait_for_timeout(700)
                    shots[(path, name)] = await page.screenshot(animations="disabled", timeout=600_000)
                await context.close()
            await browser.close()
    return shots


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
def test_the_purged_stylesheets_draw_the_pages_as_the_originals(site: Path, tmp_path: Path) -> None:
    """Fails if the purge drops a rule a page uses (a class the purge thinks unused, a comment
    split inside a selector list: the header's icons went, a block glued to other selectors):
    the page then differs, somewhere on its first screen in one of the four views, from the
    same page drawn with the themes' stylesheets as they were."""
    pytest.importorskip("playwright.async_api", reason="the Python package playwright is not installed")
    from PIL import Image, ImageChops
    originals = site.parent / ".doctrees" / lean_site.UNPURGED    # _build/html -> _build/.doctrees
    assert (originals / "styles" / "pydata-sphinx-theme.css").is_file(), (
        f"the build kept no unpurged stylesheets at {originals} (book/_ext/lean_site.py, UNPURGED)")
    served = (site / "_static" / "styles" / "pydata-sphinx-theme.css").stat().st_size
    kept = (originals / "styles" / "pydata-sphinx-theme.css").stat().st_size
    assert served < kept / 2, f"pydata-sphinx-theme.css is not purged: {served} of {kept} bytes"
    import io
    import shutil
    unpurged = tmp_path / "unpurged"       # the site with the stylesheets as they were
    shutil.copytree(site, unpurged)
    shutil.copytree(originals, unpurged / "_static", dirs_exist_ok=True)
    persistent = None
    for _attempt in range(3):
        purged = asyncio.run(_screenshots(site))
        whole = asyncio.run(_screenshots(unpurged))
        assert purged.keys() == whole.keys()
        assert {(path, view[0]) for path in PAGES for view in VIEWS if not view[3]} <= purged.keys()
        assert ("notebooks/04-cosine-vs-dot.html", "390-contents") in purged, "the Contents drawer was not shown"
        different = {}
        for key, png in purged.items():
            if png == whole[key]:
                continue
            a, b = Image.open(io.BytesIO(png)).convert("RGB"), Image.open(io.BytesIO(whole[key])).convert("RGB")
            box = ImageChops.difference(a, b).getbbox() if a.size == b.size else "size"
            if box is not None:
                a.save(tmp_path / f"{key[0].replace('/', '_')}-{key[1]}-purged.png")
                b.save(tmp_path / f"{key[0].replace('/', '_')}-{key[1]}-original.png")
                different[key] = box
        # A view that differs once may have been caught mid-way (a loaded machine: the theme's
        # colours switch from 'auto' to 'light' after the first paint); a rule the purge lost
        # differs every time.
        persistent = different if persistent is None else {k: v for k, v in different.items() if k in persistent}
        if not persistent:
            break
    different = persistent
    assert not different, f"pages drawn differently with the purged stylesheets (box of the difference; see {tmp_path}): {different}"
