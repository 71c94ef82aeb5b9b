"""Measured curves for a figure a reader can move, stored in the notebook beside its static figure.

``book/_ext/static/interactive.js`` draws the figures a reader can move. Most compute their curves
in the page from the formula their chapter derives; a figure whose curves are *measurements*
(D1: the residual of random stacks against depth) cannot, so the notebook stores the numbers in
its own output, right after the static figure: a hidden placeholder with a JSON island,

    <div class="interactive-figure" data-figure="D1" hidden>
      <script type="application/json">{…}</script></div>

which the page's script parses, draws and shows. Without JavaScript the placeholder stays hidden
and on paper the print style hides it: the static figure above stands alone. The numbers are
rounded to :data:`DIGITS` significant digits (the comparison of stored outputs allows one unit of
the last printed digit, so a re-run on other CPU kernels agrees), and a NaN or an infinity is
stored as ``null``, which the page shows as "no value" — never as a number.

:func:`show` displays the placeholder (``text/html``, with a one-line ``text/plain`` for a
reader of the notebook without HTML); :func:`read` parses it back (the tests read the stored
notebook with it, independently of the page's script).
"""

from __future__ import annotations

import html
import json
import math
import re
from numbers import Real

#: Significant digits of a stored number (5: a log10 r of −12.375 keeps r to 0.1 %).
DIGITS = 5
#: A figure's name: a claim ID (``D1``).
FIGURE_NAME = re.compile(r"^[A-Z][0-9]+$")
_ISLAND = re.compile(r'<div class="interactive-figure" data-figure="(?P<figure>[A-Z][0-9]+)" hidden>'
                     r'<script type="application/json">(?P<json>.*?)</script></div>', re.S)


def rounded(values, name: str = "values"):
    """``values`` (a number, or nested lists / tuples / tensors / arrays of numbers) as nested lists
    of floats with :data:`DIGITS` significant digits (Python ints stay ints); NaN, ±inf and
    ``None`` become ``None``."""
    if hasattr(values, "tolist"):                  # a tensor or an array
        values = values.tolist()
    if values is None:                             # a missing value stays missing
        return None
    if isinstance(values, bool) or not isinstance(values, (Real, list, tuple)):
        raise TypeError(f"{name}: numbers or nested lists of numbers, not {type(values).__name__}")
    if isinstance(values, int):
        return values                              # a count or a percentile, exactly
    if isinstance(values, Real):
        x = float(values)
        return float(f"{x:.{DIGITS}g}") if math.isfinite(x) else None
    return [rounded(v, f"{name}[{i}]") for i, v in enumerate(values)]


def payload(figure: str, data: dict) -> str:
    """The JSON text stored for ``figure``: ``data`` with every list of numbers rounded."""
    if not isinstance(figure, str) or not FIGURE_NAME.match(figure):
        raise ValueError(f"figure: a claim ID such as 'D1', not {figure!r}")
    if not isinstance(data, dict) or not data:
        raise ValueError(f"data: a non-empty dict of the figure's numbers, not {type(data).__name__}")

    def clean(value, name):
        if isinstance(value, dict):
            return {str(k): clean(v, f"{name}[{k!r}]") for k, v in value.items()}
        if isinstance(value, (str, bool, int)) or value is None:
            return value                         # names, flags and counts as they are
        if isinstance(value, (list, tuple)) and any(isinstance(v, (dict, str)) for v in value):
            return [clean(v, f"{name}[{i}]") for i, v in enumerate(value)]
        return rounded(value, name)

    text = json.dumps(clean(data, "data"), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/")             # a string can never close the script element


def html_of(figure: str, data: dict) -> str:
    """The hidden placeholder with ``data`` as its JSON island."""
    return (f'<div class="interactive-figure" data-figure="{html.escape(figure)}" hidden>'
            f'<script type="application/json">{payload(figure, data)}</script></div>')


def show(figure: str, data: dict, summary: str) -> None:
    """Display the placeholder as the cell's output; ``summary`` is the plain-text fallback (one
    sentence saying what the page lets the reader move)."""
    if not isinstance(summary, str) or not summary.strip():
        raise ValueError("summary: one sentence for a reader without HTML, not empty")
    from IPython.display import display
    display({"text/html": html_of(figure, data), "text/plain": summary}, raw=True)


def read(text: str, figure: str | None = None) -> dict:
    """The data of the placeholder in ``text`` (a stored ``text/html`` output), for ``figure`` if
    given; ``ValueError`` if there is none."""
    for match in _ISLAND.finditer(text):
        if figure is None or match["figure"] == figure:
            return json.loads(match["json"])
    raise ValueError(f"text: no interactive figure{' ' + figure if figure else ''} with a JSON island")
