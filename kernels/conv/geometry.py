"""Window geometry and cache-sized blocking shared by the conv and local algorithms.

The output size (cuda-convnet2's ceiling rule), the side of the zero-padded
buffer that holds every window, a layer's per-input geometry, the zero-padded
(C, T, T, N) copy the channel-major and Winograd convs read, the crop back to
the image, and how output pixels, cases or channels are split into blocks of
about :data:`CHUNK_BYTES` so that a block's columns stay in the cache.
"""

from __future__ import annotations

import numpy as np

from convnet.kernels.scratch import scratch


CHUNK_BYTES = 2 << 20  # bytes of one block of columns or intermediates (about the L2 cache)


def out_size(img_size: int, filter_size: int, padding: int, stride: int) -> int:
    """cuda-convnet2's ``modulesX = 1 + ceil((2*padding + imgSize - filterSize) / stride)``."""
    return 1 + -(-(2 * padding + img_size - filter_size) // stride)


def pad_span(modules: int, filter_size: int, stride: int) -> int:
    """Side of the padded buffer that holds every window."""
    return (modules - 1) * stride + filter_size


class ConvGeometry:
    """Per-input geometry of a conv or local layer."""

    def __init__(self, filter_sizes, paddings, strides, channels, groups, img_sizes, modules):
        self.fs, self.pad, self.stride = filter_sizes, paddings, strides
        self.channels, self.groups, self.img = channels, groups, img_sizes
        self.modules = modules

    def span(self, i: int) -> int:
        return pad_span(self.modules, self.fs[i], self.stride[i])


def as_strided(xp, a, shape, strides):
    return xp.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def as_image(x, channels: int, img_size: int):
    return x.reshape(x.shape[0], channels, img_size, img_size)


def crop(xp, padded_nchw, shape, padding: int, total: int):
    """A fresh (N, C, H, H) copy of the image part of a padded (N, C, total, total) view."""
    def copy(dst, kept: slice) -> None:
        dst[...] = padded_nchw[:, :, kept, kept]

    return _image_part(xp, shape, padded_nchw.dtype, padding, total, copy)


def crop_chwn(xp, padded_chwn, shape, padding: int, total: int):
    """:func:`crop` of a padded (C, total, total, N) buffer, copied by :func:`from_chwn`
    (1.8-2.5x faster on numpy than cropping its transposed view)."""
    return _image_part(xp, shape, padded_chwn.dtype, padding, total,
                       lambda dst, kept: from_chwn(xp, dst, padded_chwn[:, kept, kept]))


def _image_part(xp, shape, dtype, padding: int, total: int, copy):
    """A fresh (N, C, H, H) array whose [:keep, :keep] part ``copy(part, rows)`` fills
    from the padded rows and columns ``rows`` (the image's pixels a padded buffer of
    ``total`` holds); the rest, pixels no window reached, zero."""
    h = shape[2]
    keep = max(0, min(h, total - padding))
    out = (xp.empty if keep == h else xp.zeros)(shape, dtype=dtype)
    if keep:
        copy(out[:, :, :keep, :keep], slice(padding, padding + keep))
    return out


def zero_border(a, lo: int, inner: int) -> None:
    """Zero a (C, T, T, N) buffer outside its [lo, lo + inner)^2 interior."""
    t = a.shape[1]
    hi = lo + inner
    if lo > 0:
        a[:, :lo] = 0
        a[:, lo:hi, :lo] = 0
    if hi < t:
        a[:, hi:] = 0
        a[:, lo:hi, hi:] = 0


CASES_PER_COPY = 8  # cases per block of a copy into cases-innermost order (see to_chwn)


def to_chwn(xp, dst, src) -> None:
    """``dst[c, y, x, n] = src[n, c, y, x]``: an (N, C, H, W) array into a (C, H, W, N)
    view (which may be a slice of a larger buffer).  On numpy the copy goes in blocks
    of :data:`CASES_PER_COPY` cases: numpy's copy loop then runs along a few adjacent
    cases of the destination, 3-5x faster than one copy of the whole transposed array,
    whose innermost loop strides through the source a whole case apart."""
    if xp is not np:
        dst[...] = src.transpose(1, 2, 3, 0)
        return
    for n0 in range(0, src.shape[0], CASES_PER_COPY):
        dst[..., n0:n0 + CASES_PER_COPY] = src[n0:n0 + CASES_PER_COPY].transpose(1, 2, 3, 0)


def from_chwn(xp, dst, src) -> None:
    """``dst[n, c, y, x] = src[c, y, x, n]``, the inverse of :func:`to_chwn`; on numpy
    channel by channel (about 1.3-1.8x faster than one copy of the whole array)."""
    if xp is not np:
        dst[...] = src.transpose(3, 0, 1, 2)
        return
    for c in range(src.shape[0]):
        dst[:, c] = src[c].transpose(2, 0, 1)


def padded_chwn_buffer(xp, x, padding: int, total: int, name: str | None):
    """x (N, C, H, H) -> zero-padded (C, total, total, N); a scratch buffer when
    ``name`` is given, else a fresh array."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    shape = (c, total, total, n)
    out = scratch(xp, name, shape, x.dtype) if name else xp.empty(shape, dtype=x.dtype)
    if keep == 0:
        out.fill(0)
        return out
    zero_border(out, padding, keep)
    to_chwn(xp, out[:, padding:padding + keep, padding:padding + keep], x[:, :, :keep, :keep])
    return out


def pixel_blocks(rows: int, cols: int, unit_bytes: int):
    """Cover a rows x cols grid of output pixels with blocks of about CHUNK_BYTES of
    columns (``unit_bytes`` per pixel): whole rows where a row fits, else row pieces.
    Yields (y0, y1, x0, x1)."""
    per_row = max(1, cols * unit_bytes)
    if per_row <= CHUNK_BYTES:
        step = max(1, CHUNK_BYTES // per_row)
        for y0 in range(0, rows, step):
            yield y0, min(rows, y0 + step), 0, cols
        return
    step = max(1, CHUNK_BYTES // max(1, unit_bytes))
    pieces = -(-cols // step)
    step = -(-cols // pieces)  # even pieces
    for y0 in range(rows):
        for x0 in range(0, cols, step):
            yield y0, y0 + 1, x0, min(cols, x0 + step)


def pixel_block_size(rows: int, cols: int, unit_bytes: int) -> int:
    return max((y1 - y0) * (x1 - x0) for y0, y1, x0, x1 in pixel_blocks(rows, cols, unit_bytes))


def units_per_block(unit_bytes: int, count: int) -> int:
    """Units (cases, channels) per block of about CHUNK_BYTES (at least one)."""
    return max(1, min(count, CHUNK_BYTES // max(1, unit_bytes)))
