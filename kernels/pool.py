"""Spatial pooling with cuda-convnet2's window geometry.

The window of output x covers input pixels
``[start + x*stride, start + x*stride + sizeX)`` intersected with ``[0, imgSize)``
(in both directions).  ``start`` may be negative and the last windows may hang
over the right edge: only the pixels inside count.  ``avg`` divides by the
number of pixels inside the window, ``max`` takes the largest value and
``maxabs`` the value of largest magnitude (its sign kept).  A window with no
pixel inside gives 0.

Computed as whole-array operations, one per window offset (ky, kx), on
blocks of maps that fit in the cache; the padded image is split by pixel
index modulo the stride so that each offset is a contiguous shift (see
:class:`_Plan`).  Every output and gradient element is computed with the
same operations in the same order as one strided slice of a padded copy per
offset would.  The ``max`` backward pass, like cuda-convnet2's,
sends an output's gradient to every pixel of its window equal to the
maximum (ties are measure-zero for real-valued inputs; after a relu, tied
zeros get no gradient through the relu anyway).  ``maxabs`` remembers which
offset won (the first on ties) and sends the gradient there; ``avg`` spreads
it evenly over the pixels inside the window.
"""

from __future__ import annotations

import functools

import numpy as np

from . import array_module, kernel
from .scratch import scratch


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


BLOCK_BYTES = 1 << 20  # maps are processed in blocks of about this much input (L2-sized)


class _Plan:
    """Where the windows of a pooling geometry read, in phase form.

    Conceptually the image is padded to ``total`` pixels (``left`` before it)
    and output ``o`` of window offset ``k`` reads padded pixel
    ``a + o * stride + k``.  Splitting the padded image by pixel index modulo
    ``stride`` gives ``stride x stride`` phase images of side ``hp`` in which
    that pixel is ``o + (a + k) // stride`` of phase ``(a + k) % stride``: each
    window offset is then a constant shift of one phase image.  With a phase
    image stored as rows of ``hp`` pixels (plus one spare row) and outputs as
    rows of ``hp`` (the last ``hp - outputs`` of each row unused), the shift
    is one flat offset, so every per-offset operation runs over long
    contiguous rows instead of short strided ones.
    """

    def __init__(self, img: int, size: int, stride: int, start: int, outputs: int):
        self.img, self.size, self.stride, self.outputs = img, size, stride, outputs
        self.left, _, self.a = _geometry(img, size, stride, start, outputs)
        self.hp = outputs + (self.a + size - 1) // stride
        self.row = self.hp * (self.hp + 1)  # one phase image, flat
        self.flat = outputs * self.hp       # one output map, flat
        self.offsets = []  # per window offset in (ky, kx) order: (phase y, phase x, shift)
        for ky in range(size):
            for kx in range(size):
                qy, qx = self.a + ky, self.a + kx
                self.offsets.append((qy % stride, qx % stride,
                                     (qy // stride) * self.hp + qx // stride))
        self.counts = _counts(img, size, stride, start, outputs)

    def block(self, maps: int, itemsize: int) -> int:
        return max(1, min(maps, BLOCK_BYTES // max(1, self.img * self.img * itemsize)))

    def _ranges(self, phase: int):
        """Phase indices [j0, j1) that hold image pixels, and the first such pixel."""
        s, left = self.stride, self.left
        j0 = max(0, -(-(left - phase) // s))
        last = self.img - 1 + left - phase  # largest padded offset inside the image
        j1 = min(self.hp + 1, last // s + 1) if last >= 0 else 0
        return j0, max(j0, j1), phase + s * j0 - left

    def phases(self, xp, xb, out, fill) -> None:
        """Phase images (stride, stride, m, hp + 1, hp) of image block xb (m, S, S)."""
        s = self.stride
        for py in range(s):
            j0, j1, r0 = self._ranges(py)
            for px in range(s):
                i0, i1, c0 = self._ranges(px)
                i1 = min(i1, self.hp)
                ph = out[py, px]
                if j1 <= j0 or i1 <= i0:
                    ph.fill(fill)
                    continue
                if j0:
                    ph[:, :j0] = fill
                if j1 < self.hp + 1:
                    ph[:, j1:] = fill
                if i0:
                    ph[:, j0:j1, :i0] = fill
                if i1 < self.hp:
                    ph[:, j0:j1, i1:] = fill
                ph[:, j0:j1, i0:i1] = xb[:, r0:r0 + s * (j1 - j0 - 1) + 1:s,
                                         c0:c0 + s * (i1 - i0 - 1) + 1:s]

    def gather(self, acc, dx) -> None:
        """dx block (m, S, S) from accumulated phase images (stride, stride, m, hp + 1, hp)."""
        s, img, left = self.stride, self.img, self.left
        rows, cols = acc.shape[3], acc.shape[4]
        for ry in range(min(s, img)):
            jy = (ry + left) // s
            ny = len(range(ry, img, s))
            ky = max(0, min(ny, rows - jy))  # pixels past the last window get nothing
            for rx in range(min(s, img)):
                jx = (rx + left) // s
                nx = len(range(rx, img, s))
                kx = max(0, min(nx, cols - jx))
                part = dx[:, ry::s, rx::s]
                if ky < ny or kx < nx:
                    part[...] = 0
                part[:, :ky, :kx] = acc[(ry + left) % s, (rx + left) % s, :,
                                        jy:jy + ky, jx:jx + kx]

    def spread(self, xp, src, out, fill=0):
        """Output maps (m, O, O) into rows of hp (m, O * hp), the spare columns ``fill``."""
        o, hp = self.outputs, self.hp
        o3 = out.reshape(out.shape[0], o, hp)
        if hp > o:
            o3[:, :, o:] = fill
        o3[:, :, :o] = src
        return out


@functools.lru_cache(maxsize=64)
def _plan(img: int, size: int, stride: int, start: int, outputs: int) -> _Plan:
    return _Plan(img, size, stride, start, outputs)


def _staged(xp, block):
    """The input block, or a contiguous copy of it at an address 32 bytes past a
    64-byte boundary (numpy only).  The stride-``stride`` reads that split a block into phase
    images ran 2-3x slower from 64-byte aligned memory than from such a copy when
    the input came from main memory (measured on the benchmark machine); copying the
    block first costs one sequential pass and makes the time independent of where
    the caller's array happens to lie."""
    if xp is not np or block.ctypes.data % 64 == 32:
        return block
    n = block.size
    buf = scratch(xp, "pool_staged", (n + 64 // block.dtype.itemsize,), block.dtype)
    skip = ((32 - buf.ctypes.data % 64) % 64) // block.dtype.itemsize
    out = buf[skip:skip + n].reshape(block.shape)
    out[...] = block
    return out


@kernel
def pool_forward(x, *, pool: str, size: int, stride: int, start: int, outputs: int):
    """x (N, C, S, S) -> ``(y (N, C, O, O), cache)``."""
    xp = array_module(x)
    if pool not in ("max", "avg", "maxabs"):
        raise ValueError(f"unknown pooling {pool!r}")
    n, c, s = x.shape[0], x.shape[1], x.shape[2]
    plan = _plan(s, size, stride, start, outputs)
    maps = n * c
    xb = x.reshape(maps, s, s)
    y = xp.empty((n, c, outputs, outputs), dtype=x.dtype)
    yb = y.reshape(maps, outputs, outputs)
    idx = None
    if pool == "maxabs":
        idx_dtype = np.uint8 if size * size <= 255 else np.int32
        idx = xp.empty(y.shape, dtype=idx_dtype)
        ib = idx.reshape(maps, outputs, outputs)
    blk = plan.block(maps, x.dtype.itemsize)
    st = (stride, stride)
    phases = scratch(xp, "pool_phases", st + (blk, plan.hp + 1, plan.hp), x.dtype)
    acc = scratch(xp, "pool_acc", (blk, plan.flat), x.dtype)
    if pool == "maxabs":
        best = scratch(xp, "pool_best", (blk, plan.flat), x.dtype)
        aw = scratch(xp, "pool_aw", (blk, plan.flat), x.dtype)
        better = scratch(xp, "pool_better", (blk, plan.flat), bool)
        which = scratch(xp, "pool_which", (blk, plan.flat), idx.dtype)
    area = None
    if pool == "avg":
        area = xp.asarray(np.maximum(np.outer(plan.counts, plan.counts), 1).astype(x.dtype))
    fill = -np.inf if pool == "max" else 0
    o, L = outputs, plan.flat
    for b0 in range(0, maps, blk):
        m = min(maps, b0 + blk) - b0
        ph = phases[:, :, :m]
        plan.phases(xp, _staged(xp, xb[b0:b0 + m]), ph, fill)
        flat = ph.reshape(st + (m, plan.row))
        out = acc[:m]
        for k, (py, px, sh) in enumerate(plan.offsets):
            w = flat[py, px, :, sh:sh + L]
            if k == 0:
                out[...] = w
                if pool == "maxabs":
                    bst, a_, bt, wh = best[:m], aw[:m], better[:m], which[:m]
                    xp.abs(out, out=bst)
                    wh.fill(0)
            elif pool == "max":
                xp.maximum(out, w, out=out)
            elif pool == "avg":
                out += w
            else:
                xp.abs(w, out=a_)
                xp.greater(a_, bst, out=bt)
                xp.copyto(bst, a_, where=bt)
                xp.copyto(out, w, where=bt)
                xp.copyto(wh, wh.dtype.type(k), where=bt)
        o3 = out.reshape(m, o, plan.hp)[:, :, :o]
        if pool == "avg":
            xp.divide(o3, area, out=yb[b0:b0 + m])
        else:
            yb[b0:b0 + m] = o3
        if pool == "maxabs":
            ib[b0:b0 + m] = wh.reshape(m, o, plan.hp)[:, :, :o]
    empty = np.outer(plan.counts, plan.counts) == 0  # windows with no pixel inside the image
    if pool != "avg" and empty.any():
        y[:, :, xp.asarray(empty)] = 0
    return y, idx


@kernel
def pool_backward(gy, x, y, cache, *, pool: str, size: int, stride: int, start: int,
                  outputs: int):
    """Gradient of :func:`pool_forward` (output ``y``, ``cache``) with respect to x.

    Each input pixel sums the gradients of the windows that take it, in the
    order of the window offsets (ky, kx): with ``max`` every pixel equal to
    its window's maximum, with ``maxabs`` the recorded winner, with ``avg``
    every pixel inside the window (the share ``gy / pixels inside``).
    """
    xp = array_module(gy)
    if pool not in ("max", "avg", "maxabs"):
        raise ValueError(f"unknown pooling {pool!r}")
    n, c, s = x.shape[0], x.shape[1], x.shape[2]
    plan = _plan(s, size, stride, start, outputs)
    maps = n * c
    o, L = outputs, plan.flat
    dtype = gy.dtype
    gb = gy.reshape(maps, o, o)
    if pool == "avg":
        area = np.maximum(np.outer(plan.counts, plan.counts), 1).astype(dtype)
        gb = gb / xp.asarray(area)
    dx = xp.empty((n, c, s, s), dtype=dtype)
    dxb = dx.reshape(maps, s, s)
    blk = plan.block(maps, dtype.itemsize)
    st = (stride, stride)
    acc = scratch(xp, "pool_acc_phases", st + (blk, plan.hp + 1, plan.hp), dtype)
    g = scratch(xp, "pool_g", (blk, L), dtype)
    part = scratch(xp, "pool_part", (blk, L), dtype)
    if pool == "max":
        xb = x.reshape(maps, s, s)
        yb = y.reshape(maps, o, o)
        phases = scratch(xp, "pool_phases", st + (blk, plan.hp + 1, plan.hp), x.dtype)
        yf = scratch(xp, "pool_y", (blk, L), y.dtype)
        eq = scratch(xp, "pool_eq", (blk, L), bool)
    elif pool == "maxabs":
        cb = cache.reshape(maps, o, o)
        cf = scratch(xp, "pool_which", (blk, L), cache.dtype)
        eq = scratch(xp, "pool_eq", (blk, L), bool)
    for b0 in range(0, maps, blk):
        m = min(maps, b0 + blk) - b0
        ac = acc[:, :, :m]
        ac.fill(0)
        flat_acc = ac.reshape(st + (m, plan.row))
        gf = plan.spread(xp, gb[b0:b0 + m], g[:m])  # spare columns 0: they add nothing
        if pool == "max":
            ph = phases[:, :, :m]
            plan.phases(xp, _staged(xp, xb[b0:b0 + m]), ph, -np.inf)
            flat_x = ph.reshape(st + (m, plan.row))
            yv = plan.spread(xp, yb[b0:b0 + m], yf[:m])
        elif pool == "maxabs":
            wv = plan.spread(xp, cb[b0:b0 + m], cf[:m])
        pt = part[:m]
        for k, (py, px, sh) in enumerate(plan.offsets):
            dst = flat_acc[py, px, :, sh:sh + L]
            if pool == "avg":
                dst += gf
                continue
            e = eq[:m]
            if pool == "max":
                xp.equal(flat_x[py, px, :, sh:sh + L], yv, out=e)
            else:
                xp.equal(wv, k, out=e)
            xp.multiply(gf, e, out=pt)
            dst += pt
        plan.gather(ac, dxb[b0:b0 + m])
    return dx
