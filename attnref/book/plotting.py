"""One plotting style for every figure of the book.

Figures are PNG at 2× resolution on a solid white background (readable in the site's dark
mode too), with a colour-blind-safe palette. Use :func:`figure` to make one and :func:`show`
to display and close it, so no cell ends with an expression whose repr holds an address.

Every figure of the book has one width, :data:`DISPLAY_WIDTH` inches (500 px on the page at
100 dpi), and is published with that width and no height, so the page scales it with its aspect
ratio kept (the site's CSS: ``max-width: 100%; height: auto``): at most 500 px on a laptop, 300 px
in the column of a 360 px phone screen. Fonts are sized for the phone: no text is below
:data:`MIN_DISPLAYED_PT` (9 pt, 12 CSS px) where the page shows the figure narrowest
(:data:`NARROWEST_DISPLAY_PX`), which is 15 pt on a laptop; :func:`show` raises any smaller
text of a figure (a ``fontsize=8`` legend, an annotation) to :data:`MIN_TEXT_PT` before drawing.
:func:`displayed_points` computes the size a reader sees. Long titles are wrapped to their axes
(or to the figure, for a suptitle) before drawing; constrained layout makes room for them.
:func:`show` warns about any title, label or legend still outside the figure.

With ``ATTNREF_FIGURES=off`` in the environment, :func:`show` closes figures without drawing
them: the seed re-runs of ``make test`` (assertions only) use it, since drawing is most of a
figure's cost and the stored figures are those of the default seed.
"""

from __future__ import annotations

import os
import re
import warnings

import matplotlib

matplotlib.use("Agg")  # no GUI; the inline backend still displays figures in a notebook

import matplotlib.pyplot as plt  # noqa: E402

#: Okabe–Ito colour-blind-safe palette.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]

STYLE = {
    "figure.figsize": (5.0, 3.4),
    "figure.dpi": 100,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.dpi": 200,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    # Text sizes: nothing under MIN_TEXT_PT (9 pt on the page at the narrowest display width).
    "font.size": 14.5,
    "axes.titlesize": 15,
    "axes.labelsize": 14.5,
    "xtick.labelsize": 14.5,
    "ytick.labelsize": 14.5,
    "legend.fontsize": 14.5,
    "legend.title_fontsize": 14.5,
    "figure.titlesize": 15.5,
    "figure.labelsize": 14.5,
    "legend.handlelength": 1.5,
    "legend.handletextpad": 0.5,
    "legend.labelspacing": 0.3,
    "legend.columnspacing": 1.0,
    "legend.borderaxespad": 0.3,
    "lines.markersize": 5,
    "legend.frameon": False,
    "svg.hashsalt": "attnref",
    "image.cmap": "viridis",
}


def use_book_style() -> None:
    """Apply the book's matplotlib style and a deterministic inline format (PNG at 2×)."""
    plt.rcParams.update(STYLE)
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # outside IPython
        return
    set_matplotlib_formats("retina")


#: The width of every figure, in inches: 500 px on the page at ``figure.dpi`` = 100.
DISPLAY_WIDTH = 5.0
#: Widths in CSS px at which the book shows a figure: its own width (a laptop's 848 px column
#: is wider), and the narrowest, the image width in the column of a 360 px wide phone screen
#: (measured in Chromium: 300 px at 360, 330 px at 390; tests/test_browser_claims.py measures it).
#: At 12.5 pt the text showed at 8.55 pt on a 390 px phone and 7.8 pt at 360 px.
DISPLAY_WIDTHS_PX = {"laptop (1400 px)": 500, "phone (360 px)": 300}
NARROWEST_DISPLAY_PX = min(DISPLAY_WIDTHS_PX.values())
#: No text of a figure is smaller than this where the page shows the figure narrowest, in CSS
#: points (1 pt = 4/3 px).
MIN_DISPLAYED_PT = 9.0
#: The figure font size (in the figure's own points) that :func:`show` raises smaller text to.
MIN_TEXT_PT = 14.5
#: The width the ``height`` arguments of :func:`figure` were designed for (the book's figures
#: were 7 in wide); a height is scaled to the display width, 15 % taller for the larger text.
DESIGN_WIDTH = 7.0
HEIGHT_SCALE = DISPLAY_WIDTH / DESIGN_WIDTH * 1.15
#: Default height of one row of axes at :data:`DESIGN_WIDTH`: a single panel, and a row of a figure
#: with several panels. Two panels side by side leave each half the width: at 9 pt on a phone,
#: stack them (``nrows=2``) unless they are small images.
ROW_HEIGHT = {1: 3.9, 2: 3.3}


def displayed_points(font_pt: float, display_px: float, figure_width_in: float = DISPLAY_WIDTH) -> float:
    """The size in CSS points a reader sees of ``font_pt`` text in a figure ``figure_width_in``
    inches wide shown ``display_px`` CSS px wide (1 CSS pt = 4/3 px, 1 in = 72 pt)."""
    return font_pt * (display_px * 0.75) / (figure_width_in * 72)


def figure(ncols: int = 1, nrows: int = 1, width: float | None = None, height: float | None = None,
           **subplots_kw):
    """A figure with ``nrows × ncols`` axes in the book's style; returns ``(fig, axes)``.

    The figure is always :data:`DISPLAY_WIDTH` inches wide (one display width for the whole book,
    so its text has the same size on the page as in every other figure). ``height`` is in inches
    of a figure :data:`DESIGN_WIDTH` wide, scaled by :data:`HEIGHT_SCALE`; when ``width`` is given
    too, the pair sets the aspect ratio before that 15 % stretch. Without a height, each row of
    axes gets :data:`ROW_HEIGHT`.
    """
    use_book_style()
    if height is None:
        height = ROW_HEIGHT[1 if ncols * nrows == 1 else 2] * nrows
    elif width is not None:
        height = height * DESIGN_WIDTH / width
    subplots_kw.setdefault("layout", "constrained")
    return plt.subplots(nrows, ncols, figsize=(DISPLAY_WIDTH, height * HEIGHT_SCALE), **subplots_kw)


def legend_below(fig, axes=None, ncols: int = 1, **legend_kw):
    """One legend for ``axes`` (default: every axes of ``fig``) under the figure, outside the
    data: at the book's text size a legend inside a panel covers a third of it. Entries with the
    same label are shown once."""
    axes = fig.axes if axes is None else (axes if isinstance(axes, (list, tuple)) else [axes])
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    return fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=ncols,
                      **legend_kw)


def raise_small_text(fig) -> int:
    """Raise every text of ``fig`` smaller than :data:`MIN_TEXT_PT` to it; returns how many."""
    from matplotlib.text import Text

    raised = 0
    for text in fig.findobj(Text):
        if text.get_text() and text.get_fontsize() < MIN_TEXT_PT:
            text.set_fontsize(MIN_TEXT_PT)
            raised += 1
    return raised


_MATH = re.compile(r"(\$[^$]*\$)")


def _visible_length(text: str) -> float:
    """Rough printed length of ``text`` in characters (mathtext counts by its visible glyphs)."""
    length = 0.0
    for part in _MATH.split(text):
        if part.startswith("$") and part.endswith("$") and len(part) > 1:
            body = re.sub(r"\\[A-Za-z]+", "x", part[1:-1])        # \sqrt, \alpha: about one glyph
            length += len(re.sub(r"[{}_^ ]", "", body)) * 0.9
        else:
            length += len(part)
    return length


def _wrap(text: str, max_chars: float) -> str:
    """``text`` broken at spaces (never inside ``$…$``) into lines of at most ``max_chars``."""
    if "\n" in text or _visible_length(text) <= max_chars:
        return text
    words, inside = [], False
    for token in text.split(" "):               # re-join the words of a $…$ span
        if inside:
            words[-1] += " " + token
        else:
            words.append(token)
        if token.count("$") % 2:
            inside = not inside
    lines, line = [], ""
    for word in words:
        candidate = f"{line} {word}" if line else word
        if line and _visible_length(candidate) > max_chars:
            lines.append(line)
            line = word
        else:
            line = candidate
    lines.append(line)
    return "\n".join(lines)


#: Average glyph width of the book's sans-serif font, as a fraction of the font size.
_GLYPH_WIDTH = 0.6


def fit_titles(fig) -> None:
    """Wrap the suptitle and every axes title to the width they have (no drawing needed)."""
    width_pt = fig.get_figwidth() * 72
    suptitle = fig._suptitle
    if suptitle is not None and suptitle.get_text():
        size = suptitle.get_fontsize()
        suptitle.set_text(_wrap(suptitle.get_text(), 0.95 * width_pt / (_GLYPH_WIDTH * size)))
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        share = 1.0
        if spec is not None:
            gridspec = spec.get_gridspec()
            ratios = gridspec.get_width_ratios() or [1] * gridspec.ncols
            share = sum(ratios[spec.colspan.start:spec.colspan.stop]) / sum(ratios)
        available = 0.9 * width_pt * share
        for title in (ax.title, ax._left_title, ax._right_title):
            if title.get_text():
                title.set_text(_wrap(title.get_text(), available / (_GLYPH_WIDTH * title.get_fontsize())))


def clipped_texts(fig) -> list[str]:
    """Titles, axis labels and legends that reach outside the figure, as :func:`png_bytes` drew it.

    :func:`png_bytes` measures them right after its drawing, at the dpi it drew at (axis labels
    are placed in pixels of that drawing), and keeps the list on the figure.
    """
    return list(getattr(fig, "_attnref_clipped", []))


def _measure_clipped_texts(fig) -> list[str]:
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    artists = [fig._suptitle, fig._supxlabel, fig._supylabel]
    for ax in fig.axes:
        artists += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label,
                    ax.get_legend()]
    artists += list(fig.legends)
    clipped = []
    for artist in artists:
        if artist is None or not artist.get_visible():
            continue
        if hasattr(artist, "get_text") and not artist.get_text():
            continue
        extent = artist.get_window_extent(renderer)
        if (extent.x0 < box.x0 - 1 or extent.x1 > box.x1 + 1
                or extent.y0 < box.y0 - 1 or extent.y1 > box.y1 + 1):
            label = artist.get_text() if hasattr(artist, "get_text") else type(artist).__name__
            clipped.append(label)
    return clipped


#: Colours kept per figure: line plots and heatmaps of the book look the same with 256, at a
#: third of the bytes of a full-colour PNG.
PNG_COLOURS = 256


def png_bytes(fig) -> tuple[bytes, int, int]:
    """``fig`` as a 2×-resolution, 256-colour PNG; returns the bytes and the display width and height.

    The figure is drawn once at twice its dpi on a white background (the pixels the notebook's
    "retina" format would produce; ``savefig`` would draw it twice, once for the constrained
    layout and once for the pixels), then its palette is reduced to :data:`PNG_COLOURS` colours
    without dithering (sharp lines, small files).
    """
    from io import BytesIO

    import numpy as np
    from PIL import Image

    dpi, facecolor = fig.dpi, fig.get_facecolor()
    try:
        fig.dpi = 2 * dpi
        fig.set_facecolor("white")
        fig.canvas.draw()                   # the layout engine runs inside this one draw
        rgba = np.asarray(fig.canvas.buffer_rgba())
        fig._attnref_clipped = _measure_clipped_texts(fig)
    finally:
        fig.dpi = dpi
        fig.set_facecolor(facecolor)
    image = Image.fromarray(rgba, "RGBA").convert("RGB")
    reduced = image.quantize(colors=PNG_COLOURS, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE)
    out = BytesIO()
    reduced.save(out, format="png", compress_level=7)      # 9 is 7x slower for 8 % fewer bytes
    return out.getvalue(), image.width // 2, image.height // 2


#: Environment variable: ``off`` makes :func:`show` skip drawing (see the module docstring).
FIGURES_VARIABLE = "ATTNREF_FIGURES"


def show(fig) -> None:
    """Display ``fig`` in the notebook as a compact PNG (:func:`png_bytes`) and close it.

    Text below :data:`MIN_TEXT_PT` is raised to it and long titles are wrapped first
    (:func:`raise_small_text`, :func:`fit_titles`). The PNG is published with its display
    width only (at most :data:`DISPLAY_WIDTH` inches at ``figure.dpi``) and no height: the page
    scales it with its aspect ratio kept. A title, label or legend outside the figure raises a
    warning. The plain-text part of the output is matplotlib's usual ``<Figure size … with N Axes>``.
    With ``ATTNREF_FIGURES=off`` only that plain-text part is shown and nothing is drawn.
    """
    try:
        from IPython.display import display
    except ImportError:  # outside IPython: nothing to show
        plt.close(fig)
        return
    if os.environ.get(FIGURES_VARIABLE, "on") == "off":
        display({"text/plain": repr(fig)}, raw=True)
        plt.close(fig)
        return
    import base64

    raise_small_text(fig)
    fit_titles(fig)
    data, width, _ = png_bytes(fig)
    clipped = clipped_texts(fig)
    if clipped:
        warnings.warn(f"figure text outside the figure (shorten it or give it room): {clipped}", stacklevel=2)
    bundle = {"image/png": base64.b64encode(data).decode("ascii"), "text/plain": repr(fig)}
    width = min(width, round(DISPLAY_WIDTH * fig.dpi))
    display(bundle, raw=True, metadata={"image/png": {"width": width}})
    plt.close(fig)
