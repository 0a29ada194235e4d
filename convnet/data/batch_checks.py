"""What a raw batch must be before anything is computed from it: real, finite pixels and
one class index per image.

Batch files are untrusted input, and a bad value read here would otherwise surface
far from its cause: a NaN pixel is carried by the per-pixel mean into every batch,
and a label out of range fails inside a cost layer on a device.  Each check names the
batch's file and, where there is one, the first bad case.
"""

from __future__ import annotations

import numpy as np

from convnet.errors import DataError


def check_finite(images: np.ndarray, source: str) -> None:
    """Refuse NaN or inf pixels where they are read: once the per-pixel training mean
    is subtracted, one of them would be in every batch, and the batch trained first
    would be blamed for it."""
    if not np.issubdtype(images.dtype, np.floating):
        return  # integer pixels are always finite
    finite = np.isfinite(images.reshape(len(images), -1)).all(axis=1)
    if not finite.all():
        raise DataError(f"{source}: pixel data holds NaN or inf values (first in case "
                        f"{int(np.argmin(finite))})")



def check_pixel_range(images: np.ndarray, pixel_max: float | None, source: str) -> None:
    """Refuse pixels from elsewhere (a photo's, a notebook's array) that are not in the
    data's units, 0..``pixel_max``: 0..255 pixels given to a net of 0..1 digits, or
    pixels already centred, would be classified without a word, and wrongly.  A margin
    of one 8-bit step allows for rounding; ``pixel_max`` None (not pictures) checks
    nothing."""
    if pixel_max is None or images.size == 0:
        return
    low, high = float(images.min()), float(images.max())
    margin = pixel_max / 255
    if low < -margin or high > pixel_max + margin:
        raise DataError(f"{source}: pixels run from {low:g} to {high:g}, but this data's "
                        f"are 0..{pixel_max:g}: give them in its units")


def checked_batch(images: np.ndarray, labels, source: str, num_classes: int) -> np.ndarray:
    """Check a batch of ``source`` (its file, for the errors) as a provider read it;
    returns its labels as one flat array."""
    if not (np.issubdtype(images.dtype, np.number) and np.isrealobj(images)):
        raise DataError(f"{source}: pixel data is {images.dtype}, not real numbers")
    if len(images) == 0:  # else refused far away, as a minibatch of no case
        raise DataError(f"{source}: the batch holds no images")
    check_finite(images, source)
    try:
        labels = np.asarray(labels).reshape(-1)
    except (ValueError, TypeError):  # ragged lists: "setting an array element with a sequence"
        raise DataError(f"{source}: labels should be one class index per image, found "
                        "a ragged list") from None
    if len(labels) != len(images):
        raise DataError(f"{source}: {len(images)} images but {len(labels)} labels")
    if not np.issubdtype(labels.dtype, np.number):
        raise DataError(f"{source}: labels are {labels.dtype}, not class indices")
    bad = labels[(labels != np.round(labels)) | (labels < 0) | (labels >= num_classes)]
    if bad.size:
        raise DataError(f"{source}: label {bad[0]} is not a class index in "
                        f"0..{num_classes - 1} ({num_classes} classes)")
    return labels


def cases_to_keep(total: int, bad: list[tuple[int, str, str]], skip: bool, source: str,
                  what: str) -> np.ndarray:
    """Which of a batch's ``total`` cases to keep when those of ``bad`` ((case, where it
    is, what is wrong)) cannot be used: with ``skip`` (``--skip-bad-images``) all the
    others, and an error if that leaves none (``source``, ``what``: "images can be
    decoded"); without it the first bad one is an error naming it."""
    case, where, problem = bad[0]
    if not skip:
        raise DataError(f"{where}: {problem} (give --skip-bad-images to leave such "
                        "images out)")
    keep = np.ones(total, bool)
    keep[[c for c, _, _ in bad]] = False
    if not keep.any():
        raise DataError(f"{source}: none of its {total} {what} (first: {where}: {problem})")
    return keep
