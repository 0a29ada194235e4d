"""Crops, flips, test views and colour noise on batches of ``(N, C, S, S)`` images.

All functions are vectorised over the batch (no per-case Python loop) and take
their randomness from a caller-supplied generator, so the provider decides
what the randomness depends on (seed, epoch, batch) and nothing here does.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def crop(images: np.ndarray, inner: int, oy: np.ndarray, ox: np.ndarray,
         flip: np.ndarray) -> np.ndarray:
    """Cut an ``inner`` x ``inner`` window at ``(oy[n], ox[n])`` from each case,
    mirrored left-right where ``flip[n]``; returns a new C-contiguous array."""
    windows = sliding_window_view(images, (inner, inner), axis=(2, 3))
    out = windows[np.arange(len(images)), :, oy, ox]  # (N, C, inner, inner), rows copied whole
    out[flip] = out[flip][..., ::-1]
    return out


def random_crops(images: np.ndarray, inner: int, rng: np.random.Generator) -> np.ndarray:
    """Training augmentation: a uniformly random window and a coin-flip mirror per case."""
    n, size = images.shape[0], images.shape[-1]
    oy = rng.integers(0, size - inner + 1, n)
    ox = rng.integers(0, size - inner + 1, n)
    flip = rng.integers(0, 2, n).astype(bool)
    return crop(images, inner, oy, ox, flip)


def centre_crop(images: np.ndarray, inner: int) -> np.ndarray:
    """The test-time window: centred (rounding towards the top-left), unmirrored."""
    start = (images.shape[-1] - inner) // 2
    return np.ascontiguousarray(images[:, :, start:start + inner, start:start + inner])


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


def add_colour_noise(images: np.ndarray, basis: np.ndarray, scale: float,
                     rng: np.random.Generator) -> np.ndarray:
    """Krizhevsky et al. (2012) colour noise: add to every pixel of a case one random
    colour drawn along the data's principal colour axes, ``scale`` standard
    deviations wide.  Modifies ``images`` in place and returns it."""
    n, c = images.shape[:2]
    shift = scale * rng.standard_normal((n, c)) @ basis.T
    images += shift.astype(images.dtype)[:, :, None, None]
    return images
