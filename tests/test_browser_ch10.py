"""Chapter 10's movable figures in headless Chromium: K3 (stored curves of the three models) and W1
(the differential weights of one stored row, computed in the page). Each control is moved and the
value the page shows (``data-value``) is compared with Python's, read from the notebook's stored
JSON island (attnref.book.interactive.read) — never from the page's own numbers. Uses the private
build of tests/site_build.py (one per test run, shared with the other browser tests).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import site_build                              # tests/site_build.py
from attnref.book import interactive

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-quic"]
PAGE = "notebooks/10-ffn-memory.html"
SETTINGS = {
    "K3": [{"model": 1, "block": 3}, {"model": 2, "block": 30}, {"model": 3, "block": 25}],   # 25 > Gemma's 18 blocks
    "W1": [{"lambda": 0.8, "beta": 1}, {"lambda": 0.3, "beta": 4}, {"lambda": 1.0, "beta": 0.25}],
}

playwright_api = pytest.importorskip("playwright.async_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no Chromium at /usr/bin/chromium")

MOVE = """([figure, setting]) => {
  const box = document.querySelector(`.interactive-figure[data-figure="${figure}"]`);
  if (!box) return null;
  for (const [name, value] of Object.entries(setting)) {
    const input = box.querySelector(`input[name="${name}"]`);
    input.value = value;
    input.dispatchEvent(new Event("input"));
  }
  return {hidden: box.hidden, value: Number(box.dataset.value), text: box.querySelector(".interactive-value").textContent,
          curves: box.querySelectorAll("path.curve").length, scroll: document.documentElement.scrollWidth,
          width: window.innerWidth};
}"""


def stored(figure: str) -> dict:
    nb = json.loads((ROOT / "notebooks" / "10-ffn-memory.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            html = "".join(out.get("data", {}).get("text/html", ""))
            if f'data-figure="{figure}"' in html:
                return interactive.read(html, figure)
    raise AssertionError(f"notebook 10 stores no data for {figure}")


def expected(figure: str, setting: dict) -> float:
    data = stored(figure)
    if figure == "K3":
        model = data["models"][setting["model"] - 1]
        return model["slots90"][min(setting["block"], model["blocks"]) - 1]
    softmax = lambda z: [math.exp(v - max(z)) / sum(math.exp(u - max(z)) for u in z) for v in z]
    a1 = softmax(data["first"])
    a2 = softmax([setting["beta"] * s for s in data["second"]])
    return sum(x - setting["lambda"] * y for x, y in zip(a1, a2))


@pytest.fixture(scope="module")
def moved(tmp_path_factory) -> dict:
    import asyncio
    site = site_build.built_site(tmp_path_factory)

    async def run():
        found = {}
        with site_build.serve(site) as (base, _):
            async with playwright_api.async_playwright() as playwright:
                browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                           args=[*CHROMIUM_ARGS, f"--proxy-server={base.rstrip('/')}"])
                for width in (390, 1400):
                    page = await browser.new_page(viewport={"width": width, "height": 900})
                    await page.goto(base + PAGE, wait_until="load")
                    for figure, settings in SETTINGS.items():
                        found[(figure, width)] = [await page.evaluate(MOVE, [figure, s]) for s in settings]
                    await page.close()
                await browser.close()
        return found
    return asyncio.run(run())


@pytest.mark.parametrize("figure", list(SETTINGS))
@pytest.mark.parametrize("width", [390, 1400])
def test_each_setting_shows_the_notebooks_value(moved, figure, width):
    results = moved[(figure, width)]
    for setting, r in zip(SETTINGS[figure], results):
        assert r is not None, f"{figure} is not on {PAGE}"
        assert not r["hidden"] and r["curves"] == 3, (figure, setting, r)
        assert math.isfinite(r["value"]) and r["value"] == pytest.approx(expected(figure, setting), rel=1e-9, abs=1e-12), \
            (figure, setting, r["text"])
        assert r["scroll"] <= r["width"], f"{figure} at {width} px scrolls sideways"


def test_w1_row_sums_to_one_minus_lambda(moved):
    for setting, r in zip(SETTINGS["W1"], moved[("W1", 1400)]):
        assert r["value"] == pytest.approx(1 - setting["lambda"], abs=1e-9)
