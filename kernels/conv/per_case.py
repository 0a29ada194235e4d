"""The ``cases`` conv: blocks of cases outermost, for large output maps.

For output maps of at least
:data:`~convnet.kernels.conv.choice.CASES_MIN_PIXELS` pixels (e.g. the first
layer of an ImageNet or CIFAR-10 net).  Per block of cases the columns
(B, K, M*M) fill about :data:`~convnet.kernels.conv.geometry.CHUNK_BYTES`
and one batched GEMM per group writes the (B, F, M*M) block of the output in
place, so there is no transpose of the input or the output.  Nothing is kept
for the backward pass: the weight gradient rebuilds each block's columns in
(K, B*M*M) order; input gradients as in the ``nchw`` layout.
"""

from __future__ import annotations

from convnet.kernels.conv import im2col
from convnet.kernels.conv.channel_major import gemm_groups_dwt
from convnet.kernels.conv.geometry import as_image, as_strided, units_per_block, zero_border
from convnet.kernels.scratch import scratch


class _CaseColumns:
    """Columns of blocks of cases of one input: the block is copied into a zero-padded
    (B, C, T, T) scratch buffer, whose window view (B, C, fs, fs, M, M) is copied into
    (B, K, M*M) columns (``order='bkp'``, for one batched GEMM per block) or (K, B*M*M)
    (``order='kbp'``, for the weight gradient)."""

    def __init__(self, xp, x, geom, i: int, block: int, order: str):
        self.xp, self.x, self.order = xp, x, order
        self.fs, self.pad, self.stride = geom.fs[i], geom.pad[i], geom.stride[i]
        self.c, self.img, self.m = geom.channels[i], geom.img[i], geom.modules
        self.total = geom.span(i)
        self.k = self.c * self.fs * self.fs
        self.keep = max(0, min(self.img, self.total - self.pad))
        dtype = x.dtype
        self.xpad = scratch(xp, f"case_pad{i}", (block, self.c, self.total, self.total), dtype)
        zero_border(self.xpad.reshape(block * self.c, self.total, self.total, 1), self.pad,
                    self.keep)
        self.buf = scratch(xp, f"case_cols{i}", (block * self.k * self.m * self.m,), dtype)

    def __call__(self, b0: int, b1: int):
        nb, c, fs, m, s = b1 - b0, self.c, self.fs, self.m, self.stride
        pad, keep = self.pad, self.keep
        xpad = self.xpad[:nb]
        if keep:
            xpad[:, :, pad:pad + keep, pad:pad + keep] = self.x[b0:b1, :, :keep, :keep]
        sb, sc, sy, sx = xpad.strides
        if self.order == "bkp":
            shape = (nb, c, fs, fs, m, m)
            view = as_strided(self.xp, xpad, shape, (sb, sc, sy, sx, s * sy, s * sx))
            cols = self.buf[:nb * self.k * m * m].reshape(shape)
            cols[...] = view
            return cols.reshape(nb, self.k, m * m)
        shape = (c, fs, fs, nb, m, m)
        view = as_strided(self.xp, xpad, shape, (sc, sy, sx, sb, s * sy, s * sx))
        cols = self.buf[:nb * self.k * m * m].reshape(shape)
        cols[...] = view
        return cols.reshape(self.k, nb * m * m)


def forward(xp, xs, ws, b, geom):
    """Cases-outermost conv for large output maps: per block of cases, the columns
    (B, K, M*M) in cache-sized scratch and one batched GEMM per input and group whose
    result is already the (B, F, M*M) block of the output, so no transpose follows.
    Nothing is kept for the backward pass, which rebuilds the columns."""
    n = xs[0].shape[0]
    filters = ws[0].shape[0]
    p = geom.modules * geom.modules
    dtype = xs[0].dtype
    item = xp.dtype(dtype).itemsize
    k = max(w[0].size * g for w, g in zip(ws, geom.groups))
    block = units_per_block(max(k, filters) * p * item, n)
    columns = [_CaseColumns(xp, as_image(x, geom.channels[i], geom.img[i]), geom, i, block,
                            "bkp") for i, x in enumerate(xs)]
    wms = [w.reshape(filters, -1) for w in ws]
    y = xp.empty((n, filters, p), dtype=dtype)
    tmp = scratch(xp, "case_out", (block, filters, p), dtype) if len(xs) > 1 else None
    bias = b.reshape(1, filters, 1) if b.ndim == 1 else b.reshape(1, filters, p)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        out = y[b0:b1]
        for i, wm in enumerate(wms):
            cols = columns[i](b0, b1)
            dst = out if i == 0 else tmp[:b1 - b0]
            g = geom.groups[i]
            fg, kg = filters // g, wm.shape[1]
            for gi in range(g):
                xp.matmul(wm[gi * fg:(gi + 1) * fg], cols[:, gi * kg:(gi + 1) * kg],
                          out=dst[:, gi * fg:(gi + 1) * fg])
            if i > 0:
                out += dst
        out += bias
    return y.reshape(n, filters, geom.modules, geom.modules), ("cases", None)


def backward(xp, gy, xs, ws, need_dx, geom, shared_biases, need_dw=True):
    """Backward of :func:`forward`.  Weight gradients: per block of cases,
    the columns in (K, B*M*M) order and the output gradient in (F, B*M*M) order, one
    GEMM per group.  Input gradients as in the nchw layout (the large maps of this
    layout make its scatter of the column gradient cheaper than the chwn ways)."""
    n = gy.shape[0]
    filters = ws[0].shape[0]
    m = geom.modules
    p = m * m
    dtype = gy.dtype
    g3 = gy.reshape(n, filters, p)
    db = g3.sum(axis=(0, 2)) if shared_biases else g3.sum(axis=0).reshape(filters, m, m)
    wms = [w.reshape(filters, -1) for w in ws]
    dws = _weight_gradients(xp, g3, xs, ws, wms, geom) if need_dw else [None] * len(ws)
    dxs = []
    gt_full = None
    for i, x in enumerate(xs):
        if not need_dx[i]:
            dxs.append(None)
            continue
        if gt_full is None:
            gt_full = scratch(xp, "gt_nchw", (filters, n, p), dtype)
            gt_full[...] = g3.transpose(1, 0, 2)
        dx = im2col.input_gradient(xp, gt_full.reshape(filters, n * p), wms[i], geom, i, n)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db


def _weight_gradients(xp, g3, xs, ws, wms, geom) -> list:
    """Each input's weight gradient from the output gradient ``g3`` (N, F, P), a block
    of cases at a time (their columns built per block)."""
    n, filters, p = g3.shape
    dtype = g3.dtype
    k = max(w[0].size * g for w, g in zip(ws, geom.groups))
    block = units_per_block(max(k, filters) * p * xp.dtype(dtype).itemsize, n)
    gbuf = scratch(xp, "case_gt", (filters, block, p), dtype)
    dwts = [scratch(xp, f"dwt{i}", (wm.shape[1], filters), dtype) for i, wm in enumerate(wms)]
    tmp = scratch(xp, "dw_tmp", (k, filters), dtype)
    columns = [_CaseColumns(xp, as_image(x, geom.channels[i], geom.img[i]), geom, i, block,
                            "kbp") for i, x in enumerate(xs)]
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        gt = gbuf[:, :b1 - b0]
        gt[...] = g3[b0:b1].transpose(1, 0, 2)
        gmat = gt.reshape(filters, -1)
        for i, dwt in enumerate(dwts):
            cols = columns[i](b0, b1)
            if b0 == 0:
                gemm_groups_dwt(xp, gmat, cols, dwt, geom.groups[i])
            else:
                part = tmp[:dwt.shape[0]]
                gemm_groups_dwt(xp, gmat, cols, part, geom.groups[i])
                dwt += part
    return [xp.ascontiguousarray(dwt.T).reshape(w.shape) for dwt, w in zip(dwts, ws)]
