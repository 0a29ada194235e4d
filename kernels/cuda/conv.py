"""CUDA conv and local layers: im2col and col2im as single kernels, GEMMs in cuBLAS.

The generic kernels (:mod:`convnet.kernels.conv`) build the columns from a
zero-padded copy of the input and scatter the column gradient back with one
strided add per filter offset (121 passes for an 11x11 filter).  Here:

* ``cvn_conv_im2col`` / ``cvn_local_im2col`` read each column element
  straight from the input (out-of-image taps give 0): one pass, no padded copy;
* ``cvn_conv_col2im`` / ``cvn_local_col2im`` gather, for each input pixel, the
  column entries of the windows that cover it: one pass, no atomics, and the
  same order of additions as the generic scatter;
* the bias is added while the GEMM result is transposed to (N, F, M, M)
  (``cvn_conv_bias_out`` / ``cvn_local_bias_out``): one pass instead of two;
* GEMMs go to cuBLAS through ``xp.matmul`` (batched for local layers), one per
  group, writing straight into the accumulator where possible;
* no per-thread scratch buffers (CuPy's memory pool is stream-ordered, and a
  buffer reused across the streams of several logical devices would race).

Columns are always (C*fs*fs, N*M*M) for conv and (M*M, C*fs*fs, N) for local.
Padding is at least 0 and stride at least 1 (the config parser's rules).
The forward cache is a :class:`ColsCache`; the backward pass also accepts the
generic forward's cache (it then rebuilds the columns).

The columns are not kept from the forward pass to the backward pass: the backward
pass rebuilds them with one im2col kernel.  Kept, they were most of a GPU step's
memory (about 1.8 GB of AlexNet's at minibatch 128, against its 0.5 GB of
activations), for one pass over them saved per layer; with the environment
variable ``CONVNET_CUDA_KEEP_COLUMNS=1`` they are kept (:data:`KEEP_COLUMNS`, which
the memory estimate reads too: :func:`convnet.config.layer_types.memory_rules.cuda_conv_memory`).
The CPU kernels keep theirs (:mod:`convnet.kernels.conv.choice`), where rebuilding
measured 2-3% slower (docs/CUDA.md, "Memory").

With ``CONVNET_CUDNN=1`` the conv layers go to cuDNN instead
(:mod:`convnet.kernels.cuda.cudnn_conv`), which needs no columns at all; these kernels
stay the fallback (geometries cuDNN cannot express) and the reference.
"""

from __future__ import annotations

import os

from .. import conv as _generic_conv
from ..conv.local import local_cols_grad, local_weight_grad
from . import cudnn_conv
from .kernel_set import KERNEL_DTYPES, contiguous, current

#: Keep the columns from the forward pass for the backward pass (see the module docstring).
KEEP_COLUMNS = os.environ.get("CONVNET_CUDA_KEEP_COLUMNS", "").strip() == "1"


class ColsCache:
    """Columns of each input kept by the forward pass (None: not kept)."""

    __slots__ = ("cols",)

    def __init__(self, cols):
        self.cols = cols


def _image(x, channels: int, img: int):
    return contiguous(x).reshape(x.shape[0], channels, img, img)


def im2col_conv(x, channels, img, fs, pad, stride, mods):
    """(C*fs*fs, N*M*M) columns of image batch x (N, C, img, img)."""
    ks = current()
    n = x.shape[0]
    cols = ks.xp.empty((channels * fs * fs, n * mods * mods), dtype=x.dtype)
    ks.kernel("cvn_conv_im2col")(_image(x, channels, img), n, channels, img, fs, pad, stride,
                                 mods, cols)
    return cols


def col2im_conv(dcols, n, channels, img, fs, pad, stride, mods):
    ks = current()
    dx = ks.xp.empty((n, channels, img, img), dtype=dcols.dtype)
    ks.kernel("cvn_conv_col2im")(contiguous(dcols), n, channels, img, fs, pad, stride, mods, dx)
    return dx


def im2col_local(x, channels, img, fs, pad, stride, mods):
    """(M*M, C*fs*fs, N) columns of image batch x."""
    ks = current()
    n = x.shape[0]
    cols = ks.xp.empty((mods * mods, channels * fs * fs, n), dtype=x.dtype)
    ks.kernel("cvn_local_im2col")(_image(x, channels, img), n, channels, img, fs, pad, stride,
                                  mods, cols)
    return cols


def col2im_local(dcols, n, channels, img, fs, pad, stride, mods):
    ks = current()
    dx = ks.xp.empty((n, channels, img, img), dtype=dcols.dtype)
    ks.kernel("cvn_local_col2im")(contiguous(dcols), n, channels, img, fs, pad, stride, mods, dx)
    return dx


# --------------------------------------------------------------------- conv

def _by_cudnn(dtype, geometry: dict) -> bool:
    """Whether cuDNN computes this conv layer (``CONVNET_CUDNN=1``, :mod:`.cudnn_conv`)."""
    return cudnn_conv.requested() and cudnn_conv.supports(dtype, **geometry)


def conv_forward(xs, ws, b, *, filter_sizes, paddings, strides, channels, groups, img_sizes,
                 modules, keep_cache=True):
    geometry = dict(filter_sizes=filter_sizes, paddings=paddings, strides=strides,
                    channels=channels, groups=groups, img_sizes=img_sizes, modules=modules)
    if _by_cudnn(xs[0].dtype, geometry):
        return cudnn_conv.conv_forward(xs, ws, b, keep_cache=keep_cache, **geometry)
    if xs[0].dtype.name not in KERNEL_DTYPES:  # a 16-bit float: the generic conv on CuPy
        return _generic_conv.conv_forward.generic(xs, ws, b, keep_cache=keep_cache,
                                                  **geometry)
    ks = current()
    xp = ks.xp
    n = xs[0].shape[0]
    filters = ws[0].shape[0]
    p = modules * modules
    dtype = xs[0].dtype
    acc = None
    cols_all = []
    for i, (x, w) in enumerate(zip(xs, ws)):
        cols = im2col_conv(x, channels[i], img_sizes[i], filter_sizes[i], paddings[i],
                           strides[i], modules)
        g = groups[i]
        wm = contiguous(w).reshape(filters, -1)
        fg, kg = filters // g, wm.shape[1]
        if acc is None:
            acc = xp.empty((filters, n * p), dtype=dtype)
            for gi in range(g):
                xp.matmul(wm[gi * fg:(gi + 1) * fg], cols[gi * kg:(gi + 1) * kg],
                          out=acc[gi * fg:(gi + 1) * fg])
        else:
            for gi in range(g):
                acc[gi * fg:(gi + 1) * fg] += xp.matmul(wm[gi * fg:(gi + 1) * fg],
                                                        cols[gi * kg:(gi + 1) * kg])
        cols_all.append(cols if keep_cache and KEEP_COLUMNS else None)
    y = xp.empty((n, filters, modules, modules), dtype=dtype)
    ks.kernel("cvn_conv_bias_out")(acc, contiguous(b).reshape(-1), n, filters, p,
                                   1 if b.ndim == 1 else 0, y)
    return y, ColsCache(cols_all)


def conv_backward(gy, xs, ws, cache, need_dx, *, filter_sizes, paddings, strides, channels,
                  groups, img_sizes, modules, shared_biases=True, need_dw=True):
    geometry = dict(filter_sizes=filter_sizes, paddings=paddings, strides=strides,
                    channels=channels, groups=groups, img_sizes=img_sizes, modules=modules)
    if isinstance(cache, cudnn_conv.CudnnCache) or (cache is None
                                                    and _by_cudnn(gy.dtype, geometry)):
        return cudnn_conv.conv_backward(gy, xs, ws, cache, need_dx,
                                        shared_biases=shared_biases, need_dw=need_dw,
                                        **geometry)
    if gy.dtype.name not in KERNEL_DTYPES:
        return _generic_conv.conv_backward.generic(gy, xs, ws, cache, need_dx,
                                                   shared_biases=shared_biases,
                                                   need_dw=need_dw, **geometry)
    xp = current().xp
    n = gy.shape[0]
    filters = ws[0].shape[0]
    p = modules * modules
    cols_all = cache.cols if isinstance(cache, ColsCache) else [None] * len(xs)
    gt = xp.ascontiguousarray(gy.reshape(n, filters, p).transpose(1, 0, 2)).reshape(filters, n * p)
    db = gt.sum(axis=1) if shared_biases else \
        gt.reshape(filters, n, modules, modules).sum(axis=1)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs, pad, stride = filter_sizes[i], paddings[i], strides[i]
        g = groups[i]
        wm = contiguous(w).reshape(filters, -1)
        fg, kg = filters // g, wm.shape[1]
        if not need_dw:
            dws.append(None)
        else:
            cols = cols_all[i]
            if cols is None:
                cols = im2col_conv(x, channels[i], img_sizes[i], fs, pad, stride, modules)
            if g == 1:
                dw = xp.matmul(gt, cols.T)
            else:
                dw = xp.empty_like(wm)
                for gi in range(g):
                    fsl = slice(gi * fg, (gi + 1) * fg)
                    xp.matmul(gt[fsl], cols[gi * kg:(gi + 1) * kg].T, out=dw[fsl])
            dws.append(dw.reshape(w.shape))
        if not need_dx[i]:
            dxs.append(None)
            continue
        dcols = xp.empty((g * kg, n * p), dtype=gy.dtype)
        for gi in range(g):
            fsl = slice(gi * fg, (gi + 1) * fg)
            xp.matmul(wm[fsl].T, gt[fsl], out=dcols[gi * kg:(gi + 1) * kg])
        dx = col2im_conv(dcols, n, channels[i], img_sizes[i], fs, pad, stride, modules)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db


# -------------------------------------------------------------------- local

def local_forward(xs, ws, b, *, filter_sizes, paddings, strides, channels, groups, img_sizes,
                  modules, keep_cache=True):
    ks = current()
    xp = ks.xp
    n = xs[0].shape[0]
    p, filters = ws[0].shape[0], ws[0].shape[1]
    dtype = xs[0].dtype
    acc = None
    cols_all = []
    for i, (x, w) in enumerate(zip(xs, ws)):
        cols = im2col_local(x, channels[i], img_sizes[i], filter_sizes[i], paddings[i],
                            strides[i], modules)  # (P, K, N)
        g = groups[i]
        wm = contiguous(w).reshape(p, filters, -1)
        if g == 1:
            part = xp.matmul(wm, cols)
            if acc is None:
                acc = part
            else:
                acc += part
        else:
            if acc is None:
                acc = xp.zeros((p, filters, n), dtype=dtype)
            fg, kg = filters // g, wm.shape[2]
            for gi in range(g):
                acc[:, gi * fg:(gi + 1) * fg] += xp.matmul(wm[:, gi * fg:(gi + 1) * fg],
                                                           cols[:, gi * kg:(gi + 1) * kg])
        cols_all.append(cols if keep_cache and KEEP_COLUMNS else None)
    y = xp.empty((n, filters, modules, modules), dtype=dtype)
    ks.kernel("cvn_local_bias_out")(contiguous(acc), contiguous(b).reshape(-1), n, filters, p, y)
    return y, ColsCache(cols_all)


def local_backward(gy, xs, ws, cache, need_dx, *, filter_sizes, paddings, strides, channels,
                   groups, img_sizes, modules, need_dw=True):
    xp = current().xp
    n = gy.shape[0]
    p, filters = ws[0].shape[0], ws[0].shape[1]
    cols_all = cache.cols if isinstance(cache, ColsCache) else \
        (list(cache) if isinstance(cache, (list, tuple)) else [None] * len(xs))
    gp = xp.ascontiguousarray(gy.reshape(n, filters, p).transpose(2, 1, 0))  # (P, F, N)
    db = gy.reshape(n, filters, modules, modules).sum(axis=0)
    dxs, dws = [], []
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs, pad, stride = filter_sizes[i], paddings[i], strides[i]
        wm = contiguous(w).reshape(p, filters, -1)
        if need_dw:  # the columns serve the weight gradient only
            cols = cols_all[i]
            if cols is None:
                cols = im2col_local(x, channels[i], img_sizes[i], fs, pad, stride, modules)
            dws.append(local_weight_grad(xp, gp, cols, wm, groups[i]).reshape(w.shape))
        else:
            dws.append(None)
        if not need_dx[i]:
            dxs.append(None)
            continue
        dcols = local_cols_grad(xp, wm, gp, groups[i],
                                xp.empty((p, wm.shape[2] * groups[i], n), dtype=gy.dtype))
        dx = col2im_local(dcols, n, channels[i], img_sizes[i], fs, pad, stride, modules)
        dxs.append(dx.reshape(x.shape))
    return dxs, dws, db
