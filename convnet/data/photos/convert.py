"""One source image to the JPEG a batch stores.

As the original's ``make-data.py``: the image is resized so that its short side is
``size`` (the other side rounded), then the centre ``size`` x ``size`` square is cut
out, or, with ``keep_borders``, the whole resized image is kept (the original's
``CROP_TO_SQUARE = False``, after Howard, arXiv:1312.5402); it is written as a
baseline JPEG of quality 95 (the original's ``JPEG_QUALITY``).

Resizing uses Pillow's Lanczos filter; a large JPEG is first decoded at a reduced
scale (``draft``, libjpeg's DCT scaling), and a large image of any format reduced by
a whole factor (``reducing_gap``), but never below twice the target size, so the
Lanczos step still has at least two source pixels per output pixel.  The EXIF
orientation is applied (a phone photo comes out upright).  Every mode becomes RGB:
greyscale and CMYK by Pillow's conversions, palette images through their palette,
and transparency (RGBA, LA, a palette with a transparent colour) is composited onto
white, as a viewer shows it.  Animated images give their first frame.

*Bombs.*  A small file may declare a huge image (a 194 KB PNG of 9400 x 9400
16-bit pixels), so the decoded size is bounded before anything is decoded:
at most :func:`max_decoded_bytes`, what Pillow's decompression-bomb limit
(``Image.MAX_IMAGE_PIXELS``, 89 megapixels) allows an 8-bit RGB image, counted
by each mode's own bytes per pixel (16-bit greyscale 2, 32-bit 4).  Deep
greyscale is scaled to 8 bits a band of rows at a time, so no whole-image copy
wider than 8 bits is made.
"""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
from PIL import Image, ImageMode, ImageOps

from convnet.data.options import DEFAULT_QUALITY


#: Deep greyscale is scaled to 8 bits in bands of about this many pixels.
BAND_PIXELS = 2 ** 20
DEEP_GREY_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N", "F")


class UnreadableImage(Exception):
    """A source image that cannot be decoded; the message says why, for the log."""


def square_jpeg(data: bytes, size: int, keep_borders: bool = False,
                quality: int = DEFAULT_QUALITY) -> bytes:
    """``data`` (any image file Pillow reads) as a JPEG of short side ``size``."""
    image = upright_image(data, size)
    width, height = image.size
    scale = size / min(width, height)
    new_size = (max(size, round(width * scale)), max(size, round(height * scale)))
    if keep_borders:
        box = None
    else:
        left, top = (new_size[0] - size) // 2, (new_size[1] - size) // 2
        box = tuple(edge / scale for edge in (left, top, left + size, top + size))
        new_size = (size, size)
    # reducing_gap: images of any format more than twice the size are first reduced by
    # whole factors (averaging boxes), as draft does for JPEGs, then Lanczos-filtered
    resized = image.resize(new_size, Image.Resampling.LANCZOS, box=box, reducing_gap=2.0)
    # greyscale becomes RGB only now, at its stored size (a whole-size RGB copy of a
    # large grey image would take 4 bytes a pixel; the JPEG is the same)
    resized = _colours(resized, lambda small: small.convert("RGB"))
    out = io.BytesIO()
    resized.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def upright_image(source: bytes | str | os.PathLike, size: int) -> Image.Image:
    """An image file (its bytes, or its path) as 8-bit RGB or greyscale (``L``), upright
    and with transparency on white: the picture its owner sees, from which every
    reader of users' pictures starts (make-data, the photo folders, ``--predict``), so
    that a net sees the same pixels in training and in use.  JPEGs are decoded at a
    reduced scale where that keeps twice ``size``."""
    return _colours(_open(source, size), _rgb_or_grey)


def max_decoded_bytes() -> int:
    """The most bytes an image may take decoded: Pillow's pixel limit at 3 bytes a pixel."""
    return 3 * Image.MAX_IMAGE_PIXELS


def decoded_bytes(mode: str, width: int, height: int) -> int:
    """What ``width`` x ``height`` pixels of ``mode`` take decoded, at the mode's own
    bytes per pixel (bands x bytes per sample)."""
    try:
        described = ImageMode.getmode(mode)
        per_pixel = len(described.bands) * int(described.typestr[2:])
    except (KeyError, ValueError):  # a mode Pillow does not describe: its widest
        per_pixel = 4
    return width * height * per_pixel


def _open(source: bytes | str | os.PathLike, size: int) -> Image.Image:
    """The decoded image, at a reduced JPEG scale where that keeps 2x ``size``; one
    larger than :func:`max_decoded_bytes` is refused before it is decoded."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            if (len(source) if isinstance(source, bytes) else os.path.getsize(source)) == 0:
                raise UnreadableImage("an empty file (0 bytes)")
            image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else source)
            needed = decoded_bytes(image.mode, *image.size)
            if needed > max_decoded_bytes():
                raise UnreadableImage(
                    f"a decompression bomb? {image.size[0]} x {image.size[1]} {image.mode} "
                    f"pixels take {needed / 2 ** 20:.0f} MiB decoded, more than the "
                    f"{max_decoded_bytes() / 2 ** 20:.0f} MiB allowed: not decoded")
            if image.format == "JPEG" and image.mode in ("RGB", "L"):
                width, height = image.size
                scale = 2 * size / min(width, height)
                if scale < 1:
                    image.draft(image.mode, (int(width * scale), int(height * scale)))
            image.load()
            return ImageOps.exif_transpose(image)
    except UnreadableImage:
        raise
    except Exception as error:  # Pillow raises many types on a bad file
        raise UnreadableImage(_reason(error)) from None


def _reason(error: Exception) -> str:
    """``error`` in one line for the log; a file Pillow cannot identify in plain words
    (its own message names the in-memory buffer's address, different at every run)."""
    if isinstance(error, Image.UnidentifiedImageError):
        return "not an image format Pillow reads"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _colours(image: Image.Image, convert) -> Image.Image:
    """``convert(image)``, a mode Pillow cannot convert (LAB, HSV, ...) as an
    :class:`UnreadableImage`."""
    if image.mode == "RGB":
        return image
    try:
        return convert(image)
    except Exception as error:
        raise UnreadableImage(f"cannot convert its {image.mode} colours to RGB: "
                              f"{_reason(error)}") from None


def _rgb_or_grey(image: Image.Image) -> Image.Image:
    """``image`` as 8-bit RGB, or as 8-bit greyscale (``L``) when it is grey."""
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("LA", "La", "RGBa", "PA"):
        image = image.convert("RGBA")
    if image.mode == "RGBA":
        white = Image.new("RGB", image.size, (255, 255, 255))
        white.paste(image, mask=image.getchannel("A"))
        return white
    if image.mode in DEEP_GREY_MODES:
        return eight_bit_grey(image)
    return image if image.mode in ("RGB", "L") else image.convert("RGB")


def eight_bit_grey(image: Image.Image) -> Image.Image:
    """Deep greyscale (16-bit PNG or TIFF, 32-bit integer or float) as 8 bits, scaled
    by its own range (0-65535 where any value is above 255, else 0-255), converted a
    band of rows at a time: the only whole-image copy is the 8-bit result."""
    width, height = image.size
    top = 65535.0 if image.getextrema()[1] > 255 else 255.0
    out = np.empty((height, width), np.uint8)
    rows = max(1, BAND_PIXELS // max(1, width))
    for first in range(0, height, rows):
        last = min(height, first + rows)
        band = np.asarray(image.crop((0, first, width, last)), dtype=np.float64)
        out[first:last] = np.clip(band * (255.0 / top), 0, 255)
    return Image.fromarray(out)


def decode_rgb(jpeg: bytes) -> np.ndarray:
    """A stored JPEG as an (height, width, 3) uint8 array."""
    with Image.open(io.BytesIO(jpeg)) as image:
        return np.asarray(image.convert("RGB"))
