"""The book's figure output: a small, deterministic 2× PNG with the usual plain-text repr,
one display width, no fixed height, text ≥ 9 pt on the page at every width the book shows it
(a laptop and a 400 px phone screen), titles that fit."""

from __future__ import annotations

import io

from PIL import Image

from attnref.book import plotting


def test_png_bytes_is_a_small_palette_png_at_twice_the_display_size():
    fig, ax = plotting.figure()
    ax.plot([0, 1, 2], [0, 1, 4], "o-")
    data, width, height = plotting.png_bytes(fig)
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG" and image.mode == "P"          # palette image
    assert len(image.getcolors(maxcolors=plotting.PNG_COLOURS)) <= plotting.PNG_COLOURS
    assert (image.width // 2, image.height // 2) == (width, height)
    assert data == plotting.png_bytes(fig)[0]                    # deterministic bytes
    plotting.plt.close(fig)


def test_figure_background_is_white_for_dark_mode():
    fig, ax = plotting.figure()
    ax.plot([0, 1], [0, 1])
    data, _, _ = plotting.png_bytes(fig)
    corner = Image.open(io.BytesIO(data)).convert("RGB").getpixel((1, 1))
    assert corner == (255, 255, 255)
    plotting.plt.close(fig)


def _draws_during_show(monkeypatch, figures: str | None) -> tuple[int, str]:
    if figures is None:
        monkeypatch.delenv(plotting.FIGURES_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(plotting.FIGURES_VARIABLE, figures)
    fig, ax = plotting.figure()
    ax.plot([0, 1], [0, 1])
    draws = []
    fig.canvas.mpl_connect("draw_event", draws.append)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda bundle, **kwargs: shown.append((bundle, kwargs)))
    plotting.show(fig)
    assert not plotting.plt.fignum_exists(fig.number)            # closed either way
    ((bundle, kwargs),) = shown
    if "image/png" in bundle:                                    # a width for the page, never a height
        assert kwargs["metadata"] == {"image/png": {"width": 500}}
    return len(draws), bundle


def test_show_draws_the_figure_by_default(monkeypatch):
    draws, bundle = _draws_during_show(monkeypatch, None)
    assert draws == 1 and set(bundle) == {"image/png", "text/plain"}     # one draw, not savefig's two
    assert bundle["text/plain"].startswith("<Figure size 500x320.357 with 1 Axes>")


def test_show_with_figures_off_does_not_draw(monkeypatch):
    draws, bundle = _draws_during_show(monkeypatch, "off")
    assert draws == 0 and set(bundle) == {"text/plain"}
    assert bundle["text/plain"].startswith("<Figure size 500x320.357 with 1 Axes>")


def test_png_bytes_has_the_pixels_of_savefig_at_twice_the_dpi():
    fig, (left, right) = plotting.figure(ncols=2)
    left.plot([0, 1, 2], [1, 10, 100], label=r"$\sqrt{d_k}$")
    left.set_yscale("log")
    left.legend()
    # aspect="auto": a fixed-aspect image needs a second layout pass, which savefig's extra draw gives
    right.imshow([[0.0, 1.0], [0.5, 0.25]], aspect="auto")
    right.set_title("weights")
    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=2 * fig.dpi, facecolor="white")
    expected = Image.open(rendered).convert("RGB")
    data, _, _ = plotting.png_bytes(fig)
    assert Image.open(io.BytesIO(data)).convert("RGB").tobytes() == expected.quantize(
        colors=plotting.PNG_COLOURS, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE).convert("RGB").tobytes()
    plotting.plt.close(fig)


def test_every_figure_has_one_display_width_and_keeps_the_requested_aspect():
    scale = plotting.HEIGHT_SCALE
    for kwargs in ({}, {"ncols": 2}, {"ncols": 3, "width": 10, "height": 3.4}, {"nrows": 2, "height": 4.8}):
        fig, _ = plotting.figure(**kwargs)
        assert fig.get_figwidth() == plotting.DISPLAY_WIDTH
        if "width" in kwargs:
            assert abs(fig.get_figheight() - 3.4 * 7 / 10 * scale) < 1e-12
        elif "height" in kwargs:
            assert abs(fig.get_figheight() - 4.8 * scale) < 1e-12
        plotting.plt.close(fig)


def _text_sizes_after_show(fig) -> dict[str, float]:
    """Every visible text's font size as :func:`plotting.show` draws ``fig`` (ticks included)."""
    from matplotlib.text import Text

    plotting.raise_small_text(fig)
    plotting.fit_titles(fig)
    plotting.png_bytes(fig)                       # draws: the tick labels exist from here on
    return {f"{t.get_text()!r}": t.get_fontsize()
            for t in fig.findobj(Text) if t.get_text() and t.get_visible()}


def test_displayed_points_is_the_css_size_of_a_figure_font():
    # A 5 in figure is 360 figure points wide; shown 480 CSS px = 360 CSS pt wide: 1 : 1.
    assert plotting.displayed_points(10, 480, 5.0) == 10
    # The book's old 7 in figures with 9 pt text, in the 352 px column of a phone: 4.7 pt (6.3 px).
    assert abs(plotting.displayed_points(9, 352, 7.0) - 4.71) < 0.01


def test_no_text_below_nine_points_at_any_display_width():
    """Every text of a busy figure (ticks, labels, legends, an annotation asked at 8 pt) is at
    least 9 CSS pt where the book shows it: at its own width on a laptop and in the column of a
    360 px phone screen. The old style (7 in, 9 pt text) gives 4.7 pt on the phone; 12.5 pt text
    in 5 in gave 7.8 pt at 360 px."""
    fig, (left, right) = plotting.figure(ncols=2)
    left.loglog([1e-3, 1, 1e3], [1e-6, 1, 1e6], "o-", label=r"scores $\|S(\alpha X)\|_F$")
    left.set_xlabel(r"input scale $\alpha$")
    left.legend(fontsize=8)
    right.plot([0, 1], [0, 1])
    right.text(0.1, 0.5, "annotation", fontsize=8)
    right.set_title("a title")
    fig.suptitle("a figure title")
    sizes = _text_sizes_after_show(fig)
    plotting.plt.close(fig)
    assert "'annotation'" in sizes and any("10^{" in key for key in sizes), sizes     # ticks seen
    for where, width_px in plotting.DISPLAY_WIDTHS_PX.items():
        shown = {key: plotting.displayed_points(size, width_px) for key, size in sizes.items()}
        smallest = min(shown, key=shown.get)
        assert shown[smallest] >= plotting.MIN_DISPLAYED_PT, (where, smallest, shown[smallest])
    assert plotting.NARROWEST_DISPLAY_PX <= 300, "the narrowest display is a 360 px phone's column"
    # published at the laptop's display width: the page never enlarges a figure
    assert plotting.DISPLAY_WIDTH * plotting.STYLE["figure.dpi"] == plotting.DISPLAY_WIDTHS_PX["laptop (1400 px)"]


def test_long_titles_are_wrapped_and_nothing_is_clipped():
    fig, axes = plotting.figure(ncols=2, height=4)
    fig.suptitle("Q4: slopes 1, 2, 3 for projections, scores, softmax-free output; the softmax output "
                 "has none at all, whatever the width")
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="a legend entry")
        ax.legend()
        ax.set_title(r"H7 · rank of the centred log-weights above $\sqrt{d_k}$ per head")
        ax.set_xlabel("sequence length $n$")
    plotting.fit_titles(fig)
    assert "\n" in fig._suptitle.get_text() and all("\n" in ax.get_title() for ax in axes)
    assert "$\\sqrt{d_k}$" in axes[0].get_title()                # math never split
    plotting.png_bytes(fig)
    assert plotting.clipped_texts(fig) == []
    plotting.plt.close(fig)


def test_clipped_text_is_reported():
    fig, ax = plotting.figure()
    ax.plot([0, 1], [0, 1])
    ax.set_title("x" * 400)                                     # one word: cannot be wrapped
    plotting.png_bytes(fig)
    assert plotting.clipped_texts(fig) == ["x" * 400]
    plotting.plt.close(fig)
