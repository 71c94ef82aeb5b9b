"""The book's figure output: a small, deterministic 2× PNG with the usual plain-text repr."""

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
    monkeypatch.setattr("IPython.display.display", lambda bundle, **kwargs: shown.append(bundle))
    plotting.show(fig)
    assert not plotting.plt.fignum_exists(fig.number)            # closed either way
    (bundle,) = shown
    return len(draws), bundle


def test_show_draws_the_figure_by_default(monkeypatch):
    draws, bundle = _draws_during_show(monkeypatch, None)
    assert draws == 1 and set(bundle) == {"image/png", "text/plain"}     # one draw, not savefig's two
    assert bundle["text/plain"].startswith("<Figure size 640x360 with 1 Axes>")


def test_show_with_figures_off_does_not_draw(monkeypatch):
    draws, bundle = _draws_during_show(monkeypatch, "off")
    assert draws == 0 and set(bundle) == {"text/plain"}
    assert bundle["text/plain"].startswith("<Figure size 640x360 with 1 Axes>")


def test_png_bytes_has_the_pixels_of_savefig_at_twice_the_dpi():
    fig, (left, right) = plotting.figure(ncols=2)
    left.plot([0, 1, 2], [1, 10, 100], label=r"$\sqrt{d_k}$")
    left.set_yscale("log")
    left.legend()
    right.imshow([[0.0, 1.0], [0.5, 0.25]])
    right.set_title("weights")
    rendered = io.BytesIO()
    fig.savefig(rendered, format="png", dpi=2 * fig.dpi, facecolor="white")
    expected = Image.open(rendered).convert("RGB")
    data, _, _ = plotting.png_bytes(fig)
    assert Image.open(io.BytesIO(data)).convert("RGB").tobytes() == expected.quantize(
        colors=plotting.PNG_COLOURS, method=Image.Quantize.MAXCOVERAGE, dither=Image.Dither.NONE).convert("RGB").tobytes()
    plotting.plt.close(fig)
