"""One image to the stored JPEG: size, crop, colour modes, bad files."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from convnet.data.photos.convert import UnreadableImage, decode_rgb, square_jpeg
from tests.support.image_trees import image_bytes, photo


def _png(array: np.ndarray, mode: str | None = None) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, format="PNG")
    return out.getvalue()


def test_the_short_side_becomes_the_size_and_the_centre_square_is_kept():
    # a 60 x 30 picture: left third red, middle green, right third blue
    array = np.zeros((30, 60, 3), np.uint8)
    array[:, :20, 0] = array[:, 20:40, 1] = array[:, 40:, 2] = 255
    stored = decode_rgb(square_jpeg(_png(array), 10))
    assert stored.shape == (10, 10, 3)
    centre = stored[:, 3:7].reshape(-1, 3).mean(axis=0)
    assert centre[1] > 200 and centre[0] < 40 and centre[2] < 40  # the green middle


@pytest.mark.parametrize("width, height, expected", [(40, 30, (16, 21)), (30, 45, (24, 16)),
                                                     (8, 8, (16, 16))])
def test_keep_borders_keeps_the_whole_image_at_its_short_side(width, height, expected):
    stored = decode_rgb(square_jpeg(image_bytes(width, height, 1), 16, keep_borders=True))
    assert stored.shape[:2] == expected


def test_a_transparent_image_is_composited_onto_white():
    rgba = np.zeros((20, 20, 4), np.uint8)
    rgba[..., 0] = 255  # red, but fully transparent on the left half
    rgba[:, 10:, 3] = 255
    stored = decode_rgb(square_jpeg(_png(rgba, "RGBA"), 20)).astype(int)
    assert np.abs(stored[:, :8] - 255).max() < 12
    assert np.abs(stored[:, 12:] - [255, 0, 0]).max() < 12


@pytest.mark.parametrize("mode", ["L", "CMYK", "P", "LA", "I;16"])
def test_every_mode_becomes_rgb_close_to_the_picture(mode):
    source = photo(24, 24, 3)
    image = Image.fromarray(source)
    expected = np.asarray(image.convert("L").convert("RGB")) if mode in ("L", "LA", "I;16") \
        else source
    if mode == "I;16":
        data = _png((np.asarray(image.convert("L")).astype(np.uint16) * 257))
    else:
        out = io.BytesIO()
        (image.quantize(64) if mode == "P" else image.convert(mode)).save(
            out, format="JPEG" if mode == "CMYK" else "PNG")
        data = out.getvalue()
    stored = decode_rgb(square_jpeg(data, 24)).astype(int)
    assert np.abs(stored - expected).mean() < 8, mode


def test_a_large_jpeg_decoded_at_a_reduced_scale_looks_like_the_full_decode():
    big = image_bytes(800, 600, 4)
    reduced = decode_rgb(square_jpeg(big, 32)).astype(int)
    full = Image.open(io.BytesIO(big)).convert("RGB")
    full = full.resize((43, 32), Image.Resampling.LANCZOS).crop((5, 0, 37, 32))
    assert np.abs(reduced - np.asarray(full).astype(int)).mean() < 3


def test_the_exif_orientation_is_applied():
    out = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to show
    Image.fromarray(photo(40, 20, 5)).save(out, format="JPEG", exif=exif)
    assert decode_rgb(square_jpeg(out.getvalue(), 20, keep_borders=True)).shape[:2] == (40, 20)


@pytest.mark.parametrize("data", [b"", b"not an image at all", image_bytes(40, 40, 6)[:300]])
def test_an_unreadable_file_raises_with_a_reason(data):
    with pytest.raises(UnreadableImage) as error:
        square_jpeg(data, 16)
    assert str(error.value)


@pytest.mark.parametrize("data, reason", [(b"", "an empty file (0 bytes)"),
                                          (b"not an image at all", "not an image format")])
def test_an_empty_or_unknown_file_says_so_in_words_the_same_each_run(data, reason):
    """Not Pillow's "cannot identify image file <_io.BytesIO object at 0x7f...>": the
    log names the file, the reason must be plain and not change between runs."""
    with pytest.raises(UnreadableImage) as error:
        square_jpeg(data, 16)
    assert str(error.value).startswith(reason) and "0x" not in str(error.value)


def test_an_image_declaring_absurd_dimensions_is_refused(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(UnreadableImage, match="DecompressionBomb"):
        square_jpeg(image_bytes(60, 60, 7), 16)


def test_a_mode_without_an_rgb_conversion_is_an_unreadable_image(monkeypatch):
    grey = image_bytes(20, 20, 8, "L", "PNG")

    def no_conversion(self, *args, **kwargs):
        raise ValueError("conversion not supported")

    monkeypatch.setattr(Image.Image, "convert", no_conversion)
    with pytest.raises(UnreadableImage, match="cannot convert its L colours"):
        square_jpeg(grey, 16)


def test_a_large_png_reduced_first_looks_like_a_plain_lanczos_resize():
    big = photo(900, 700, 9)
    reduced = decode_rgb(square_jpeg(_png(big), 32)).astype(int)
    plain = Image.fromarray(big).resize((41, 32), Image.Resampling.LANCZOS).crop((4, 0, 36, 32))
    assert np.abs(reduced - np.asarray(plain).astype(int)).mean() < 3
