"""The ``winograd`` conv: stride-1 convs as a^2 GEMMs of transformed tiles.

The transform matrices and the choice of tile come from
:mod:`convnet.kernels.conv.winograd` (plain numbers, no arrays); this module
applies them to a layer's arrays.  Input tiles are transformed per block of
channels whose intermediates stay in the cache, multiplied with the
transformed filters in one batched GEMM per input and group over the a*a tile
positions, and transformed back to the output.  The forward pass keeps the
transformed input tiles; the backward pass is the exact transpose of the
forward algorithm.
"""

from __future__ import annotations

import math

from convnet.kernels.conv import winograd
from convnet.kernels.conv.geometry import (
    as_image, as_strided, from_chwn, padded_chwn_buffer, units_per_block)


def _transform(xp, matrix, src, out) -> None:
    """``out[b, p] = sum_q matrix[p][q] * src[b, q]`` over the arrays' axis 1 (axis 0 is a
    batch): one GEMM per batch entry with the small matrix on the left.  ``src`` may be
    any strided view; unless its axes from 2 on are one contiguous run (then the GEMM
    reads it in place), it is copied into a contiguous array first (one pass over
    memory, which the GEMM then reads once: sums of strided slices would read each
    slice once per non-zero coefficient).  ``out`` may be a slice along axis 2 of a
    contiguous array (its trailing axes contiguous)."""
    mat = xp.asarray(matrix, dtype=out.dtype)
    batch, q, p = src.shape[0], src.shape[1], out.shape[1]
    rest = math.prod(out.shape[2:])
    if _tail_contiguous(src):
        src = as_strided(xp, src, (batch, q, rest), src.strides[:2] + (src.itemsize,))
    else:
        src = xp.ascontiguousarray(src).reshape(batch, q, rest)
    xp.matmul(mat, src,
              out=as_strided(xp, out, (batch, p, rest), out.strides[:2] + out.strides[-1:]))


def _tail_contiguous(a) -> bool:
    """Whether the axes of ``a`` from 2 on are one contiguous run of memory whose
    length fits between two entries of axis 1 (a matrix a GEMM can read in place)."""
    expected = a.itemsize
    for size, stride in zip(reversed(a.shape[2:]), reversed(a.strides[2:])):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return a.shape[1] == 1 or a.strides[1] >= expected


def _tiles_transformed(xp, src, matrix, m: int, t: int):
    """``matrix`` (p, q) applied along both axes of every q x q window of a padded
    (C, S, S, N) source whose windows start every m pixels, T x T of them:
    (p*p, C, T*T*N).  Per block of channels whose intermediates stay in the cache
    (about :data:`~convnet.kernels.conv.geometry.CHUNK_BYTES`; 5x faster than whole
    arrays for ImageNet's conv2): rows first, on whole padded rows, one GEMM per
    channel and row of windows that reads the window's q rows in place (each source
    row enters q/m windows; 1.7x faster than copying the windows out first), then the
    columns of those."""
    p, q = len(matrix), len(matrix[0])
    c, side, _, n = src.shape
    item = src.dtype.itemsize
    out = xp.empty((p, p, c, t, t, n), src.dtype)
    mat = xp.asarray(matrix, dtype=src.dtype)
    block = units_per_block((p * side + p * q * t) * t * n * item, c)
    for c0 in range(0, c, block):
        sub = src[c0:c0 + block]
        k = sub.shape[0]
        sc, sy = sub.strides[:2]
        row_windows = as_strided(xp, sub, (k, t, q, side * n), (sc, m * sy, sy, item))
        rows = xp.matmul(mat, row_windows).reshape(k, t, p, side, n)
        rk, rt, rp, rx, rn = rows.strides
        col_windows = as_strided(xp, rows, (p, q, k, t, t, n), (rp, rx, rk, rt, m * rx, rn))
        _transform(xp, mat, col_windows, out[:, :, c0:c0 + k])
    return out.reshape(p * p, c, t * t * n)


def _winograd_input(xp, x, pad: int, r: int, m: int, t: int, bt):
    """``B^T d B`` of every input tile: (a*a, C, T*T*N), tile (ty, tx) of case n
    starting at pixel (ty*m, tx*m) of the zero-padded input."""
    xpad = padded_chwn_buffer(xp, x, pad, t * m + r - 1, None)
    return _tiles_transformed(xp, xpad, bt, m, t)


def _winograd_weights(xp, w, m: int):
    """``G w G^T`` per filter and channel, (a*a, F, C/groups): one GEMM of the
    (a*a, r*r) Kronecker product ``G (x) G`` with the filters' r*r weights."""
    f, c, r = w.shape[0], w.shape[1], w.shape[2]
    kron = winograd.kronecker(m, r)
    u = xp.matmul(xp.asarray(kron, dtype=w.dtype), w.reshape(f * c, r * r).T)
    return u.reshape(len(kron), f, c)


def _winograd_output(xp, acc, at, m: int, modules: int, b):
    """``A^T M A`` of every tile's products (a, a, F, T, T, N) plus the bias ``b`` ((F,)
    or (F, M, M)) -> (N, F, M, M), per block of filters whose intermediates stay in
    the cache.  Each block's m x m output blocks go into their places in a (F, T*m,
    T*m, N) map, cases innermost (a copy of runs of N values; a shared bias is added on
    the way), and the map is turned into (N, F, M, M) once at the end
    (:func:`~convnet.kernels.conv.geometry.from_chwn`): 3-4x faster than writing each
    block's outputs into (N, F, M, M) directly, a copy whose every element comes from
    another run of the source."""
    a, filters, t, n = acc.shape[0], acc.shape[2], acc.shape[3], acc.shape[5]
    dtype = acc.dtype
    mat = xp.asarray(at, dtype=dtype)
    side = t * m
    full = xp.empty((filters, t, m, t, m, n), dtype)  # (F, ty, i, tx, j, N) = (F, y, x, N)
    shared = b.ndim == 1
    bias = b.reshape(filters, 1, 1, 1, 1, 1) if shared else None
    item = xp.dtype(dtype).itemsize
    block = units_per_block((a * a + m * a + m * m) * t * t * n * item, filters)
    for f0 in range(0, filters, block):
        products = acc[:, :, f0:f0 + block].swapaxes(0, 1)  # (j, i, k, T, T, N), read in place
        k = products.shape[2]
        rows = xp.empty((a, m, k, t, t, n), dtype)
        _transform(xp, mat, products, rows)
        blocks = xp.empty((m, m, k, t, t, n), dtype)  # (j, i, ...)
        _transform(xp, mat, rows[None], blocks[None])
        out = blocks.transpose(2, 3, 1, 4, 0, 5)  # (k, ty, i, tx, j, N)
        if shared:
            xp.add(out, bias[f0:f0 + k], out=full[f0:f0 + k])
        else:
            full[f0:f0 + k] = out
    y = xp.empty((n, filters, modules, modules), dtype=dtype)
    from_chwn(xp, y, full.reshape(filters, side, side, n)[:, :modules, :modules])
    if not shared:
        y += b.reshape(1, filters, modules, modules)
    return y


GEMM_BLOCK_BYTES = 64 << 10  # one tile position's block of a GEMM operand


def _products(xp, lhs, rhs, out, accumulate: bool = False) -> None:
    """``out (+)= lhs @ rhs`` for (P, M, K) @ (P, K, L) -> (P, M, L), the a*a tile
    positions' GEMMs, in blocks of columns whose operands take about
    :data:`GEMM_BLOCK_BYTES` per position: with few channels (K, M of 16-32) OpenBLAS
    runs these 1.2-1.5x faster than over all columns at once.  Each output element
    is the same sum either way."""
    cols = rhs.shape[2]
    step = max(1, GEMM_BLOCK_BYTES // (max(lhs.shape[1], lhs.shape[2]) * rhs.itemsize))
    for l0 in range(0, cols, step):
        dst = out[:, :, l0:l0 + step]
        if accumulate:
            dst += xp.matmul(lhs, rhs[:, :, l0:l0 + step])
        else:
            xp.matmul(lhs, rhs[:, :, l0:l0 + step], out=dst)


def _products_summed(xp, lhs, rhs, out) -> None:
    """``out = lhs @ rhs.T`` for (P, M, L) and (P, K, L) -> (P, M, K), a sum over the L
    columns (tiles and cases) of the weight gradient's GEMMs, in blocks of columns as
    in :func:`_products` (1.3-2x faster for 16-32 channels than one GEMM over all
    columns), the blocks' sums added in order."""
    cols = rhs.shape[2]
    step = max(1, GEMM_BLOCK_BYTES // (max(lhs.shape[1], rhs.shape[1]) * rhs.itemsize))
    xp.matmul(lhs[:, :, :step], rhs[:, :, :step].transpose(0, 2, 1), out=out)
    for l0 in range(step, cols, step):
        out += xp.matmul(lhs[:, :, l0:l0 + step], rhs[:, :, l0:l0 + step].transpose(0, 2, 1))


def _winograd_tiling(geom):
    """(r, m, a, T) of a layer's Winograd conv: filter size, output tile, input tile,
    tiles along a side."""
    r = geom.fs[0]
    m = winograd.output_tile(geom.modules, r)
    return r, m, m + r - 1, winograd.tiles(geom.modules, m)


def forward(xp, xs, ws, b, geom, keep_cache):
    """Stride-1 conv by Winograd's minimal filtering (:mod:`convnet.kernels.conv.winograd`):
    per input and group, one batched GEMM over the a*a tile positions,
    (F_g, C_g) @ (C_g, T*T*N).  Keeps the transformed inputs for the backward pass."""
    r, m, a, t = _winograd_tiling(geom)
    at, _, bt = winograd.transforms(m, r)
    n, filters, dtype = xs[0].shape[0], ws[0].shape[0], xs[0].dtype
    vs = [_winograd_input(xp, as_image(x, geom.channels[i], geom.img[i]), geom.pad[i], r, m,
                          t, bt) for i, x in enumerate(xs)]
    acc = xp.empty((a * a, filters, t * t * n), dtype)
    for i, (v, w) in enumerate(zip(vs, ws)):
        u = _winograd_weights(xp, w, m)
        fg, cg = filters // geom.groups[i], w.shape[1]
        for gi in range(geom.groups[i]):
            f0, c0 = gi * fg, gi * cg
            _products(xp, u[:, f0:f0 + fg], v[:, c0:c0 + cg], acc[:, f0:f0 + fg],
                      accumulate=i > 0)
    y = _winograd_output(xp, acc.reshape(a, a, filters, t, t, n), at, m, geom.modules, b)
    return y, ("winograd", vs if keep_cache else None)


def _winograd_output_gradient(xp, g4, at, m: int, t: int):
    """``A dY A^T`` of every m x m block of the output gradient (zeros past the map):
    (a*a, F, T*T*N), the transpose of :func:`_winograd_output`."""
    gpad = padded_chwn_buffer(xp, g4, 0, t * m, None)
    return _tiles_transformed(xp, gpad, tuple(zip(*at)), m, t)  # A (a, m)


def _winograd_input_gradient(xp, dv, bt, m: int, t: int, pad: int, img: int, n: int):
    """The transpose of :func:`_winograd_input`: the gradients of the transformed tiles
    (a*a, C, T*T*N) back to the input (N, C, img, img): ``B dV B^T`` per tile, each tile
    added into the padded input where it came from (columns first, then rows), per
    block of channels whose intermediates stay in the cache.  Tiles start every m
    pixels, so the first m pixels of every tile cover the map's first T*m pixels once:
    those are copied, and only the last a - m overlap into the next tile are added."""
    a, c = len(bt), dv.shape[1]
    side = t * m + a - m
    span = m * (t - 1) + 1
    b_mat = xp.asarray(tuple(zip(*bt)), dtype=dv.dtype)  # B (a, a)
    grads = dv.reshape(a, a, c, t, t, n)
    dxpad = xp.empty((c, side, side, n), dv.dtype)
    dxpad[:, t * m:] = 0
    block = units_per_block((2 * a * a * t + a * side) * t * n * dv.dtype.itemsize, c)
    for c0 in range(0, c, block):
        k = min(block, c - c0)
        rows = xp.empty((a, a, k, t, t, n), dv.dtype)  # (j, i, ...)
        _transform(xp, b_mat, grads[:, :, c0:c0 + k].swapaxes(0, 1), rows)
        tiles = xp.empty((a, a, k, t, t, n), dv.dtype)  # (j, i, ...): tiles[l] is column l
        _transform(xp, b_mat, rows[None], tiles[None])
        cols = xp.empty((a, k, t, side, n), dv.dtype)  # tile rows, whole padded columns
        cols[:, :, :, t * m:] = 0
        for l in range(a):
            if l < m:
                cols[:, :, :, l:l + span:m] = tiles[l]
            else:
                cols[:, :, :, l:l + span:m] += tiles[l]
        dst = dxpad[c0:c0 + k]
        for j in range(a):
            if j < m:
                dst[:, j:j + span:m] = cols[j]
            else:
                dst[:, j:j + span:m] += cols[j]
    dx = xp.empty((n, c, img, img), dv.dtype)
    from_chwn(xp, dx, dxpad[:, pad:pad + img, pad:pad + img])
    return dx


def backward(xp, gy, xs, ws, vs, need_dx, geom, shared_biases, need_dw=True):
    """Backward of :func:`forward`, the exact transpose of its algorithm.

    With V the transformed input tiles (kept by the forward pass, else made again)
    and ``A dY A^T`` the transformed output-gradient blocks, per tile position
    ``dU = (A dY A^T) @ V^T`` (a GEMM over all tiles and cases) and ``dW = G^T dU G``;
    ``dV = U^T @ (A dY A^T)`` and the input gradient is ``B dV B^T`` of each tile added
    back where the tile came from.  Both gradients share the output gradient's one
    transform, and the input gradient's transforms run on the layer's input channels.
    """
    n, filters, m_out = gy.shape[0], ws[0].shape[0], geom.modules
    g4 = gy.reshape(n, filters, m_out, m_out)
    db = g4.sum(axis=(0, 2, 3)) if shared_biases else g4.sum(axis=0)
    r, m, a, t = _winograd_tiling(geom)
    at, _, bt = winograd.transforms(m, r)
    gt = _winograd_output_gradient(xp, g4, at, m, t)
    kron = xp.asarray(winograd.kronecker(m, r), dtype=gy.dtype)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        groups, c, img = geom.groups[i], geom.channels[i], geom.img[i]
        fg, cg = filters // groups, w.shape[1]
        if need_dw:
            v = vs[i] if vs is not None else _winograd_input(
                xp, as_image(x, c, img), geom.pad[i], r, m, t, bt)
            du = xp.empty((a * a, filters, cg), gy.dtype)
            for gi in range(groups):
                f0, c0 = gi * fg, gi * cg
                _products_summed(xp, gt[:, f0:f0 + fg], v[:, c0:c0 + cg], du[:, f0:f0 + fg])
            # dW = G^T dU G for every filter and channel: the transpose of _winograd_weights
            dws.append(xp.matmul(du.reshape(a * a, filters * cg).T, kron).reshape(w.shape))
        else:
            dws.append(None)
        if not need_dx[i]:
            dxs.append(None)
            continue
        u = _winograd_weights(xp, w, m)
        dv = xp.empty((a * a, c, t * t * n), gy.dtype)
        for gi in range(groups):
            f0, c0 = gi * fg, gi * cg
            _products(xp, u[:, f0:f0 + fg].transpose(0, 2, 1), gt[:, f0:f0 + fg],
                      dv[:, c0:c0 + cg])
        dx = _winograd_input_gradient(xp, dv, bt, m, t, geom.pad[i], img, n)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db
