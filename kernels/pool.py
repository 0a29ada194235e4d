"""Spatial pooling with cuda-convnet2's window geometry.

The window of output x covers input pixels
``[start + x*stride, start + x*stride + sizeX)`` intersected with ``[0, imgSize)``
(in both directions).  ``start`` may be negative and the last windows may hang
over the right edge: only the pixels inside count.  ``avg`` divides by the
number of pixels inside the window, ``max`` takes the largest value and
``maxabs`` the value of largest magnitude (its sign kept).  A window with no
pixel inside gives 0.

Computed as whole-array operations: one strided slice of a padded copy per
window offset (ky, kx).  The ``max`` backward pass, like cuda-convnet2's,
sends an output's gradient to every pixel of its window equal to the
maximum (ties are measure-zero for real-valued inputs; after a relu, tied
zeros get no gradient through the relu anyway).  ``maxabs`` remembers which
offset won (the first on ties) and sends the gradient there; ``avg`` spreads
it evenly over the pixels inside the window.
"""

from __future__ import annotations

import numpy as np

from . import array_module, kernel


def out_size(img_size: int, size: int, stride: int, start: int) -> int:
    """``outputsX = 1 + ceil((imgSize - start - sizeX) / stride)``."""
    return 1 + -(-(img_size - start - size) // stride)


def _geometry(img_size: int, size: int, stride: int, start: int, outputs: int):
    """(left pad, padded side, offset of window 0 in padded coordinates)."""
    left = max(0, -start)
    last_end = start + (outputs - 1) * stride + size
    total = left + max(img_size, last_end)
    return left, total, left + start


def _counts(img_size: int, size: int, stride: int, start: int, outputs: int) -> np.ndarray:
    """Pixels inside each window along one axis (host array of length ``outputs``)."""
    lo = start + stride * np.arange(outputs)
    return np.clip(np.minimum(lo + size, img_size) - np.maximum(lo, 0), 0, None)


def _padded(xp, x, left: int, total: int, fill):
    n, c, s, _ = x.shape
    if left == 0 and total == s:
        return x
    out = xp.full((n, c, total, total), fill, dtype=x.dtype)
    out[:, :, left:left + s, left:left + s] = x
    return out


@kernel
def pool_forward(x, *, pool: str, size: int, stride: int, start: int, outputs: int):
    """x (N, C, S, S) -> ``(y (N, C, O, O), cache)``."""
    xp = array_module(x)
    s = x.shape[2]
    left, total, a = _geometry(s, size, stride, start, outputs)
    span = stride * (outputs - 1) + 1
    counts = _counts(s, size, stride, start, outputs)

    def window(src, ky, kx):
        return src[:, :, a + ky:a + ky + span:stride, a + kx:a + kx + span:stride]

    if pool == "avg":
        xpad = _padded(xp, x, left, total, 0)
        y = window(xpad, 0, 0).copy()
        for ky in range(size):
            for kx in range(size):
                if ky or kx:
                    y += window(xpad, ky, kx)
        area = np.maximum(np.outer(counts, counts), 1).astype(x.dtype)
        y /= xp.asarray(area)
        return y, None
    if pool not in ("max", "maxabs"):
        raise ValueError(f"unknown pooling {pool!r}")
    empty = np.outer(counts, counts) == 0  # windows with no pixel inside the image
    if pool == "max":
        xpad = _padded(xp, x, left, total, -np.inf)
        y = window(xpad, 0, 0).copy()
        for k in range(1, size * size):
            xp.maximum(y, window(xpad, k // size, k % size), out=y)
        if empty.any():
            y[:, :, xp.asarray(empty)] = 0
        return y, None
    xpad = _padded(xp, x, left, total, 0)
    idx_dtype = np.uint8 if size * size <= 255 else np.int32
    y = window(xpad, 0, 0).copy()
    idx = xp.zeros(y.shape, dtype=idx_dtype)
    best = xp.abs(y)
    for k in range(1, size * size):
        w = window(xpad, k // size, k % size)
        aw = xp.abs(w)
        better = aw > best
        xp.copyto(best, aw, where=better)
        xp.copyto(y, w, where=better)
        xp.copyto(idx, idx_dtype(k), where=better)
    if empty.any():
        y[:, :, xp.asarray(empty)] = 0
    return y, idx


@kernel
def pool_backward(gy, x, y, cache, *, pool: str, size: int, stride: int, start: int,
                  outputs: int):
    """Gradient of :func:`pool_forward` (output ``y``, ``cache``) with respect to x."""
    xp = array_module(gy)
    s = x.shape[2]
    left, total, a = _geometry(s, size, stride, start, outputs)
    span = stride * (outputs - 1) + 1
    acc = xp.zeros((x.shape[0], x.shape[1], total, total), dtype=gy.dtype)
    if pool == "avg":
        counts = _counts(s, size, stride, start, outputs)
        area = np.maximum(np.outer(counts, counts), 1).astype(gy.dtype)
        share = gy / xp.asarray(area)
        for ky in range(size):
            for kx in range(size):
                acc[:, :, a + ky:a + ky + span:stride, a + kx:a + kx + span:stride] += share
    elif pool == "max":
        fill = -np.inf
        xpad = _padded(xp, x, left, total, fill)
        eq = xp.empty(gy.shape, dtype=bool)
        part = xp.empty_like(gy)
        for ky in range(size):
            for kx in range(size):
                sl = (slice(None), slice(None), slice(a + ky, a + ky + span, stride),
                      slice(a + kx, a + kx + span, stride))
                xp.equal(xpad[sl], y, out=eq)
                xp.multiply(gy, eq, out=part)
                acc[sl] += part
    else:
        idx = cache
        for k in range(size * size):
            ky, kx = divmod(k, size)
            acc[:, :, a + ky:a + ky + span:stride, a + kx:a + kx + span:stride] += \
                gy * (idx == k)
    if left == 0 and total == s:
        return acc
    return xp.ascontiguousarray(acc[:, :, left:left + s, left:left + s])
