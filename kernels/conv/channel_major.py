"""The ``chwn`` conv: channel-major input, cases innermost, in cache-sized blocks.

For layers with many weights per filter (``K = C/groups * fs^2`` at least
``4 * F``): the padded input is laid out (C, H, W, N), cases innermost as in
cuda-convnet, so every copy moves long contiguous runs.  The output pixels
are taken in blocks whose columns (about
:data:`~convnet.kernels.conv.geometry.CHUNK_BYTES`) stay in the cache: per
block one column copy and one GEMM per group, the block of the output
transposed straight into the (N, F, M, M) result.  The forward pass keeps the
padded input copy.  The backward pass rebuilds each block's columns for the
weight gradient, computed as ``cols @ g.T`` (K, F), the faster GEMM order for
these shapes (:func:`gemm_groups_dwt`, which the ``cases`` layout uses too),
and transposed once; the input gradient of a stride-1 input is a correlation
of the zero-padded output gradient with the flipped filters, computed block by
block like the forward pass (no scatter); other strides scatter each block's
column gradient back with one strided add per filter offset.
"""

from __future__ import annotations

from convnet.kernels.conv.geometry import (
    as_image, as_strided, crop_chwn, pad_span, padded_chwn_buffer, pixel_block_size,
    pixel_blocks, to_chwn, zero_border)
from convnet.kernels.scratch import scratch


class _Columns:
    """Column blocks of a padded (C, T, T, N) source: the window view
    (C, fs, fs, rows, cols, N) is made once, each block is a slice of it copied
    into one scratch buffer sized for the largest block."""

    def __init__(self, xp, src, fs: int, stride: int, rows: int, cols: int, block: int,
                 name: str):
        c, n = src.shape[0], src.shape[3]
        sc, sy, sx, sn = src.strides
        self.win = as_strided(xp, src, (c, fs, fs, rows, cols, n),
                              (sc, sy, sx, stride * sy, stride * sx, sn))
        self.k = c * fs * fs
        self.head = (c, fs, fs)
        self.n = n
        self.buf = scratch(xp, name, (self.k * block * n,), src.dtype)

    def __call__(self, y0: int, y1: int, x0: int, x1: int):
        """Columns (C*fs*fs, (y1-y0)*(x1-x0)*N) of output pixels [y0, y1) x [x0, x1),
        rows in (c, ky, kx) order."""
        r, w = y1 - y0, x1 - x0
        cols = self.buf[:self.k * r * w * self.n].reshape(self.head + (r, w, self.n))
        cols[...] = self.win[:, :, :, y0:y1, x0:x1]
        return cols.reshape(self.k, r * w * self.n)


def _gemm_groups(xp, wm, cols, out, groups: int, accumulate: bool) -> None:
    """out (F, L) (+)= block-diagonal W (F, K/groups per group) @ cols (K, L)."""
    filters = wm.shape[0]
    fg, kg = filters // groups, cols.shape[0] // groups
    for gi in range(groups):
        a = wm[gi * fg:(gi + 1) * fg]
        bm = cols[gi * kg:(gi + 1) * kg]
        dst = out[gi * fg:(gi + 1) * fg]
        if accumulate:
            dst += a @ bm
        else:
            xp.matmul(a, bm, out=dst)


def forward(xp, xs, ws, b, geom, keep_cache):
    """Cases-innermost conv: per block of output pixels, one column block
    (C*fs*fs, pixels*N) in cache-sized scratch and one GEMM per group."""
    n = xs[0].shape[0]
    filters = ws[0].shape[0]
    m = geom.modules
    dtype = xs[0].dtype
    xpads = []
    for i, x in enumerate(xs):
        x = as_image(x, geom.channels[i], geom.img[i])
        xpads.append(padded_chwn_buffer(xp, x, geom.pad[i], geom.span(i),
                                        None if keep_cache else f"xpad{i}"))
    k = max(w[0].size * g for w, g in zip(ws, geom.groups))
    unit = n * max(k, filters) * xp.dtype(dtype).itemsize
    blocks = list(pixel_blocks(m, m, unit))
    biggest = pixel_block_size(m, m, unit)
    out_buf = scratch(xp, "conv_out", (filters, biggest * n), dtype)
    columns = [_Columns(xp, xpads[i], geom.fs[i], geom.stride[i], m, m, biggest, f"cols{i}")
               for i in range(len(xs))]
    wms = [w.reshape(filters, -1) for w in ws]
    y = xp.empty((n, filters, m, m), dtype=dtype)
    for y0, y1, x0, x1 in blocks:
        out = out_buf[:, :(y1 - y0) * (x1 - x0) * n]
        for i, wm in enumerate(wms):
            _gemm_groups(xp, wm, columns[i](y0, y1, x0, x1), out, geom.groups[i], i > 0)
        o4 = out.reshape(filters, y1 - y0, x1 - x0, n)
        o4 += b.reshape(filters, 1, 1, 1) if b.ndim == 1 else \
            b.reshape(filters, m, m)[:, y0:y1, x0:x1, None]
        y[:, :, y0:y1, x0:x1] = o4.transpose(3, 0, 1, 2)
    return y, ("chwn", xpads if keep_cache else None)


def backward(xp, gy, xs, ws, xpads, need_dx, geom, shared_biases, need_dw=True):
    """Backward of :func:`forward`, block by block of output pixels.

    Weight gradients: per block, the columns are rebuilt in cache and
    ``dW += gy_block @ cols_block.T``.  Input gradients of a stride-1 input
    (padding at most fs - 1): a correlation of the zero-padded output gradient
    with the flipped filters, computed like the forward pass (columns of the
    padded gradient and one GEMM per block of input pixels), so there is no
    scatter; other inputs scatter the column gradient back per filter offset.
    """
    n = gy.shape[0]
    filters = ws[0].shape[0]
    m = geom.modules
    dtype = gy.dtype
    g4 = gy.reshape(n, filters, m, m)
    db = g4.sum(axis=(0, 2, 3)) if shared_biases else g4.sum(axis=0)
    gt = scratch(xp, "gt", (filters, m, m, n), dtype)
    to_chwn(xp, gt, g4)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs, pad, stride, g = geom.fs[i], geom.pad[i], geom.stride[i], geom.groups[i]
        img, c = geom.img[i], geom.channels[i]
        wm = w.reshape(filters, -1)
        if need_dw:
            xpad = xpads[i] if xpads is not None else padded_chwn_buffer(
                xp, as_image(x, c, img), pad, geom.span(i), "xpad")
            dws.append(_weight_gradient(xp, gt, xpad, wm, geom, i, n).reshape(w.shape))
        else:
            dws.append(None)
        if not need_dx[i]:
            dxs.append(None)
            continue
        if stride == 1 and pad <= fs - 1:
            dx = _conv_dx_correlation(xp, gt, wm, n, c, img, fs, pad, g)
        else:
            dx = _conv_dx_scatter(xp, gt, wm, n, c, img, fs, pad, stride, g, m)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db


def _weight_gradient(xp, gt, xpad, wm, geom, i: int, n: int):
    """dW of input i, summed block by block of output pixels: gt_block @ cols_block.T."""
    filters, m, g = wm.shape[0], geom.modules, geom.groups[i]
    dtype = gt.dtype
    k = wm.shape[1] * g
    dwt = scratch(xp, "dwt", (wm.shape[1], filters), dtype)
    tmp = None
    unit = n * max(k, filters) * xp.dtype(dtype).itemsize
    columns = _Columns(xp, xpad, geom.fs[i], geom.stride[i], m, m,
                       pixel_block_size(m, m, unit), "cols0")
    for bi, (y0, y1, x0, x1) in enumerate(pixel_blocks(m, m, unit)):
        cols = columns(y0, y1, x0, x1)
        gmat = gt[:, y0:y1, x0:x1].reshape(filters, -1)
        if bi == 0:
            gemm_groups_dwt(xp, gmat, cols, dwt, g)
        else:
            if tmp is None:
                tmp = scratch(xp, "dw_tmp", dwt.shape, dtype)
            gemm_groups_dwt(xp, gmat, cols, tmp, g)
            dwt += tmp
    return xp.ascontiguousarray(dwt.T)


def gemm_groups_dwt(xp, gmat, cols, out, groups: int) -> None:
    """out (K/groups, F) = the transposed weight gradient: per group, cols_g (K_g, L) @
    gmat_g (F_g, L).T.  This order of the GEMM (the long weight dimension as its rows)
    runs 5-25% faster in OpenBLAS than gmat @ cols.T for these shapes; callers sum the
    blocks into one (K/groups, F) buffer and transpose it once."""
    filters = gmat.shape[0]
    fg, kg = filters // groups, cols.shape[0] // groups
    for gi in range(groups):
        xp.matmul(cols[gi * kg:(gi + 1) * kg], gmat[gi * fg:(gi + 1) * fg].T,
                  out=out[:, gi * fg:(gi + 1) * fg])


def _conv_dx_correlation(xp, gt, wm, n, c, img, fs, pad, groups):
    """dx of a stride-1 conv: dx[c, iy, ix] = sum_{f, ky, kx} W[f, c, fs-1-ky, fs-1-kx] *
    gpad[f, iy + ky, ix + kx], gpad = the output gradient placed at fs - 1 - pad in a
    zero buffer of side img + fs - 1."""
    filters, m = gt.shape[0], gt.shape[1]
    dtype = gt.dtype
    lo = fs - 1 - pad
    side = img + fs - 1
    gpad = scratch(xp, "gpad", (filters, side, side, n), dtype)
    keep = min(m, side - lo)
    zero_border(gpad, lo, keep)
    gpad[:, lo:lo + keep, lo:lo + keep] = gt[:, :keep, :keep]
    fg, cg = filters // groups, c // groups
    # flipped filters, one (C_g, F_g*fs*fs) matrix per group
    w5 = wm.reshape(groups, fg, cg, fs, fs)[:, :, :, ::-1, ::-1]
    wflip = scratch(xp, "wflip", (groups, cg, fg, fs, fs), dtype)
    wflip[...] = w5.transpose(0, 2, 1, 3, 4)
    wflip = wflip.reshape(groups, cg, fg * fs * fs)
    unit = n * max(filters * fs * fs, c) * xp.dtype(dtype).itemsize
    biggest = pixel_block_size(img, img, unit)
    out_buf = scratch(xp, "dx_out", (c, biggest * n), dtype)
    columns = _Columns(xp, gpad, fs, 1, img, img, biggest, "cols0")
    dx = xp.empty((n, c, img, img), dtype=dtype)
    kg = fg * fs * fs
    for y0, y1, x0, x1 in pixel_blocks(img, img, unit):
        cols = columns(y0, y1, x0, x1)
        out = out_buf[:, :(y1 - y0) * (x1 - x0) * n]
        for gi in range(groups):
            xp.matmul(wflip[gi], cols[gi * kg:(gi + 1) * kg], out=out[gi * cg:(gi + 1) * cg])
        dx[:, :, y0:y1, x0:x1] = out.reshape(c, y1 - y0, x1 - x0, n).transpose(3, 0, 1, 2)
    return dx


def _conv_dx_scatter(xp, gt, wm, n, c, img, fs, pad, stride, groups, m):
    """dx by columns: per block of output pixels, dcols = W.T @ gt_block, added back
    into a padded (C, T, T, N) buffer with one strided add per filter offset."""
    filters = gt.shape[0]
    dtype = gt.dtype
    total = pad_span(m, fs, stride)
    acc = scratch(xp, "col2im", (c, total, total, n), dtype, zero=True)
    fg, kg = filters // groups, wm.shape[1]
    unit = n * max(c * fs * fs, filters) * xp.dtype(dtype).itemsize
    dbuf = scratch(xp, "dcols", (c * fs * fs, pixel_block_size(m, m, unit) * n), dtype)
    for y0, y1, x0, x1 in pixel_blocks(m, m, unit):
        r, w = y1 - y0, x1 - x0
        gmat = gt[:, y0:y1, x0:x1].reshape(filters, -1)
        dcols = dbuf[:, :r * w * n]
        for gi in range(groups):
            xp.matmul(wm[gi * fg:(gi + 1) * fg].T, gmat[gi * fg:(gi + 1) * fg],
                      out=dcols[gi * kg:(gi + 1) * kg])
        d = dcols.reshape(c, fs, fs, r, w, n)
        for ky in range(fs):
            for kx in range(fs):
                ys, xs_ = y0 * stride + ky, x0 * stride + kx
                acc[:, ys:ys + stride * (r - 1) + 1:stride,
                    xs_:xs_ + stride * (w - 1) + 1:stride] += d[:, ky, kx]
    return crop_chwn(xp, acc, (n, c, img, img), pad, total)
