"""The ``nchw`` conv: im2col columns of the whole minibatch and one GEMM per group.

For layers with few weights per filter (e.g. a 3-channel first layer): a
zero-padded copy of the input holds every window the ceiling rule creates
(windows hanging over the padded edge read zeros, as in cuda-convnet2), a
strided view of it enumerates (channel, ky, kx) x (case, output position) and
is copied into columns (K, N*M*M); ``W (F_g, K_g) @ cols`` is already in
(F, N, M*M) order and needs only a cheap transpose.  The forward pass keeps
the columns; the backward pass scatters the column gradient back with one
strided add per filter offset (:func:`input_gradient`, which the ``cases``
layout uses too).
"""

from __future__ import annotations

from convnet.kernels.conv.geometry import as_image, as_strided, crop, pad_span
from convnet.kernels.scratch import scratch


def _padded_cn(xp, x, padding: int, total: int):
    """x (N, C, H, H) -> zero-padded (C, N, total, total), x at offset ``padding``
    (a scratch buffer)."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    out = scratch(xp, "pad_cn", (c, n, total, total), x.dtype, zero=True)
    if keep:
        out[:, :, padding:padding + keep, padding:padding + keep] = \
            x[:, :, :keep, :keep].transpose(1, 0, 2, 3)
    return out


def _cols_conv(xp, x, fs: int, padding: int, stride: int, modules: int, keep: bool = True):
    """cols (C*fs*fs, N*M*M) for a conv input, rows in (c, ky, kx) order; a scratch
    buffer unless ``keep``."""
    n, c = x.shape[0], x.shape[1]
    total = pad_span(modules, fs, stride)
    xpad = _padded_cn(xp, x, padding, total)
    sc, sn, sy, sx = xpad.strides
    view = as_strided(xp, xpad, (c, fs, fs, n, modules, modules),
                      (sc, sy, sx, sn, stride * sy, stride * sx))
    shape = (c, fs, fs, n, modules, modules)
    cols = xp.empty(shape, dtype=x.dtype) if keep else scratch(xp, "cols_nchw", shape, x.dtype)
    cols[...] = view
    return cols.reshape(c * fs * fs, n * modules * modules)


def _col2im_conv(xp, dcols, shape, fs: int, padding: int, stride: int, modules: int):
    """Adjoint of :func:`_cols_conv`: dcols (C*fs*fs, N*M*M) -> dx of ``shape``."""
    n, c, h, _ = shape
    total = pad_span(modules, fs, stride)
    d = dcols.reshape(c, fs, fs, n, modules, modules)
    acc = scratch(xp, "col2im", (c, n, total, total), dcols.dtype, zero=True)
    span = stride * (modules - 1) + 1
    for ky in range(fs):
        for kx in range(fs):
            acc[:, :, ky:ky + span:stride, kx:kx + span:stride] += d[:, ky, kx]
    return crop(xp, acc.transpose(1, 0, 2, 3), shape, padding, total)


def forward(xp, xs, ws, b, geom, keep_cache):
    n = xs[0].shape[0]
    filters = ws[0].shape[0]
    modules = geom.modules
    p = modules * modules
    acc = None
    cols_all = []
    for i, (x, w) in enumerate(zip(xs, ws)):
        x = as_image(x, geom.channels[i], geom.img[i])
        cols = _cols_conv(xp, x, geom.fs[i], geom.pad[i], geom.stride[i], modules, keep_cache)
        g = geom.groups[i]
        wm = w.reshape(filters, -1)
        if g == 1:
            if acc is None:
                acc = xp.matmul(wm, cols, out=scratch(xp, "acc_nchw", (filters, n * p),
                                                      x.dtype))
            else:
                acc += wm @ cols
        else:
            if acc is None:
                acc = xp.zeros((filters, n * p), dtype=x.dtype)
            fg, kg = filters // g, wm.shape[1]
            for gi in range(g):
                acc[gi * fg:(gi + 1) * fg] += wm[gi * fg:(gi + 1) * fg] @ cols[gi * kg:(gi + 1) * kg]
        cols_all.append(cols if keep_cache else None)
    y = xp.empty((n, filters, modules, modules), dtype=acc.dtype)
    # the bias is added while the (F, N, P) result is transposed to (N, F, P)
    xp.add(acc.reshape(filters, n, p).transpose(1, 0, 2),
           b.reshape(1, filters, 1) if b.ndim == 1 else b.reshape(1, filters, p),
           out=y.reshape(n, filters, p))
    return y, ("nchw", cols_all)


def backward(xp, gy, xs, ws, cols_all, need_dx, geom, shared_biases, need_dw=True):
    n = gy.shape[0]
    filters = ws[0].shape[0]
    modules = geom.modules
    p = modules * modules
    if cols_all is None:
        cols_all = [None] * len(xs)
    gt = scratch(xp, "gt_nchw", (filters, n, p), gy.dtype)
    gt[...] = gy.reshape(n, filters, p).transpose(1, 0, 2)
    gt = gt.reshape(filters, n * p)
    db = gt.sum(axis=1) if shared_biases else \
        gt.reshape(filters, n, modules, modules).sum(axis=1)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        wm = w.reshape(filters, -1)
        dws.append(_weight_gradient(xp, gt, cols_all[i], x, wm, geom, i).reshape(w.shape)
                   if need_dw else None)
        if not need_dx[i]:
            dxs.append(None)
            continue
        dxs.append(input_gradient(xp, gt, wm, geom, i, n).reshape(x.shape))
    return dxs, dws, db


def _weight_gradient(xp, gt, cols, x, wm, geom, i: int):
    """dW of input i: gt (F, N*M*M) times its columns, group by group."""
    if cols is None:
        cols = _cols_conv(xp, as_image(x, geom.channels[i], geom.img[i]), geom.fs[i],
                          geom.pad[i], geom.stride[i], geom.modules, keep=False)
    g = geom.groups[i]
    filters, kg = wm.shape
    fg = filters // g
    if g == 1:
        return gt @ cols.T
    dw = xp.empty_like(wm)
    for gi in range(g):
        fsl = slice(gi * fg, (gi + 1) * fg)
        dw[fsl] = gt[fsl] @ cols[gi * kg:(gi + 1) * kg].T
    return dw


def input_gradient(xp, gt, wm, geom, i: int, n: int):
    """dx of input i from the output gradient gt (F, N*M*M): the column gradient
    W.T @ gt, group by group, scattered back by :func:`_col2im_conv`."""
    g = geom.groups[i]
    filters, kg = wm.shape
    fg = filters // g
    dcols = scratch(xp, "dcols", (g * kg, gt.shape[1]), gt.dtype)
    for gi in range(g):
        fsl = slice(gi * fg, (gi + 1) * fg)
        xp.matmul(wm[fsl].T, gt[fsl], out=dcols[gi * kg:(gi + 1) * kg])
    shape = (n, geom.channels[i], geom.img[i], geom.img[i])
    return _col2im_conv(xp, dcols, shape, geom.fs[i], geom.pad[i], geom.stride[i], geom.modules)
