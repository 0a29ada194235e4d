"""Image files as a provider's raw test pixels: finding them, decoding, resizing.

Decoding goes through Pillow (installed with matplotlib; the ``plot`` extra;
:func:`convnet.optional.require_pillow`), the
one decoder the engine uses for image files.  An image becomes a raw case the way
a stored data set was made: read as make-data reads a photo
(:func:`convnet.data.photos.convert.upright_image`: upright by its EXIF orientation,
transparency on white, 16-bit grey scaled by its range), converted to grey or RGB as
the provider's channel count says, its short side resized to the stored size S
(bicubic, antialiased), the centre S x S square kept, and its 0..255 values scaled to the provider's pixel
units (``pixel_max``: 255 for CIFAR-style batches, 1 for digits).  The provider
then does what it does to any test case (mean, centre crop or views).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from convnet.data.photos.sources import IMAGE_EXTENSIONS
from convnet.errors import DataError
from convnet.filekind import not_a_regular_file

def image_files(paths) -> list[tuple[Path, bool]]:
    """(file, found in a folder) of the files named, a folder standing for its image
    files as make-data takes them from a class folder (named like an image, hidden
    ones left out; sorted by name, not descending into sub-folders).  A missing path
    or a folder without images is an error: the user named something that is not
    there."""
    files: list[tuple[Path, bool]] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if not p.name.startswith(".")
                           and p.name.lower().endswith(IMAGE_EXTENSIONS) and not p.is_dir())
            if not found:
                raise DataError(f"{path}: the folder holds no image files "
                                f"({', '.join(IMAGE_EXTENSIONS)})")
            files.extend((p, True) for p in found)
        else:
            problem = not_a_regular_file(path)
            if problem is not None:
                raise DataError(f"{path} {problem}")
            files.append((path, False))
    return files


def decode(path: Path, channels: int, size: int, pixel_max: float, image_module) -> np.ndarray:
    """One image file as raw pixels (channels, size, size) float32 in provider units;
    a DataError naming the file if it cannot be read as an image (a FIFO, which
    would block, or a link loop found in a folder among them)."""
    problem = not_a_regular_file(path)
    if problem is not None:
        raise DataError(f"{path} {problem}")
    # imported here: it needs Pillow, which image_module says is there
    from convnet.data.photos.convert import UnreadableImage, upright_image
    try:
        picture = upright_image(path, size).convert("L" if channels == 1 else "RGB")
    except UnreadableImage as error:
        raise DataError(f"{path}: cannot read it as an image ({error})") from None
    width, height = picture.size
    scale = size / min(width, height)
    new = (max(size, round(width * scale)), max(size, round(height * scale)))
    picture = picture.resize(new, image_module.Resampling.BICUBIC)
    left, top = (new[0] - size) // 2, (new[1] - size) // 2
    pixels = np.asarray(picture.crop((left, top, left + size, top + size)), dtype=np.float32)
    pixels = pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)
    return pixels * np.float32(pixel_max / 255.0)


def decode_batch(files: list[tuple[Path, bool]], provider, image_module,
                 skipped) -> tuple[np.ndarray, list[Path]]:
    """Raw pixels (N, C, S, S) of the files that decode, and those files.  A file
    named on the command line that does not decode stops the run (its DataError); one
    found in a folder is passed to ``skipped(error)`` and left out: one broken file
    among thousands of photos should not cost the rest."""
    channels, size = provider.image_shape[0], provider.image_shape[-1]
    good, images = [], []
    for path, in_folder in files:
        try:
            images.append(decode(path, channels, size, provider.pixel_max, image_module))
        except DataError as error:
            if not in_folder:
                raise
            skipped(error)
            continue
        good.append(path)
    raw = np.stack(images) if images else np.empty((0, channels, size, size), np.float32)
    return raw, good
