"""The book's figure output: a small, deterministic 2× PNG with the usual plain-text repr."""

from __future__ import annotations

import io

from PIL import Image

from attnref import plotting


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
