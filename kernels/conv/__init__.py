"""Convolution (shared weights) and locally-connected (unshared) layers.

Both are computed with im2col and GEMM: a zero-padded copy of the input
holds every window the ceiling rule creates (windows hanging over the padded
edge read zeros, as in cuda-convnet2), a strided view of it enumerates
(channel, ky, kx) x (output position, case) and is copied into a ``cols``
matrix, and GEMMs do the rest.

Stride-1 conv layers with 3x3 to 5x5 filters and enough channels take the
``winograd`` layout instead (:mod:`convnet.kernels.conv.winograd`: the conv as a^2
GEMMs of transformed tiles, 3-4.6x fewer multiply-adds; the forward pass keeps
the transformed input tiles; :data:`WINOGRAD` False, ``--no-winograd``, turns
it off).  Otherwise conv columns come in one of three orders, chosen per layer
by cost (:func:`conv_layout`):

* ``cases`` (large output maps, at least :data:`CASES_MIN_PIXELS` pixels,
  e.g. the first layer of an ImageNet or CIFAR-10 net): cases outermost.
  Per block of cases the columns (B, K, M*M) fill about :data:`CHUNK_BYTES`
  and one batched GEMM per group writes the (B, F, M*M) block of the output
  in place, so there is no transpose of the input or the output.  Nothing
  is kept for the backward pass: the weight gradient rebuilds each block's
  columns in (K, B*M*M) order; input gradients as in ``nchw``.
* ``chwn`` (many weights per filter, ``K = C/groups * fs^2`` at least
  ``4 * F``): the padded input is laid out (C, H, W, N), cases innermost as
  in cuda-convnet, so every copy moves long contiguous runs.  The output
  pixels are taken in blocks whose columns (about :data:`CHUNK_BYTES`) stay
  in the cache: per block one column copy and one GEMM per group, the block
  of the output transposed straight into the (N, F, M, M) result.  The
  backward pass rebuilds each block's columns for the weight gradient; the
  input gradient of a stride-1 input is a correlation of
  the zero-padded output gradient with the flipped filters, computed block
  by block like the forward pass (no scatter); other strides scatter each
  block's column gradient back with one strided add per filter offset.
* ``nchw`` (few weights per filter, e.g. a 3-channel first layer): columns
  (K, N*M*M) of the whole minibatch, ``W (F_g, K_g) @ cols``, whose result
  is already in (F, N, M*M) order and needs only a cheap transpose; the
  backward pass scatters the column gradient back with one strided add per
  filter offset.

What the forward pass keeps for the backward pass (in training): ``nchw``
the columns, ``chwn`` the padded input copy, ``cases`` nothing, ``winograd`` the
transformed input tiles.  Weight
gradients of ``chwn`` and ``cases`` are computed as ``cols @ g.T`` (K, F),
the faster GEMM order for these shapes, and transposed once.

``LAYOUT`` forces one of them (for tests).  Local layers: one batched matmul
over the P output positions, ``W (P, F_g, K_g) @ cols (P, K_g, N)``.

Layouts: activations are (N, C, S, S).  Conv weights (F, C/groups, fs, fs);
local weights (P, F, C/groups, fs, fs) with P = modulesX**2 in row-major
(oy, ox) order; biases (F,) (shared) or (F, M, M).

The ``cache`` returned by the forward kernels is opaque to layers: a
replacement registered for ``conv_forward`` (:func:`convnet.kernels.register_kernel`)
must come with one for ``conv_backward``.
"""

from __future__ import annotations

import math
import threading

from convnet.kernels import array_module, array_module_name, kernel
from convnet.kernels.conv import winograd

# None: choose per layer; "nchw", "chwn", "cases" or "winograd": force it (tests)
LAYOUT: str | None = None
WINOGRAD = True  # False: no Winograd unless LAYOUT forces it (--no-winograd: direct conv rounding)

_SCRATCH = threading.local()
_SCRATCH_LIMIT = 256 << 20  # bytes: larger temporaries are not kept between calls
CHUNK_BYTES = 2 << 20  # chwn conv: size of one block of columns (about the L2 cache)


def _scratch(xp, name: str, shape, dtype, zero: bool = False):
    """A per-thread reusable temporary (saves the page faults of a fresh allocation).

    Only for arrays that never leave the kernel; each ``name`` has one buffer.
    """
    size = math.prod(shape)
    dtype = xp.dtype(dtype)
    if size * dtype.itemsize > _SCRATCH_LIMIT:
        return xp.zeros(shape, dtype) if zero else xp.empty(shape, dtype)
    try:
        bufs = _SCRATCH.bufs
    except AttributeError:
        bufs = _SCRATCH.bufs = {}
    key = (name, array_module_name(xp), dtype.str)
    buf = bufs.get(key)
    if buf is None or buf.size < size:
        buf = xp.empty(size, dtype)
        bufs[key] = buf
    out = buf[:size].reshape(shape)
    if zero:
        out.fill(0)
    return out


CASES_MIN_PIXELS = 512  # output maps at least this large take the ``cases`` layout


def conv_layout(filters: int, modules: int, filter_sizes, paddings, strides, channels,
                groups) -> str:
    """The column order of a conv layer (see the module docstring); public because what
    a conv layer keeps for its backward pass, and so the memory estimate, depends on it.

    ``LAYOUT = "winograd"`` forces Winograd wherever its geometry allows it (else the
    choice below is made as if it were unset); the other values force their layout."""
    if LAYOUT == "winograd" and _winograd_geometry(modules, filter_sizes, paddings, strides):
        return "winograd"
    if LAYOUT not in (None, "winograd"):
        return LAYOUT
    if LAYOUT is None and WINOGRAD and _winograd_pays(filters, modules, filter_sizes,
                                                      paddings, strides, channels, groups):
        return "winograd"
    if modules * modules >= CASES_MIN_PIXELS:
        return "cases"
    k = sum(c // g * fs * fs for c, g, fs in zip(channels, groups, filter_sizes))
    return "chwn" if k >= 4 * filters else "nchw"


def _winograd_geometry(modules, filter_sizes, paddings, strides) -> bool:
    """Stride 1, one filter size r for all inputs with a Winograd tile for it, and
    paddings of at most r - 1 (the input gradient is then a stride-1 conv too)."""
    r = filter_sizes[0]
    return (all(s == 1 for s in strides) and all(fs == r for fs in filter_sizes)
            and r >= 2 and winograd.output_tile(modules, r) > 0
            and all(p <= r - 1 for p in paddings))


def _winograd_pays(filters, modules, filter_sizes, paddings, strides, channels, groups) -> bool:
    """Winograd where it cuts the multiply-adds by :data:`winograd.MIN_GAIN` and the
    GEMMs per tile position are not thin (filters and channels per group at least
    :data:`winograd.MIN_CHANNELS`)."""
    if not _winograd_geometry(modules, filter_sizes, paddings, strides) or filter_sizes[0] < 3:
        return False
    thin = min(min(c // g for c, g in zip(channels, groups)),
               min(filters // g for g in groups)) < winograd.MIN_CHANNELS
    return not thin and winograd.gain(modules, filter_sizes[0]) >= winograd.MIN_GAIN


def out_size(img_size: int, filter_size: int, padding: int, stride: int) -> int:
    """cuda-convnet2's ``modulesX = 1 + ceil((2*padding + imgSize - filterSize) / stride)``."""
    return 1 + -(-(2 * padding + img_size - filter_size) // stride)


def _pad_span(modules: int, filter_size: int, stride: int) -> int:
    """Side of the padded buffer that holds every window."""
    return (modules - 1) * stride + filter_size


def _padded_cn(xp, x, padding: int, total: int):
    """x (N, C, H, H) -> zero-padded (C, N, total, total), x at offset ``padding``
    (a scratch buffer)."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    out = _scratch(xp, "pad_cn", (c, n, total, total), x.dtype, zero=True)
    if keep:
        out[:, :, padding:padding + keep, padding:padding + keep] = \
            x[:, :, :keep, :keep].transpose(1, 0, 2, 3)
    return out


def _padded_hw(xp, x, padding: int, total: int):
    """x (N, C, H, H) -> zero-padded (total, total, C, N), x at offset ``padding``
    (a scratch buffer)."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    out = _scratch(xp, "pad_hw", (total, total, c, n), x.dtype, zero=True)
    if keep:
        out[padding:padding + keep, padding:padding + keep] = \
            x[:, :, :keep, :keep].transpose(2, 3, 1, 0)
    return out


def _as_strided(xp, a, shape, strides):
    return xp.lib.stride_tricks.as_strided(a, shape=shape, strides=strides)


def _cols_conv(xp, x, fs: int, padding: int, stride: int, modules: int, keep: bool = True):
    """cols (C*fs*fs, N*M*M) for a conv input, rows in (c, ky, kx) order; a scratch
    buffer unless ``keep``."""
    n, c = x.shape[0], x.shape[1]
    total = _pad_span(modules, fs, stride)
    xpad = _padded_cn(xp, x, padding, total)
    sc, sn, sy, sx = xpad.strides
    view = _as_strided(xp, xpad, (c, fs, fs, n, modules, modules),
                       (sc, sy, sx, sn, stride * sy, stride * sx))
    shape = (c, fs, fs, n, modules, modules)
    cols = xp.empty(shape, dtype=x.dtype) if keep else _scratch(xp, "cols_nchw", shape, x.dtype)
    cols[...] = view
    return cols.reshape(c * fs * fs, n * modules * modules)


def _cols_local(xp, x, fs: int, padding: int, stride: int, modules: int, keep: bool = True):
    """cols (M*M, C*fs*fs, N) for a local input; a scratch buffer unless ``keep``."""
    n, c = x.shape[0], x.shape[1]
    total = _pad_span(modules, fs, stride)
    xpad = _padded_hw(xp, x, padding, total)
    sy, sx, sc, sn = xpad.strides
    view = _as_strided(xp, xpad, (modules, modules, c, fs, fs, n),
                       (stride * sy, stride * sx, sc, sy, sx, sn))
    shape = (modules, modules, c, fs, fs, n)
    cols = xp.empty(shape, dtype=x.dtype) if keep else _scratch(xp, "cols_local", shape, x.dtype)
    cols[...] = view
    return cols.reshape(modules * modules, c * fs * fs, n)


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
    filters = ws[0].shape[0]
    geom = _ConvGeometry(filter_sizes, paddings, strides, channels, groups, img_sizes, modules)
    layout = geom.layout(filters)
    if layout == "winograd":
        return _conv_forward_winograd(xp, xs, ws, b, geom, keep_cache)
    if layout == "cases":
        return _conv_forward_cases(xp, xs, ws, b, geom)
    if layout == "chwn":
        return _conv_forward_chwn(xp, xs, ws, b, geom, keep_cache)
    return _conv_forward_nchw(xp, xs, ws, b, geom, keep_cache)


@kernel
def conv_backward(gy, xs, ws, cache, need_dx, *, filter_sizes, paddings, strides, channels,
                  groups, img_sizes, modules, shared_biases=True):
    """Gradients of :func:`conv_forward`: ``(dxs, dws, db)``.

    ``dxs[i]`` is None where ``need_dx[i]`` is false; ``dxs[i]`` has the shape
    of ``xs[i]``.  Weight and bias gradients are sums over the cases.
    """
    xp = array_module(gy)
    filters = ws[0].shape[0]
    geom = _ConvGeometry(filter_sizes, paddings, strides, channels, groups, img_sizes, modules)
    if cache is not None:
        layout, saved = cache
    else:
        layout = geom.layout(filters)
        saved = None
    if layout == "winograd":
        return _conv_backward_winograd(xp, gy, xs, ws, saved, need_dx, geom, shared_biases)
    if layout == "cases":
        return _conv_backward_cases(xp, gy, xs, ws, need_dx, geom, shared_biases)
    if layout == "chwn":
        return _conv_backward_chwn(xp, gy, xs, ws, saved, need_dx, geom, shared_biases)
    return _conv_backward_nchw(xp, gy, xs, ws, saved, need_dx, geom, shared_biases)


class _ConvGeometry:
    """Per-input geometry of a conv or local layer."""

    def __init__(self, filter_sizes, paddings, strides, channels, groups, img_sizes, modules):
        self.fs, self.pad, self.stride = filter_sizes, paddings, strides
        self.channels, self.groups, self.img = channels, groups, img_sizes
        self.modules = modules

    def span(self, i: int) -> int:
        return _pad_span(self.modules, self.fs[i], self.stride[i])

    def layout(self, filters: int) -> str:
        return conv_layout(filters, self.modules, self.fs, self.pad, self.stride,
                           self.channels, self.groups)


# ------------------------------------------------------- conv, nchw columns

def _conv_forward_nchw(xp, xs, ws, b, geom, keep_cache):
    n = xs[0].shape[0]
    filters = ws[0].shape[0]
    modules = geom.modules
    p = modules * modules
    acc = None
    cols_all = []
    for i, (x, w) in enumerate(zip(xs, ws)):
        x = _as_image(x, geom.channels[i], geom.img[i])
        cols = _cols_conv(xp, x, geom.fs[i], geom.pad[i], geom.stride[i], modules, keep_cache)
        g = geom.groups[i]
        wm = w.reshape(filters, -1)
        if g == 1:
            if acc is None:
                acc = xp.matmul(wm, cols, out=_scratch(xp, "acc_nchw", (filters, n * p),
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


def _conv_backward_nchw(xp, gy, xs, ws, cols_all, need_dx, geom, shared_biases):
    n = gy.shape[0]
    filters = ws[0].shape[0]
    modules = geom.modules
    p = modules * modules
    if cols_all is None:
        cols_all = [None] * len(xs)
    gt = _scratch(xp, "gt_nchw", (filters, n, p), gy.dtype)
    gt[...] = gy.reshape(n, filters, p).transpose(1, 0, 2)
    gt = gt.reshape(filters, n * p)
    db = gt.sum(axis=1) if shared_biases else \
        gt.reshape(filters, n, modules, modules).sum(axis=1)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs = geom.fs[i]
        cols = cols_all[i]
        if cols is None:
            cols = _cols_conv(xp, _as_image(x, geom.channels[i], geom.img[i]), fs, geom.pad[i],
                              geom.stride[i], modules, keep=False)
        g = geom.groups[i]
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
        dxs.append(_conv_dx_nchw(xp, gt, wm, geom, i, n).reshape(x.shape))
    return dxs, dws, db


def _conv_dx_nchw(xp, gt, wm, geom, i: int, n: int):
    """dx of input i from the output gradient gt (F, N*M*M): the column gradient
    W.T @ gt, group by group, scattered back by :func:`_col2im_conv`."""
    g = geom.groups[i]
    filters, kg = wm.shape
    fg = filters // g
    dcols = _scratch(xp, "dcols", (g * kg, gt.shape[1]), gt.dtype)
    for gi in range(g):
        fsl = slice(gi * fg, (gi + 1) * fg)
        xp.matmul(wm[fsl].T, gt[fsl], out=dcols[gi * kg:(gi + 1) * kg])
    shape = (n, geom.channels[i], geom.img[i], geom.img[i])
    return _col2im_conv(xp, dcols, shape, geom.fs[i], geom.pad[i], geom.stride[i], geom.modules)


# ------------------------------------------------------- conv, chwn blocks

def _blocks(rows: int, cols: int, unit_bytes: int):
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


def _block_size(rows: int, cols: int, unit_bytes: int) -> int:
    return max((y1 - y0) * (x1 - x0) for y0, y1, x0, x1 in _blocks(rows, cols, unit_bytes))


def _zero_border(a, lo: int, inner: int) -> None:
    """Zero a (C, T, T, N) buffer outside its [lo, lo + inner)^2 interior."""
    t = a.shape[1]
    hi = lo + inner
    if lo > 0:
        a[:, :lo] = 0
        a[:, lo:hi, :lo] = 0
    if hi < t:
        a[:, hi:] = 0
        a[:, lo:hi, hi:] = 0


def _padded_chwn_buffer(xp, x, padding: int, total: int, name: str | None):
    """x (N, C, H, H) -> zero-padded (C, total, total, N); a scratch buffer when
    ``name`` is given, else a fresh array."""
    n, c, h, _ = x.shape
    keep = max(0, min(h, total - padding))
    shape = (c, total, total, n)
    out = _scratch(xp, name, shape, x.dtype) if name else xp.empty(shape, dtype=x.dtype)
    if keep == 0:
        out.fill(0)
        return out
    _zero_border(out, padding, keep)
    out[:, padding:padding + keep, padding:padding + keep] = \
        x[:, :, :keep, :keep].transpose(1, 2, 3, 0)
    return out


class _Columns:
    """Column blocks of a padded (C, T, T, N) source: the window view
    (C, fs, fs, rows, cols, N) is made once, each block is a slice of it copied
    into one scratch buffer sized for the largest block."""

    def __init__(self, xp, src, fs: int, stride: int, rows: int, cols: int, block: int,
                 name: str):
        c, n = src.shape[0], src.shape[3]
        sc, sy, sx, sn = src.strides
        self.win = _as_strided(xp, src, (c, fs, fs, rows, cols, n),
                               (sc, sy, sx, stride * sy, stride * sx, sn))
        self.k = c * fs * fs
        self.head = (c, fs, fs)
        self.n = n
        self.buf = _scratch(xp, name, (self.k * block * n,), src.dtype)

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


def _conv_forward_chwn(xp, xs, ws, b, geom, keep_cache):
    """Cases-innermost conv: per block of output pixels, one column block
    (C*fs*fs, pixels*N) in cache-sized scratch and one GEMM per group."""
    n = xs[0].shape[0]
    filters = ws[0].shape[0]
    m = geom.modules
    dtype = xs[0].dtype
    xpads = []
    for i, x in enumerate(xs):
        x = _as_image(x, geom.channels[i], geom.img[i])
        xpads.append(_padded_chwn_buffer(xp, x, geom.pad[i], geom.span(i),
                                         None if keep_cache else f"xpad{i}"))
    k = max(w[0].size * g for w, g in zip(ws, geom.groups))
    unit = n * max(k, filters) * xp.dtype(dtype).itemsize
    blocks = list(_blocks(m, m, unit))
    biggest = _block_size(m, m, unit)
    out_buf = _scratch(xp, "conv_out", (filters, biggest * n), dtype)
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


def _conv_backward_chwn(xp, gy, xs, ws, xpads, need_dx, geom, shared_biases):
    """Backward of :func:`_conv_forward_chwn`, block by block of output pixels.

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
    item = xp.dtype(dtype).itemsize
    g4 = gy.reshape(n, filters, m, m)
    db = g4.sum(axis=(0, 2, 3)) if shared_biases else g4.sum(axis=0)
    gt = _scratch(xp, "gt", (filters, m, m, n), dtype)
    gt[...] = g4.transpose(1, 2, 3, 0)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs, pad, stride, g = geom.fs[i], geom.pad[i], geom.stride[i], geom.groups[i]
        img, c = geom.img[i], geom.channels[i]
        xpad = xpads[i] if xpads is not None else _padded_chwn_buffer(
            xp, _as_image(x, c, img), pad, geom.span(i), "xpad")
        wm = w.reshape(filters, -1)
        k = wm.shape[1] * g
        # dW = sum over blocks of gt_block @ cols_block.T
        dwt = _scratch(xp, "dwt", (wm.shape[1], filters), dtype)
        tmp = None
        unit = n * max(k, filters) * item
        columns = _Columns(xp, xpad, fs, stride, m, m, _block_size(m, m, unit), "cols0")
        for bi, (y0, y1, x0, x1) in enumerate(_blocks(m, m, unit)):
            cols = columns(y0, y1, x0, x1)
            gmat = gt[:, y0:y1, x0:x1].reshape(filters, -1)
            if bi == 0:
                _gemm_groups_dwt(xp, gmat, cols, dwt, g)
            else:
                if tmp is None:
                    tmp = _scratch(xp, "dw_tmp", dwt.shape, dtype)
                _gemm_groups_dwt(xp, gmat, cols, tmp, g)
                dwt += tmp
        dws.append(xp.ascontiguousarray(dwt.T).reshape(w.shape))
        if not need_dx[i]:
            dxs.append(None)
            continue
        if stride == 1 and pad <= fs - 1:
            dx = _conv_dx_correlation(xp, gt, wm, n, c, img, fs, pad, g)
        else:
            dx = _conv_dx_scatter(xp, gt, wm, n, c, img, fs, pad, stride, g, m)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db


def _gemm_groups_dwt(xp, gmat, cols, out, groups: int) -> None:
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
    gpad = _scratch(xp, "gpad", (filters, side, side, n), dtype)
    keep = min(m, side - lo)
    _zero_border(gpad, lo, keep)
    gpad[:, lo:lo + keep, lo:lo + keep] = gt[:, :keep, :keep]
    fg, cg = filters // groups, c // groups
    # flipped filters, one (C_g, F_g*fs*fs) matrix per group
    w5 = wm.reshape(groups, fg, cg, fs, fs)[:, :, :, ::-1, ::-1]
    wflip = _scratch(xp, "wflip", (groups, cg, fg, fs, fs), dtype)
    wflip[...] = w5.transpose(0, 2, 1, 3, 4)
    wflip = wflip.reshape(groups, cg, fg * fs * fs)
    unit = n * max(filters * fs * fs, c) * xp.dtype(dtype).itemsize
    biggest = _block_size(img, img, unit)
    out_buf = _scratch(xp, "dx_out", (c, biggest * n), dtype)
    columns = _Columns(xp, gpad, fs, 1, img, img, biggest, "cols0")
    dx = xp.empty((n, c, img, img), dtype=dtype)
    kg = fg * fs * fs
    for y0, y1, x0, x1 in _blocks(img, img, unit):
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
    total = _pad_span(m, fs, stride)
    acc = _scratch(xp, "col2im", (c, total, total, n), dtype, zero=True)
    fg, kg = filters // groups, wm.shape[1]
    unit = n * max(c * fs * fs, filters) * xp.dtype(dtype).itemsize
    dbuf = _scratch(xp, "dcols", (c * fs * fs, _block_size(m, m, unit) * n), dtype)
    for y0, y1, x0, x1 in _blocks(m, m, unit):
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
    return _crop(xp, acc.transpose(3, 0, 1, 2), (n, c, img, img), pad, total)


# ------------------------------------------------------ conv, blocks of cases

def _per_block(unit_bytes: int, count: int) -> int:
    """Units (cases, channels) per block of about CHUNK_BYTES (at least one)."""
    return max(1, min(count, CHUNK_BYTES // max(1, unit_bytes)))


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
        self.xpad = _scratch(xp, f"case_pad{i}", (block, self.c, self.total, self.total), dtype)
        _zero_border(self.xpad.reshape(block * self.c, self.total, self.total, 1), self.pad,
                     self.keep)
        self.buf = _scratch(xp, f"case_cols{i}", (block * self.k * self.m * self.m,), dtype)

    def __call__(self, b0: int, b1: int):
        nb, c, fs, m, s = b1 - b0, self.c, self.fs, self.m, self.stride
        pad, keep = self.pad, self.keep
        xpad = self.xpad[:nb]
        if keep:
            xpad[:, :, pad:pad + keep, pad:pad + keep] = self.x[b0:b1, :, :keep, :keep]
        sb, sc, sy, sx = xpad.strides
        if self.order == "bkp":
            shape = (nb, c, fs, fs, m, m)
            view = _as_strided(self.xp, xpad, shape, (sb, sc, sy, sx, s * sy, s * sx))
            cols = self.buf[:nb * self.k * m * m].reshape(shape)
            cols[...] = view
            return cols.reshape(nb, self.k, m * m)
        shape = (c, fs, fs, nb, m, m)
        view = _as_strided(self.xp, xpad, shape, (sc, sy, sx, sb, s * sy, s * sx))
        cols = self.buf[:nb * self.k * m * m].reshape(shape)
        cols[...] = view
        return cols.reshape(self.k, nb * m * m)


def _conv_forward_cases(xp, xs, ws, b, geom):
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
    block = _per_block(max(k, filters) * p * item, n)
    columns = [_CaseColumns(xp, _as_image(x, geom.channels[i], geom.img[i]), geom, i, block,
                            "bkp") for i, x in enumerate(xs)]
    wms = [w.reshape(filters, -1) for w in ws]
    y = xp.empty((n, filters, p), dtype=dtype)
    tmp = _scratch(xp, "case_out", (block, filters, p), dtype) if len(xs) > 1 else None
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


def _conv_backward_cases(xp, gy, xs, ws, need_dx, geom, shared_biases):
    """Backward of :func:`_conv_forward_cases`.  Weight gradients: per block of cases,
    the columns in (K, B*M*M) order and the output gradient in (F, B*M*M) order, one
    GEMM per group.  Input gradients as in the nchw layout (the large maps of this
    layout make its scatter of the column gradient cheaper than the chwn ways)."""
    n = gy.shape[0]
    filters = ws[0].shape[0]
    m = geom.modules
    p = m * m
    dtype = gy.dtype
    item = xp.dtype(dtype).itemsize
    g3 = gy.reshape(n, filters, p)
    db = g3.sum(axis=(0, 2)) if shared_biases else g3.sum(axis=0).reshape(filters, m, m)
    k = max(w[0].size * g for w, g in zip(ws, geom.groups))
    block = _per_block(max(k, filters) * p * item, n)
    gbuf = _scratch(xp, "case_gt", (filters, block, p), dtype)
    wms = [w.reshape(filters, -1) for w in ws]
    dwts = [_scratch(xp, f"dwt{i}", (wm.shape[1], filters), dtype) for i, wm in enumerate(wms)]
    tmp = _scratch(xp, "dw_tmp", (k, filters), dtype)
    columns = [_CaseColumns(xp, _as_image(x, geom.channels[i], geom.img[i]), geom, i, block,
                            "kbp") for i, x in enumerate(xs)]
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        gt = gbuf[:, :b1 - b0]
        gt[...] = g3[b0:b1].transpose(1, 0, 2)
        gmat = gt.reshape(filters, -1)
        for i, dwt in enumerate(dwts):
            cols = columns[i](b0, b1)
            if b0 == 0:
                _gemm_groups_dwt(xp, gmat, cols, dwt, geom.groups[i])
            else:
                part = tmp[:dwt.shape[0]]
                _gemm_groups_dwt(xp, gmat, cols, part, geom.groups[i])
                dwt += part
    dxs = []
    gt_full = None
    for i, x in enumerate(xs):
        if not need_dx[i]:
            dxs.append(None)
            continue
        if gt_full is None:
            gt_full = _scratch(xp, "gt_nchw", (filters, n, p), dtype)
            gt_full[...] = g3.transpose(1, 0, 2)
        dxs.append(_conv_dx_nchw(xp, gt_full.reshape(filters, n * p), wms[i], geom, i,
                                 n).reshape(x.shape))
    return dxs, [xp.ascontiguousarray(dwt.T).reshape(w.shape) for dwt, w in zip(dwts, ws)], db


# ------------------------------------------------------------ conv, Winograd

def _transform(xp, matrix, src, out) -> None:
    """``out[b, p] = sum_q matrix[p][q] * src[b, q]`` over the arrays' axis 1 (axis 0 is a
    batch): one GEMM per batch entry with the small matrix on the left.  ``src`` may be
    any strided view; it is copied into a contiguous array first (one pass over memory,
    which the GEMM then reads once: sums of strided slices would read each slice once
    per non-zero coefficient).  ``out`` may be a slice along axis 2 of a contiguous
    array (its trailing axes contiguous)."""
    mat = xp.asarray(matrix, dtype=out.dtype)
    if not src.flags.c_contiguous:
        src = xp.ascontiguousarray(src)
    batch, q, p = src.shape[0], src.shape[1], out.shape[1]
    rest = math.prod(out.shape[2:])
    xp.matmul(mat, src.reshape(batch, q, rest),
              out=_as_strided(xp, out, (batch, p, rest), out.strides[:2] + out.strides[-1:]))


def _tiles_transformed(xp, src, matrix, m: int, t: int):
    """``matrix`` (p, q) applied along both axes of every q x q window of a padded
    (C, S, S, N) source whose windows start every m pixels, T x T of them:
    (p*p, C, T*T*N).  Per block of channels whose intermediates stay in the cache
    (about :data:`CHUNK_BYTES`; 5x faster than whole arrays for ImageNet's conv2):
    rows first, on whole padded rows (each source row enters q/m windows), then the
    columns of those."""
    p, q = len(matrix), len(matrix[0])
    c, side, _, n = src.shape
    item = src.dtype.itemsize
    out = xp.empty((p, p, c, t, t, n), src.dtype)
    mat = xp.asarray(matrix, dtype=src.dtype)
    block = _per_block((p * side + p * q * t) * t * n * item, c)
    for c0 in range(0, c, block):
        sub = src[c0:c0 + block]
        k = sub.shape[0]
        sc, sy, sx, sn = sub.strides
        row_windows = _as_strided(xp, sub, (1, q, k, t, side, n), (0, sy, sc, m * sy, sx, sn))
        rows = xp.empty((p, k, t, side, n), src.dtype)
        _transform(xp, mat, row_windows, rows[None])
        sp, sc, sy, sx, sn = rows.strides
        col_windows = _as_strided(xp, rows, (p, q, k, t, t, n), (sp, sx, sc, sy, m * sx, sn))
        _transform(xp, mat, col_windows, out[:, :, c0:c0 + k])
    return out.reshape(p * p, c, t * t * n)


def _winograd_input(xp, x, pad: int, r: int, m: int, t: int, bt):
    """``B^T d B`` of every input tile: (a*a, C, T*T*N), tile (ty, tx) of case n
    starting at pixel (ty*m, tx*m) of the zero-padded input."""
    xpad = _padded_chwn_buffer(xp, x, pad, t * m + r - 1, None)
    return _tiles_transformed(xp, xpad, bt, m, t)


def _winograd_weights(xp, w, m: int):
    """``G w G^T`` per filter and channel, (a*a, F, C/groups): one GEMM of the
    (a*a, r*r) Kronecker product ``G (x) G`` with the filters' r*r weights."""
    f, c, r = w.shape[0], w.shape[1], w.shape[2]
    kron = winograd.kronecker(m, r)
    u = xp.matmul(xp.asarray(kron, dtype=w.dtype), w.reshape(f * c, r * r).T)
    return u.reshape(len(kron), f, c)


def _winograd_output(xp, acc, at, m: int, modules: int, dtype):
    """``A^T M A`` of every tile's products (a, a, F, T, T, N) -> (N, F, M, M), per
    block of filters whose intermediates stay in the cache."""
    a, filters, t, n = acc.shape[0], acc.shape[2], acc.shape[3], acc.shape[5]
    mat = xp.asarray(at, dtype=dtype)
    y = xp.empty((n, filters, modules, modules), dtype=dtype)
    full = y if modules == t * m else xp.empty((n, filters, t * m, t * m), dtype)
    tiled = full.reshape(n, filters, t, m, t, m)
    item = xp.dtype(dtype).itemsize
    block = _per_block((a * a + m * a + m * m) * t * t * n * item, filters)
    for f0 in range(0, filters, block):
        products = acc[:, :, f0:f0 + block]
        k = products.shape[2]
        rows = xp.empty((m, a, k, t, t, n), dtype)
        _transform(xp, mat, products[None], rows[None])
        blocks = xp.empty((m, m, k, t, t, n), dtype)
        _transform(xp, mat, rows, blocks)
        tiled[:, f0:f0 + k] = blocks.transpose(5, 2, 3, 0, 4, 1)   # (N, F, ty, i, tx, k)
    if full is not y:
        y[...] = full[:, :, :modules, :modules]
    return y


def _winograd_tiling(geom):
    """(r, m, a, T) of a layer's Winograd conv: filter size, output tile, input tile,
    tiles along a side."""
    r = geom.fs[0]
    m = winograd.output_tile(geom.modules, r)
    return r, m, m + r - 1, winograd.tiles(geom.modules, m)


def _conv_forward_winograd(xp, xs, ws, b, geom, keep_cache):
    """Stride-1 conv by Winograd's minimal filtering (:mod:`convnet.kernels.conv.winograd`):
    per input and group, one batched GEMM over the a*a tile positions,
    (F_g, C_g) @ (C_g, T*T*N).  Keeps the transformed inputs for the backward pass."""
    r, m, a, t = _winograd_tiling(geom)
    at, _, bt = winograd.transforms(m, r)
    n, filters, dtype = xs[0].shape[0], ws[0].shape[0], xs[0].dtype
    vs = [_winograd_input(xp, _as_image(x, geom.channels[i], geom.img[i]), geom.pad[i], r, m,
                          t, bt) for i, x in enumerate(xs)]
    acc = xp.empty((a * a, filters, t * t * n), dtype)
    for i, (v, w) in enumerate(zip(vs, ws)):
        u = _winograd_weights(xp, w, m)
        fg, cg = filters // geom.groups[i], w.shape[1]
        for gi in range(geom.groups[i]):
            f0, c0 = gi * fg, gi * cg
            product = xp.matmul(u[:, f0:f0 + fg], v[:, c0:c0 + cg],
                                out=None if i else acc[:, f0:f0 + fg])
            if i:
                acc[:, f0:f0 + fg] += product
    y = _winograd_output(xp, acc.reshape(a, a, filters, t, t, n), at, m, geom.modules, dtype)
    mm = geom.modules
    y += b.reshape(1, filters, 1, 1) if b.ndim == 1 else b.reshape(1, filters, mm, mm)
    return y, ("winograd", vs if keep_cache else None)


def _winograd_output_gradient(xp, g4, at, m: int, t: int):
    """``A dY A^T`` of every m x m block of the output gradient (zeros past the map):
    (a*a, F, T*T*N), the transpose of :func:`_winograd_output`."""
    gpad = _padded_chwn_buffer(xp, g4, 0, t * m, None)
    return _tiles_transformed(xp, gpad, tuple(zip(*at)), m, t)  # A (a, m)


def _winograd_input_gradient(xp, dv, bt, m: int, t: int, pad: int, img: int, n: int):
    """The transpose of :func:`_winograd_input`: the gradients of the transformed tiles
    (a*a, C, T*T*N) back to the input (N, C, img, img): ``B dV B^T`` per tile, each tile
    added into the padded input where it came from (columns first, then rows), per
    block of channels whose intermediates stay in the cache."""
    a, c = len(bt), dv.shape[1]
    side = t * m + a - m
    span = m * (t - 1) + 1
    b_mat = xp.asarray(tuple(zip(*bt)), dtype=dv.dtype)  # B (a, a)
    grads = dv.reshape(a, a, c, t, t, n)
    dxpad = xp.zeros((c, side, side, n), dv.dtype)
    block = _per_block((2 * a * a * t + a * side) * t * n * dv.dtype.itemsize, c)
    for c0 in range(0, c, block):
        k = min(block, c - c0)
        rows = xp.empty((1, a, a, k, t, t, n), dv.dtype)
        _transform(xp, b_mat, grads[None, :, :, c0:c0 + k], rows)
        tiles = xp.empty((a, a, k, t, t, n), dv.dtype)
        _transform(xp, b_mat, rows[0], tiles)
        cols = xp.zeros((a, k, t, side, n), dv.dtype)  # tile rows, whole padded columns
        for l in range(a):
            cols[:, :, :, l:l + span:m] += tiles[:, l]
        for j in range(a):
            dxpad[c0:c0 + k, j:j + span:m] += cols[j]
    return xp.ascontiguousarray(dxpad[:, pad:pad + img, pad:pad + img].transpose(3, 0, 1, 2))


def _conv_backward_winograd(xp, gy, xs, ws, vs, need_dx, geom, shared_biases):
    """Backward of :func:`_conv_forward_winograd`, the exact transpose of its algorithm.

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
        v = vs[i] if vs is not None else _winograd_input(
            xp, _as_image(x, c, img), geom.pad[i], r, m, t, bt)
        fg, cg = filters // groups, w.shape[1]
        du = xp.empty((a * a, filters, cg), gy.dtype)
        for gi in range(groups):
            f0, c0 = gi * fg, gi * cg
            xp.matmul(gt[:, f0:f0 + fg], v[:, c0:c0 + cg].transpose(0, 2, 1),
                      out=du[:, f0:f0 + fg])
        # dW = G^T dU G for every filter and channel: the transpose of _winograd_weights
        dws.append(xp.matmul(du.reshape(a * a, filters * cg).T, kron).reshape(w.shape))
        if not need_dx[i]:
            dxs.append(None)
            continue
        u = _winograd_weights(xp, w, m)
        dv = xp.empty((a * a, c, t * t * n), gy.dtype)
        for gi in range(groups):
            f0, c0 = gi * fg, gi * cg
            xp.matmul(u[:, f0:f0 + fg].transpose(0, 2, 1), gt[:, f0:f0 + fg],
                      out=dv[:, c0:c0 + cg])
        dx = _winograd_input_gradient(xp, dv, bt, m, t, geom.pad[i], img, n)
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
        cols = _cols_local(xp, x, filter_sizes[i], paddings[i], strides[i], modules,
                           keep_cache)  # (P, K, N)
        g = groups[i]
        wm = w.reshape(p, filters, -1)
        if g == 1:
            if acc is None:
                acc = xp.matmul(wm, cols, out=_scratch(xp, "acc_local", (p, filters, n),
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
                   groups, img_sizes, modules):
    """Gradients of :func:`local_forward`: ``(dxs, dws, db)``."""
    xp = array_module(gy)
    n = gy.shape[0]
    p, filters = ws[0].shape[0], ws[0].shape[1]
    gp = _scratch(xp, "gp_local", (p, filters, n), gy.dtype)
    gp[...] = gy.reshape(n, filters, p).transpose(2, 1, 0)  # (P, F, N)
    db = gy.reshape(n, filters, modules, modules).sum(axis=0)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs = filter_sizes[i]
        cols = cache[i] if cache is not None and cache[i] is not None else \
            _cols_local(xp, _as_image(x, channels[i], img_sizes[i]), fs, paddings[i], strides[i],
                        modules, keep=False)
        wm = w.reshape(p, filters, -1)
        dws.append(local_weight_grad(xp, gp, cols, wm, groups[i]).reshape(w.shape))
        if not need_dx[i]:
            dxs.append(None)
            continue
        dcols = local_cols_grad(xp, wm, gp, groups[i],
                                _scratch(xp, "dcols_local", (p, wm.shape[2] * groups[i], n),
                                         gy.dtype))
        shape = (n, channels[i], img_sizes[i], img_sizes[i])
        dx = _col2im_local(xp, dcols, shape, fs, paddings[i], strides[i], modules)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db
