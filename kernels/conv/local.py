"""Locally-connected (unshared weights) layers: im2col per output position.

One batched matmul over the P output positions,
``W (P, F_g, K_g) @ cols (P, K_g, N)``, with the columns (M*M, C*fs*fs, N)
taken from a zero-padded (H, W, C, N) copy of the input.  Weights are
(P, F, C/groups, fs, fs) with P = modulesX**2 in row-major (oy, ox) order;
biases (F, M, M).  The forward pass keeps the columns.
"""

from __future__ import annotations

from convnet.kernels import array_module, kernel
from convnet.kernels.conv.geometry import as_image, as_strided, crop, pad_span
from convnet.kernels.scratch import scratch


def _padded_hw(xp, x, padding: int, total: int):
    """x (N, C, H, H) -> zero-padded (total, total, C, N), x at offset ``padding``
    (a scratch buffer)."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    out = scratch(xp, "pad_hw", (total, total, c, n), x.dtype, zero=True)
    if keep:
        out[padding:padding + keep, padding:padding + keep] = \
            x[:, :, :keep, :keep].transpose(2, 3, 1, 0)
    return out


def _cols_local(xp, x, fs: int, padding: int, stride: int, modules: int, keep: bool = True):
    """cols (M*M, C*fs*fs, N) for a local input; a scratch buffer unless ``keep``."""
    n, c = x.shape[0], x.shape[1]
    total = pad_span(modules, fs, stride)
    xpad = _padded_hw(xp, x, padding, total)
    sy, sx, sc, sn = xpad.strides
    view = as_strided(xp, xpad, (modules, modules, c, fs, fs, n),
                      (stride * sy, stride * sx, sc, sy, sx, sn))
    shape = (modules, modules, c, fs, fs, n)
    cols = xp.empty(shape, dtype=x.dtype) if keep else scratch(xp, "cols_local", shape, x.dtype)
    cols[...] = view
    return cols.reshape(modules * modules, c * fs * fs, n)


def _col2im_local(xp, dcols, shape, fs: int, padding: int, stride: int, modules: int):
    """Adjoint of :func:`_cols_local`: dcols (M*M, C*fs*fs, N) -> dx of ``shape``."""
    n, c, h, _ = shape
    total = pad_span(modules, fs, stride)
    d = dcols.reshape(modules, modules, c, fs, fs, n)
    acc = scratch(xp, "col2im", (total, total, c, n), dcols.dtype, zero=True)
    span = stride * (modules - 1) + 1
    for ky in range(fs):
        for kx in range(fs):
            acc[ky:ky + span:stride, kx:kx + span:stride] += d[:, :, :, ky, kx]
    return crop(xp, acc.transpose(3, 2, 0, 1), shape, padding, total)


@kernel
def local_forward(xs, ws, b, *, filter_sizes, paddings, strides, channels, groups, img_sizes,
                  modules, keep_cache=True):
    """Locally-connected layer: like :func:`~convnet.kernels.conv.conv_forward` with one
    weight set per output position.  ``ws[i]`` is (M*M, F, C_i/groups_i, fs, fs), ``b``
    (F, M, M)."""
    xp = array_module(xs[0])
    n = xs[0].shape[0]
    p, filters = ws[0].shape[0], ws[0].shape[1]
    acc = None
    cols_all = []
    for i, (x, w) in enumerate(zip(xs, ws)):
        x = as_image(x, channels[i], img_sizes[i])
        cols = _cols_local(xp, x, filter_sizes[i], paddings[i], strides[i], modules,
                           keep_cache)  # (P, K, N)
        g = groups[i]
        wm = w.reshape(p, filters, -1)
        if g == 1:
            if acc is None:
                acc = xp.matmul(wm, cols, out=scratch(xp, "acc_local", (p, filters, n),
                                                      x.dtype))
            else:
                acc += xp.matmul(wm, cols)
        else:
            if acc is None:
                acc = xp.zeros((p, filters, n), dtype=x.dtype)
            fg, kg = filters // g, wm.shape[2]
            for gi in range(g):
                acc[:, gi * fg:(gi + 1) * fg] += xp.matmul(wm[:, gi * fg:(gi + 1) * fg],
                                                           cols[:, gi * kg:(gi + 1) * kg])
        cols_all.append(cols if keep_cache else None)
    y = xp.empty((n, filters, modules, modules), dtype=acc.dtype)
    # the bias is added while the (P, F, N) result is transposed to (N, F, P)
    xp.add(acc.transpose(2, 1, 0), b.reshape(filters, p), out=y.reshape(n, filters, p))
    return y, cols_all


def local_weight_grad(xp, gp, cols, wm, groups: int):
    """Weight gradient (P, F, K/groups) of a local layer: per position, gp (P, F, N)
    times cols (P, K, N) transposed, each filter group against its channel group."""
    if groups == 1:
        return xp.matmul(gp, cols.transpose(0, 2, 1))
    fg, kg = wm.shape[1] // groups, wm.shape[2]
    dw = xp.empty_like(wm)
    for gi in range(groups):
        fsl = slice(gi * fg, (gi + 1) * fg)
        dw[:, fsl] = xp.matmul(gp[:, fsl], cols[:, gi * kg:(gi + 1) * kg].transpose(0, 2, 1))
    return dw


def local_cols_grad(xp, wm, gp, groups: int, out):
    """Column gradient (P, K, N) of a local layer into ``out``: wm (P, F, K/groups)
    transposed times gp (P, F, N), group by group."""
    if groups == 1:
        return xp.matmul(wm.transpose(0, 2, 1), gp, out=out)
    fg, kg = wm.shape[1] // groups, wm.shape[2]
    for gi in range(groups):
        fsl = slice(gi * fg, (gi + 1) * fg)
        out[:, gi * kg:(gi + 1) * kg] = xp.matmul(wm[:, fsl].transpose(0, 2, 1), gp[:, fsl])
    return out


@kernel
def local_backward(gy, xs, ws, cache, need_dx, *, filter_sizes, paddings, strides, channels,
                   groups, img_sizes, modules, need_dw=True):
    """Gradients of :func:`local_forward`: ``(dxs, dws, db)`` (no weight gradients,
    None, without ``need_dw``)."""
    xp = array_module(gy)
    n = gy.shape[0]
    p, filters = ws[0].shape[0], ws[0].shape[1]
    gp = scratch(xp, "gp_local", (p, filters, n), gy.dtype)
    gp[...] = gy.reshape(n, filters, p).transpose(2, 1, 0)  # (P, F, N)
    db = gy.reshape(n, filters, modules, modules).sum(axis=0)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs = filter_sizes[i]
        wm = w.reshape(p, filters, -1)
        if need_dw:  # the columns serve the weight gradient only
            cols = cache[i] if cache is not None and cache[i] is not None else \
                _cols_local(xp, as_image(x, channels[i], img_sizes[i]), fs, paddings[i],
                            strides[i], modules, keep=False)
            dws.append(local_weight_grad(xp, gp, cols, wm, groups[i]).reshape(w.shape))
        else:
            dws.append(None)
        if not need_dx[i]:
            dxs.append(None)
            continue
        dcols = local_cols_grad(xp, wm, gp, groups[i],
                                scratch(xp, "dcols_local", (p, wm.shape[2] * groups[i], n),
                                        gy.dtype))
        shape = (n, channels[i], img_sizes[i], img_sizes[i])
        dx = _col2im_local(xp, dcols, shape, fs, paddings[i], strides[i], modules)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db
