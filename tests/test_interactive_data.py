"""The numbers a figure a reader can move carries (attnref/book/interactive.py), without a browser.

1. The helper: it rounds to its stated digits, stores NaN and infinities as ``null`` (never as a
   number), refuses a bad figure name or empty data naming the argument, cannot be closed early by
   a string in the data, and reads back what it wrote.
2. D1's stored numbers (notebooks/07-depth.ipynb, the output after the static figure) are the
   chapter's: at 50 % they are the medians the chapter's text quotes (its glued numbers, computed
   in other cells from the same draws with ``torch.median``), every percentile row is ordered, and
   the bare stack's stored residual obeys the proposition's law ln r_{l+1} ≈ 3 ln r_l.
   The Chromium test (tests/test_browser_claims.py) checks that the page shows these numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from attnref.book import interactive

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "07-depth.ipynb"


# --- the helper ----------------------------------------------------------------------------------

def test_numbers_are_rounded_and_nan_is_never_a_number():
    torch = pytest.importorskip("torch")
    assert interactive.rounded(-12.374912) == -12.375
    assert interactive.rounded(-1.3164e45) == -1.3164e45
    assert interactive.rounded([0.123456789, [7, float("nan")]]) == [0.12346, [7, None]]
    assert interactive.rounded(torch.tensor([float("inf"), -float("inf"), 2.0])) == [None, None, 2.0]
    text = interactive.payload("D1", {"v": [float("nan"), 1.0]})
    assert json.loads(text) == {"v": [None, 1.0]} and "NaN" not in text


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="figure"):
        interactive.payload("d1; alert(1)", {"v": [1.0]})
    with pytest.raises(ValueError, match="data"):
        interactive.payload("D1", {})
    with pytest.raises(TypeError, match=r"data\['v'\]\[1\]"):
        interactive.payload("D1", {"v": [1.0, object()]})
    with pytest.raises(ValueError, match="summary"):
        interactive.show("D1", {"v": [1.0]}, " ")


def test_a_string_cannot_close_the_script_and_the_data_reads_back():
    data = {"name": "a </script><script>alert(1)</script>", "v": [[1.0, 2.5], [None, -3.0]], "n": 64}
    page = "<p>before</p>" + interactive.html_of("D1", data) + "<p>after</p>"
    assert page.count("</script>") == 1
    assert interactive.read(page, "D1") == data
    with pytest.raises(ValueError, match="C5"):
        interactive.read(page, "C5")


# --- D1's stored numbers --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stored():
    """D1's stored data and the chapter's glued numbers, both read from the committed notebook."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    data, glued = None, {}
    for cell in cells:
        for output in cell.get("outputs", []):
            html = "".join(output.get("data", {}).get("text/html", ""))
            if 'data-figure="D1"' in html:
                data = interactive.read(html, "D1")
            name = (output.get("metadata") or {}).get("scrapbook", {}).get("name")
            if name:
                glued[name] = float("".join(output["data"]["application/papermill.record/text/plain"]))
    assert data is not None, "notebook 07 stores no data for the movable figure D1 (make execute)"
    return data, glued


def median_at(data, name, depth):
    series = {s["name"]: s for s in data["series"]}[name]
    return series["log10_r"][data["percentiles"].index(50)][depth]


def agrees_with_glue(log10_value, glued):
    """10^log10_value equals a number glued with 2 significant digits: within half its last digit,
    plus the storage's rounding (5 significant digits of log10 r: at most 0.1 % of r here)."""
    value = 10.0 ** log10_value
    unit = 10.0 ** (math.floor(math.log10(abs(glued))) - 1)
    return abs(value - glued) <= 0.5 * unit * (1 + 1e-9) + 3e-3 * value


@pytest.mark.parametrize("name, depth, glue", [
    ("attention + skip", 24, "d1-skip-24"), ("attention + skip", 48, "d1-skip-48"),
    ("attention + skip", 96, "d1-skip-96"), ("pre-LN blocks", 96, "d1-pre-96"),
    ("skip, branch × 1/√96", 96, "d1-scaled-96")])
def test_the_stored_medians_are_the_ones_the_chapter_quotes(stored, name, depth, glue):
    # Bug caught: the stored rows taken at the wrong percentile or rank, a depth shifted by one, the
    # draws and depths swapped, or another stack's residual stored under this name.
    data, glued = stored
    value = median_at(data, name, depth)
    assert value is not None and agrees_with_glue(value, glued[glue]), (name, depth, value, glued[glue])


def test_the_bare_stacks_stored_residual_is_the_chapters(stored):
    # the chapter quotes the median exponent of r_24 (r = 10^(−exponent)), and the proposition's law
    # ln r_{l+1} = 3 ln r_l + O(1) holds for the stored medians far past float64's range
    data, glued = stored
    exponent = -median_at(data, "attention", 24)
    unit = 10.0 ** (math.floor(math.log10(glued["d1-exponent"])) - 1)
    assert abs(exponent - glued["d1-exponent"]) <= 0.5 * unit * (1 + 1e-9), (exponent, glued["d1-exponent"])
    ratio = median_at(data, "attention", 96) / median_at(data, "attention", 95)
    assert ratio == pytest.approx(3.0, rel=1e-3), ratio


def test_every_stored_percentile_row_is_ordered(stored):
    # Bug caught: the draws sorted along the depth axis, or the percentile rows out of order.
    data, _ = stored
    assert data["percentiles"] == list(range(0, 101, 10)) and data["draws"] >= 2
    for s in data["series"]:
        rows = s["log10_r"]
        assert len(rows) == len(data["percentiles"]) and len({len(r) for r in rows}) == 1, s["name"]
        for depth in range(len(rows[0])):
            column = [r[depth] for r in rows]
            assert None not in column, (s["name"], depth)
            assert column == sorted(column), (s["name"], depth, column)
        # r ≤ 1 (the residual is a projection of X); a direct run's unresolved r is the marker value
        assert max(max(r) for r in rows) <= 1e-12, s["name"]
        if not s["exact"]:
            low = {v for r in rows for v in r if v <= data["resolved"]}
            assert low <= {data["unresolved"]}, (s["name"], sorted(low)[:3])
