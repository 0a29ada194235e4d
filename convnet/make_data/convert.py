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
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps

from convnet.make_data.layout import DEFAULT_QUALITY

class UnreadableImage(Exception):
    """A source image that cannot be decoded; the message says why, for the log."""


def square_jpeg(data: bytes, size: int, keep_borders: bool = False,
                quality: int = DEFAULT_QUALITY) -> bytes:
    """``data`` (any image file Pillow reads) as a JPEG of short side ``size``."""
    image = _open(data, size)
    try:
        image = _rgb(image)
    except Exception as error:  # a mode Pillow cannot turn into RGB (LAB, HSV, ...)
        raise UnreadableImage(f"cannot convert its {image.mode} colours to RGB: "
                              f"{_reason(error)}") from None
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
    out = io.BytesIO()
    resized.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def _open(data: bytes, size: int) -> Image.Image:
    """The decoded image, at a reduced JPEG scale where that keeps 2x ``size``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if image.format == "JPEG" and image.mode in ("RGB", "L"):
                width, height = image.size
                scale = 2 * size / min(width, height)
                if scale < 1:
                    image.draft(image.mode, (int(width * scale), int(height * scale)))
            image.load()
            return ImageOps.exif_transpose(image)
    except Exception as error:  # Pillow raises many types on a bad file
        raise UnreadableImage(_reason(error)) from None


def _reason(error: Exception) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _rgb(image: Image.Image) -> Image.Image:
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    if image.mode in ("LA", "La", "RGBa", "PA"):
        image = image.convert("RGBA")
    if image.mode == "RGBA":
        white = Image.new("RGB", image.size, (255, 255, 255))
        white.paste(image, mask=image.getchannel("A"))
        return white
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        # deep greyscale: 16-bit PNG or TIFF, scaled to 8 bits by its own range
        pixels = np.asarray(image, dtype=np.float64)
        top = 65535.0 if pixels.max() > 255 else 255.0
        image = Image.fromarray(np.clip(pixels * (255.0 / top), 0, 255).astype(np.uint8))
    return image.convert("RGB") if image.mode != "RGB" else image


def decode_rgb(jpeg: bytes) -> np.ndarray:
    """A stored JPEG as an (height, width, 3) uint8 array."""
    with Image.open(io.BytesIO(jpeg)) as image:
        return np.asarray(image.convert("RGB"))
