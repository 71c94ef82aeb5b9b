"""One plotting style for every figure of the book.

Figures are PNG at 2× resolution on a solid white background (readable in the site's dark
mode too), with a colour-blind-safe palette. Use :func:`figure` to make one and :func:`show`
to display and close it, so no cell ends with an expression whose repr holds an address.

With ``ATTNREF_FIGURES=off`` in the environment, :func:`show` closes figures without drawing
them: the seed re-runs of ``make test`` (assertions only) use it, since drawing is most of a
figure's cost and the stored figures are those of the default seed.
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")  # no GUI; the inline backend still displays figures in a notebook

import matplotlib.pyplot as plt  # noqa: E402

#: Okabe–Ito colour-blind-safe palette.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]

STYLE = {
    "figure.figsize": (6.4, 3.6),
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
    "font.size": 10,
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


def figure(ncols: int = 1, nrows: int = 1, width: float | None = None, height: float | None = None,
           **subplots_kw):
    """A figure with ``nrows × ncols`` axes in the book's style; returns ``(fig, axes)``."""
    use_book_style()
    default_w, default_h = STYLE["figure.figsize"]
    size = (width or default_w * min(ncols, 2) / (1 if ncols == 1 else 1.25),
            height or default_h * nrows)
    subplots_kw.setdefault("layout", "constrained")
    return plt.subplots(nrows, ncols, figsize=size, **subplots_kw)


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

    The plain-text part of the output is matplotlib's usual ``<Figure size … with N Axes>``.
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

    data, width, height = png_bytes(fig)
    bundle = {"image/png": base64.b64encode(data).decode("ascii"), "text/plain": repr(fig)}
    display(bundle, raw=True, metadata={"image/png": {"width": width, "height": height}})
    plt.close(fig)
