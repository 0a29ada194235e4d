"""Convolution (shared weights) and locally-connected (unshared) layers.

Both are computed with im2col and GEMM:

* the input is copied once into a zero-padded buffer large enough for every
  window the ceiling rule creates (windows hanging over the padded edge read
  zeros, as in cuda-convnet2),
* a strided view of that buffer enumerates (channel, ky, kx) x (output
  position, case) and is copied once into a contiguous ``cols`` matrix,
* conv: one GEMM per group, ``W (F_g, K_g) @ cols (K_g, N*P)``;
  local: one batched matmul over the P output positions, ``W (P, F_g, K_g) @
  cols (P, K_g, N)``,
* the backward pass runs the transposed GEMMs and scatters the column
  gradient back with one strided add per filter offset (ky, kx).

The only Python loops are over inputs, groups and the few filter offsets.

Conv columns come in one of two orders, chosen per input by cost: with
many weights per filter (``K = C/groups * fs^2`` at least ``4 * F``) the
padded input is laid out (C, H, W, N), cases innermost as in cuda-convnet,
so that every copy in im2col and col2im moves long contiguous runs; with few
(a 3-channel first layer) the (N, C, H, W) order avoids transposing the
large output instead.  ``LAYOUT`` forces one of them (for tests).

Layouts: activations are (N, C, S, S).  Conv weights (F, C/groups, fs, fs);
local weights (P, F, C/groups, fs, fs) with P = modulesX**2 in row-major
(oy, ox) order; biases (F,) (shared) or (F, M, M).

The ``cache`` returned by the forward kernels is opaque to layers: a backend
that overrides ``conv_forward`` must override ``conv_backward`` too.
"""

from __future__ import annotations

import threading

from . import array_module, backend_name, kernel

LAYOUT: str | None = None  # None: choose per input; "nchw" or "chwn": force (tests)

_SCRATCH = threading.local()
_SCRATCH_LIMIT = 256 << 20  # bytes: larger temporaries are not kept between calls


def _scratch(xp, name: str, shape, dtype, zero: bool = False):
    """A per-thread reusable temporary (saves the page faults of a fresh allocation).

    Only for arrays that never leave the kernel; each ``name`` has one buffer.
    """
    size = 1
    for d in shape:
        size *= int(d)
    nbytes = size * xp.dtype(dtype).itemsize
    if nbytes > _SCRATCH_LIMIT:
        return xp.zeros(shape, dtype) if zero else xp.empty(shape, dtype)
    bufs = _SCRATCH.__dict__.setdefault("bufs", {})
    key = (name, backend_name(xp), xp.dtype(dtype).str)
    buf = bufs.get(key)
    if buf is None or buf.size < size:
        buf = xp.empty(size, dtype)
        bufs[key] = buf
    out = buf[:size].reshape(shape)
    if zero:
        out.fill(0)
    return out


def _use_chwn(k: int, filters: int) -> bool:
    if LAYOUT is not None:
        return LAYOUT == "chwn"
    return k >= 4 * filters


def out_size(img_size: int, filter_size: int, padding: int, stride: int) -> int:
    """cuda-convnet2's ``modulesX = 1 + ceil((2*padding + imgSize - filterSize) / stride)``."""
    return 1 + -(-(2 * padding + img_size - filter_size) // stride)


def _pad_span(modules: int, filter_size: int, stride: int) -> int:
    """Side of the padded buffer that holds every window."""
    return (modules - 1) * stride + filter_size


def _padded_cn(xp, x, padding: int, total: int):
    """x (N, C, H, H) -> zero-padded (C, N, total, total), x at offset ``padding``."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    out = xp.zeros((c, n, total, total), dtype=x.dtype)
    if keep:
        out[:, :, padding:padding + keep, padding:padding + keep] = \
            x[:, :, :keep, :keep].transpose(1, 0, 2, 3)
    return out


def _padded_hw(xp, x, padding: int, total: int):
    """x (N, C, H, H) -> zero-padded (total, total, C, N), x at offset ``padding``."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    out = xp.zeros((total, total, c, n), dtype=x.dtype)
    if keep:
        out[padding:padding + keep, padding:padding + keep] = \
            x[:, :, :keep, :keep].transpose(2, 3, 1, 0)
    return out


def _padded_chwn(xp, x, padding: int, total: int):
    """x (N, C, H, H) -> zero-padded (C, total, total, N), x at offset ``padding``."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    out = xp.zeros((c, total, total, n), dtype=x.dtype)
    if keep:
        out[:, padding:padding + keep, padding:padding + keep] = \
            x[:, :, :keep, :keep].transpose(1, 2, 3, 0)
    return out


def _as_strided(xp, a, shape, strides):
    return xp.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def _cols_conv(xp, x, fs: int, padding: int, stride: int, modules: int):
    """cols (C*fs*fs, N*M*M) for a conv input, rows in (c, ky, kx) order."""
    n, c = x.shape[0], x.shape[1]
    total = _pad_span(modules, fs, stride)
    xpad = _padded_cn(xp, x, padding, total)
    sc, sn, sy, sx = xpad.strides
    view = _as_strided(xp, xpad, (c, fs, fs, n, modules, modules),
                       (sc, sy, sx, sn, stride * sy, stride * sx))
    return xp.ascontiguousarray(view).reshape(c * fs * fs, n * modules * modules)


def _cols_conv_chwn(xp, x, fs: int, padding: int, stride: int, modules: int):
    """cols (C*fs*fs, M*M*N) for a conv input, columns in (oy, ox, case) order."""
    n, c = x.shape[0], x.shape[1]
    total = _pad_span(modules, fs, stride)
    xpad = _padded_chwn(xp, x, padding, total)
    sc, sy, sx, sn = xpad.strides
    view = _as_strided(xp, xpad, (c, fs, fs, modules, modules, n),
                       (sc, sy, sx, stride * sy, stride * sx, sn))
    return xp.ascontiguousarray(view).reshape(c * fs * fs, modules * modules * n)


def _cols_local(xp, x, fs: int, padding: int, stride: int, modules: int):
    """cols (M*M, C*fs*fs, N) for a local input."""
    n, c = x.shape[0], x.shape[1]
    total = _pad_span(modules, fs, stride)
    xpad = _padded_hw(xp, x, padding, total)
    sy, sx, sc, sn = xpad.strides
    view = _as_strided(xp, xpad, (modules, modules, c, fs, fs, n),
                       (stride * sy, stride * sx, sc, sy, sx, sn))
    return xp.ascontiguousarray(view).reshape(modules * modules, c * fs * fs, n)


def _col2im_conv(xp, dcols, shape, fs: int, padding: int, stride: int, modules: int):
    """Adjoint of :func:`_cols_conv`: dcols (C*fs*fs, N*M*M) -> dx of ``shape``."""
    n, c, h, _ = shape
    total = _pad_span(modules, fs, stride)
    d = dcols.reshape(c, fs, fs, n, modules, modules)
    acc = _scratch(xp, "col2im", (c, n, total, total), dcols.dtype, zero=True)
    span = stride * (modules - 1) + 1
    for ky in range(fs):
        for kx in range(fs):
            acc[:, :, ky:ky + span:stride, kx:kx + span:stride] += d[:, ky, kx]
    return _crop(xp, acc.transpose(1, 0, 2, 3), shape, padding, total)


def _col2im_conv_chwn(xp, dcols, shape, fs: int, padding: int, stride: int, modules: int):
    """Adjoint of :func:`_cols_conv_chwn`: dcols (C*fs*fs, M*M*N) -> dx of ``shape``."""
    n, c, h, _ = shape
    total = _pad_span(modules, fs, stride)
    d = dcols.reshape(c, fs, fs, modules, modules, n)
    acc = _scratch(xp, "col2im", (c, total, total, n), dcols.dtype, zero=True)
    span = stride * (modules - 1) + 1
    for ky in range(fs):
        for kx in range(fs):
            acc[:, ky:ky + span:stride, kx:kx + span:stride] += d[:, ky, kx]
    return _crop(xp, acc.transpose(3, 0, 1, 2), shape, padding, total)


def _col2im_local(xp, dcols, shape, fs: int, padding: int, stride: int, modules: int):
    """Adjoint of :func:`_cols_local`: dcols (M*M, C*fs*fs, N) -> dx of ``shape``."""
    n, c, h, _ = shape
    total = _pad_span(modules, fs, stride)
    d = dcols.reshape(modules, modules, c, fs, fs, n)
    acc = _scratch(xp, "col2im", (total, total, c, n), dcols.dtype, zero=True)
    span = stride * (modules - 1) + 1
    for ky in range(fs):
        for kx in range(fs):
            acc[ky:ky + span:stride, kx:kx + span:stride] += d[:, :, :, ky, kx]
    return _crop(xp, acc.transpose(3, 2, 0, 1), shape, padding, total)


def _crop(xp, padded_nchw, shape, padding: int, total: int):
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


def _as_image(x, channels: int, img_size: int):
    return x.reshape(x.shape[0], channels, img_size, img_size)


# --------------------------------------------------------------------- conv

@kernel
def conv_forward(xs, ws, b, *, filter_sizes, paddings, strides, channels, groups, img_sizes,
                 modules, keep_cache=True):
    """Sum over inputs i of conv(xs[i], ws[i]) plus bias ``b``.

    Returns ``(y, cache)`` with y (N, F, M, M).  ``b`` is (F,) or (F, M, M).
    """
    xp = array_module(xs[0])
    n = xs[0].shape[0]
    filters = ws[0].shape[0]
    p = modules * modules
    chwn = _use_chwn(sum(w[0].size for w in ws), filters)
    acc = None
    cols_all = []
    for i, (x, w) in enumerate(zip(xs, ws)):
        x = _as_image(x, channels[i], img_sizes[i])
        make = _cols_conv_chwn if chwn else _cols_conv
        cols = make(xp, x, filter_sizes[i], paddings[i], strides[i], modules)
        g = groups[i]
        wm = w.reshape(filters, -1)
        if g == 1:
            if acc is None:
                acc = wm @ cols
            else:
                acc += wm @ cols
        else:
            if acc is None:
                acc = xp.zeros((filters, n * p), dtype=x.dtype)
            fg, kg = filters // g, wm.shape[1]
            for gi in range(g):
                acc[gi * fg:(gi + 1) * fg] += wm[gi * fg:(gi + 1) * fg] @ cols[gi * kg:(gi + 1) * kg]
        cols_all.append(cols if keep_cache else None)
    if chwn:  # acc (F, M*M*N)
        y4 = acc.reshape(filters, modules, modules, n)
        y4 += b.reshape(filters, 1, 1, 1) if b.ndim == 1 else b.reshape(filters, modules, modules, 1)
        y = xp.ascontiguousarray(y4.transpose(3, 0, 1, 2))
    else:  # acc (F, N*M*M)
        y3 = acc.reshape(filters, n, p)
        y3 += b.reshape(filters, 1, 1) if b.ndim == 1 else b.reshape(filters, 1, p)
        y = xp.ascontiguousarray(y3.transpose(1, 0, 2)).reshape(n, filters, modules, modules)
    return y, (chwn, cols_all)


@kernel
def conv_backward(gy, xs, ws, cache, need_dx, *, filter_sizes, paddings, strides, channels,
                  groups, img_sizes, modules, shared_biases=True):
    """Gradients of :func:`conv_forward`: ``(dxs, dws, db)``.

    ``dxs[i]`` is None where ``need_dx[i]`` is false; ``dxs[i]`` has the shape
    of ``xs[i]``.  Weight and bias gradients are sums over the cases.
    """
    xp = array_module(gy)
    n = gy.shape[0]
    filters = ws[0].shape[0]
    p = modules * modules
    chwn, cols_all = cache if cache is not None else \
        (_use_chwn(sum(w[0].size for w in ws), filters), [None] * len(xs))
    if chwn:
        g4 = gy.reshape(n, filters, modules, modules)
        gt = xp.ascontiguousarray(g4.transpose(1, 2, 3, 0)).reshape(filters, p * n)
        db = gt.sum(axis=1) if shared_biases else \
            gt.reshape(filters, modules, modules, n).sum(axis=3)
    else:
        gt = xp.ascontiguousarray(gy.reshape(n, filters, p).transpose(1, 0, 2)).reshape(filters, n * p)
        db = gt.sum(axis=1) if shared_biases else \
            gt.reshape(filters, n, modules, modules).sum(axis=1)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs = filter_sizes[i]
        cols = cols_all[i]
        if cols is None:
            make = _cols_conv_chwn if chwn else _cols_conv
            cols = make(xp, _as_image(x, channels[i], img_sizes[i]), fs, paddings[i], strides[i],
                        modules)
        g = groups[i]
        wm = w.reshape(filters, -1)
        fg, kg = filters // g, wm.shape[1]
        if g == 1:
            dw = gt @ cols.T
        else:
            dw = xp.empty_like(wm)
            for gi in range(g):
                fsl = slice(gi * fg, (gi + 1) * fg)
                dw[fsl] = gt[fsl] @ cols[gi * kg:(gi + 1) * kg].T
        dws.append(dw.reshape(w.shape))
        if not need_dx[i]:
            dxs.append(None)
            continue
        dcols = _scratch(xp, "dcols", (g * kg, n * p), gy.dtype)
        for gi in range(g):
            fsl = slice(gi * fg, (gi + 1) * fg)
            xp.matmul(wm[fsl].T, gt[fsl], out=dcols[gi * kg:(gi + 1) * kg])
        shape = (n, channels[i], img_sizes[i], img_sizes[i])
        back = _col2im_conv_chwn if chwn else _col2im_conv
        dx = back(xp, dcols, shape, fs, paddings[i], strides[i], modules)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db


# -------------------------------------------------------------------- local

@kernel
def local_forward(xs, ws, b, *, filter_sizes, paddings, strides, channels, groups, img_sizes,
                  modules, keep_cache=True):
    """Locally-connected layer: like :func:`conv_forward` with one weight set per output
    position.  ``ws[i]`` is (M*M, F, C_i/groups_i, fs, fs), ``b`` (F, M, M)."""
    xp = array_module(xs[0])
    n = xs[0].shape[0]
    p, filters = ws[0].shape[0], ws[0].shape[1]
    acc = None
    cols_all = []
    for i, (x, w) in enumerate(zip(xs, ws)):
        x = _as_image(x, channels[i], img_sizes[i])
        cols = _cols_local(xp, x, filter_sizes[i], paddings[i], strides[i], modules)  # (P, K, N)
        g = groups[i]
        wm = w.reshape(p, filters, -1)
        if g == 1:
            part = xp.matmul(wm, cols)
            if acc is None:
                acc = part
            else:
                acc += part
        else:
            if acc is None:
                acc = xp.zeros((p, filters, n), dtype=x.dtype)
            fg, kg = filters // g, wm.shape[2]
            for gi in range(g):
                acc[:, gi * fg:(gi + 1) * fg] += xp.matmul(wm[:, gi * fg:(gi + 1) * fg],
                                                           cols[:, gi * kg:(gi + 1) * kg])
        cols_all.append(cols if keep_cache else None)
    y = xp.ascontiguousarray(acc.transpose(2, 1, 0)).reshape(n, filters, modules, modules)
    y += b.reshape(filters, modules, modules)
    return y, cols_all


@kernel
def local_backward(gy, xs, ws, cache, need_dx, *, filter_sizes, paddings, strides, channels,
                   groups, img_sizes, modules):
    """Gradients of :func:`local_forward`: ``(dxs, dws, db)``."""
    xp = array_module(gy)
    n = gy.shape[0]
    p, filters = ws[0].shape[0], ws[0].shape[1]
    gp = xp.ascontiguousarray(gy.reshape(n, filters, p).transpose(2, 1, 0))  # (P, F, N)
    db = gy.reshape(n, filters, modules, modules).sum(axis=0)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs = filter_sizes[i]
        cols = cache[i] if cache is not None and cache[i] is not None else \
            _cols_local(xp, _as_image(x, channels[i], img_sizes[i]), fs, paddings[i], strides[i],
                        modules)
        g = groups[i]
        wm = w.reshape(p, filters, -1)
        fg, kg = filters // g, wm.shape[2]
        if g == 1:
            dw = xp.matmul(gp, cols.transpose(0, 2, 1))
        else:
            dw = xp.empty_like(wm)
            for gi in range(g):
                fsl = slice(gi * fg, (gi + 1) * fg)
                dw[:, fsl] = xp.matmul(gp[:, fsl], cols[:, gi * kg:(gi + 1) * kg].transpose(0, 2, 1))
        dws.append(dw.reshape(w.shape))
        if not need_dx[i]:
            dxs.append(None)
            continue
        if g == 1:
            dcols = xp.matmul(wm.transpose(0, 2, 1), gp)
        else:
            dcols = xp.empty((p, g * kg, n), dtype=gy.dtype)
            for gi in range(g):
                fsl = slice(gi * fg, (gi + 1) * fg)
                dcols[:, gi * kg:(gi + 1) * kg] = xp.matmul(wm[:, fsl].transpose(0, 2, 1), gp[:, fsl])
        shape = (n, channels[i], img_sizes[i], img_sizes[i])
        dx = _col2im_local(xp, dcols, shape, fs, paddings[i], strides[i], modules)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db
