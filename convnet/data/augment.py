"""Crop windows, mirrors, test views and colour noise for batches of ``(N, C, S, S)`` images.

The draws of the training augmentation are made here (each case's window and mirror,
its colour shift) and the windows cut from the stored pixels; the mirror, the mean
and the shift are applied where the images become float32, on the device that trains
on them (:class:`convnet.kernels.images.StoredImages`).  All functions are vectorised
over the batch (no per-case Python loop) and take their randomness from a
caller-supplied generator, so the provider decides what the randomness depends on
(seed, epoch, batch) and nothing here does.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def random_windows(n: int, size: int, inner: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Training augmentation for ``n`` cases of ``size`` x ``size``: a uniformly random
    ``inner`` x ``inner`` window and a coin-flip mirror per case, as ``(offsets, flips)``:
    int32 ``(n, 2)`` (top, left) and bool ``(n,)``.  Drawn in this order (tops, lefts,
    coins), the draws every run of this seed has made."""
    oy = rng.integers(0, size - inner + 1, n)
    ox = rng.integers(0, size - inner + 1, n)
    flips = rng.integers(0, 2, n).astype(bool)
    return np.stack([oy, ox], axis=1).astype(np.int32), flips


def centre_windows(n: int, size: int, inner: int) -> tuple[np.ndarray, np.ndarray]:
    """The test-time window of ``n`` cases: centred (rounding towards the top-left),
    unmirrored; ``(offsets, flips)`` as :func:`random_windows` gives them."""
    start = (size - inner) // 2
    return np.full((n, 2), start, np.int32), np.zeros(n, bool)


def cut_windows(images: np.ndarray, inner: int, offsets: np.ndarray) -> np.ndarray:
    """The ``inner`` x ``inner`` window at ``offsets[n]`` (top, left) of each case of
    ``(N, C, S, S)`` images, unmirrored, in their dtype: a new C-contiguous array (the
    images themselves when the window is the whole image and they are C-contiguous)."""
    if inner == images.shape[-1]:
        return np.ascontiguousarray(images)
    windows = sliding_window_view(images, (inner, inner), axis=(2, 3))
    return windows[np.arange(len(images)), :, offsets[:, 0], offsets[:, 1]]  # rows copied whole


def view_positions(size: int, inner: int) -> list[tuple[int, int]]:
    """Window corners for multiview testing: centre first, then the four corners.

    Without a border there is only one position (the whole image).
    """
    if size == inner:
        return [(0, 0)]
    centre, far = (size - inner) // 2, size - inner
    return [(centre, centre), (0, 0), (0, far), (far, 0), (far, far)]


def multiview_crops(images: np.ndarray, inner: int) -> np.ndarray:
    """Every position of :func:`view_positions`, unmirrored then mirrored: ``(V, N, C, i, i)``.

    View 0 equals :func:`centre_crop`.  This is cuda-convnet2's ten-view test
    (five windows and their mirror images); it has two views without a border.
    """
    windows = [images[:, :, y:y + inner, x:x + inner]
               for y, x in view_positions(images.shape[-1], inner)]
    return np.stack(windows + [w[..., ::-1] for w in windows])


def colour_basis(images: np.ndarray) -> np.ndarray:
    """Principal axes of the per-pixel colour of mean-subtracted images, scaled by
    their standard deviations: ``basis @ z`` for ``z ~ N(0, I)`` has the data's
    colour covariance.  Shape ``(C, C)``.  At most the first 1,000 cases are
    used: plenty for a 3 x 3 covariance, and quick on large batches."""
    sample = images[:1000]
    pixels = np.moveaxis(sample, 1, -1).reshape(-1, sample.shape[1]).astype(np.float64)
    pixels -= pixels.mean(axis=0)
    cov = pixels.T @ pixels / max(len(pixels) - 1, 1)
    eigvals, eigvecs = np.linalg.eigh(cov)
    return eigvecs * np.sqrt(np.clip(eigvals, 0.0, None))


def colour_shifts(n: int, basis: np.ndarray, scale: float,
                  rng: np.random.Generator) -> np.ndarray:
    """Krizhevsky et al. (2012) colour noise: for each of ``n`` cases one random colour,
    drawn along the data's principal colour axes ``scale`` standard deviations wide, to
    be added to every pixel of the case; float32 ``(n, C)``."""
    shift = scale * rng.standard_normal((n, basis.shape[0])) @ basis.T
    return shift.astype(np.float32)
