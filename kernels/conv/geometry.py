"""Window geometry and cache-sized blocking shared by the conv and local algorithms.

The output size (cuda-convnet2's ceiling rule), the side of the zero-padded
buffer that holds every window, a layer's per-input geometry, the zero-padded
(C, T, T, N) copy the channel-major and Winograd convs read, the crop back to
the image, and how output pixels, cases or channels are split into blocks of
about :data:`CHUNK_BYTES` so that a block's columns stay in the cache.
"""

from __future__ import annotations

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
    h = shape[2]
    keep = max(0, min(h, total - padding))
    if keep == h:
        out = xp.empty(shape, dtype=padded_nchw.dtype)
        out[...] = padded_nchw[:, :, padding:padding + h, padding:padding + h]
        return out
    out = xp.zeros(shape, dtype=padded_nchw.dtype)
    if keep:
        out[:, :, :keep, :keep] = padded_nchw[:, :, padding:padding + keep, padding:padding + keep]
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
    out[:, padding:padding + keep, padding:padding + keep] = \
        x[:, :, :keep, :keep].transpose(1, 2, 3, 0)
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
