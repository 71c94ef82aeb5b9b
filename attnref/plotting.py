"""One plotting style for every figure of the book.

Figures are PNG at 2× resolution on a solid white background (readable in the site's dark
mode too), with a colour-blind-safe palette. Use :func:`figure` to make one and :func:`show`
to display and close it, so no cell ends with an expression whose repr holds an address.
"""

from __future__ import annotations

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


def show(fig) -> None:
    """Display ``fig`` in the notebook and close it (so it is shown exactly once)."""
    try:
        from IPython.display import display
    except ImportError:  # outside IPython: nothing to show
        plt.close(fig)
        return
    display(fig)
    plt.close(fig)
