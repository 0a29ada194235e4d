"""The three normalisation layers of cuda-convnet2, forward and exact backward.

With ``h = size // 2`` and windows clipped at the edges:

* ``cmrnorm`` (across maps): ``d_c = minDiv + (scale/size) * sum_{k in [c-h, c-h+size)} x_k^2``,
  ``y = x * d^(-pow)``.
* ``rnorm`` (within a map): the same over the ``size x size`` spatial window
  starting ``h`` pixels up and left of the pixel, with ``scale/size^2``.
* ``cnorm`` (contrast): ``u = x - mean(x)`` where the mean is over the same
  spatial window (divided by the number of pixels inside it); then
  ``d = minDiv + (scale/size^2) * sum_window u^2`` and ``y = x * d^(-pow)``
  (cuda-convnet2 multiplies the input, not ``u``, by ``d^(-pow)``).  The
  backward pass includes the dependence of the mean on x.

Window sums are whole-array shifted adds, one per offset of the window
(along the columns of a map one GEMM with a 0/1 band matrix instead), over
blocks of cases that fit in the cache (the results do not depend on the block
size).
"""

from __future__ import annotations

import functools

import numpy as np

from . import array_module, kernel


BLOCK_BYTES = 2 << 20  # cases are processed in blocks of about this much of each array


def _case_blocks(x):
    """[(first, last)) case ranges whose slices of x take about BLOCK_BYTES each, so
    that the dozen or so passes over a block run in the cache."""
    n = x.shape[0]
    per_case = max(1, x[:1].nbytes)
    step = max(1, BLOCK_BYTES // per_case)
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def _shift_sum(xp, a, axis: int, lo: int, size: int, out=None):
    """out[i] = sum_{k < size} a[i + lo + k] along ``axis``, out-of-range terms dropped."""
    n = a.shape[axis]
    if out is None:
        out = xp.zeros_like(a)
    else:
        out.fill(0)
    for k in range(size):
        off = lo + k
        if off >= n or off <= -n:
            continue
        dst = [slice(None)] * a.ndim
        src = [slice(None)] * a.ndim
        if off >= 0:
            dst[axis], src[axis] = slice(0, n - off), slice(off, n)
        else:
            dst[axis], src[axis] = slice(-off, n), slice(0, n + off)
        out[tuple(dst)] += a[tuple(src)]
    return out


@functools.lru_cache(maxsize=64)
def _host_band(n: int, lo: int, size: int, dtype: np.dtype) -> np.ndarray:
    """The (n, n) 0/1 matrix B with ``(a @ B)[i] = sum_{k < size} a[i + lo + k]`` (terms
    outside [0, n) dropped), for window sums along a last axis of length n.  Made once
    per shape: every block of every norm layer's forward and backward pass uses it."""
    offset = np.arange(n)[:, None] - np.arange(n)[None, :] - lo  # B[j, i]: j - i - lo
    band = ((offset >= 0) & (offset < size)).astype(dtype)
    band.flags.writeable = False
    return band


def _band(xp, n: int, lo: int, size: int, dtype):
    """:func:`_host_band` on ``xp``'s device (the cached array itself for numpy)."""
    return xp.asarray(_host_band(n, lo, size, np.dtype(dtype)))


def _window_sum_2d(xp, a, size: int, transpose: bool = False, out=None):
    """Sums over the size x size windows of each map of a (N, C, S, S) array: shifted
    adds along the rows, then one GEMM with a 0/1 band matrix along the columns.  Shifted
    adds along the last axis would run numpy's inner loop over runs of S or fewer
    elements (a 15x15 map: 4-5x slower than the GEMM); the GEMM adds each output's terms
    in the same order, plus exact zeros (an inf in a window gives NaN instead of inf)."""
    h = size // 2
    lo = (h - size + 1) if transpose else -h
    rows = _shift_sum(xp, a, 2, lo, size)
    s = a.shape[3]
    if out is None:
        out = xp.empty_like(a)
    xp.matmul(rows.reshape(-1, s), _band(xp, s, lo, size, a.dtype), out=out.reshape(-1, s))
    return out


def _window_sum_maps(xp, a, size: int, transpose: bool = False, out=None):
    h = size // 2
    lo = (h - size + 1) if transpose else -h
    return _shift_sum(xp, a, 1, lo, size, out=out)


def _pixel_counts(img_size: int, size: int) -> np.ndarray:
    """Number of pixels inside the clipped window at each position (img, img)."""
    h = size // 2
    lo = np.arange(img_size) - h
    c = np.minimum(lo + size, img_size) - np.maximum(lo, 0)
    return np.outer(c, c)


def _pow_neg(xp, d, p: float, out=None):
    """d^(-p), into ``out`` when given."""
    if p == 0.75:  # the usual exponent: d^-0.75 = 1 / (sqrt(d) * d^0.25)
        r = xp.sqrt(d, out=out)
        r *= xp.sqrt(r)
        return xp.reciprocal(r, out=r)
    if p == 0.5:
        r = xp.sqrt(d, out=out)
        return xp.reciprocal(r, out=r)
    if p == 1.0:
        return xp.reciprocal(d, out=out)
    return xp.power(d, -p, out=out)


_KINDS = ("cmrnorm", "rnorm", "cnorm")


@kernel
def response_norm_forward(x, *, kind: str, size: int, scale: float, pow: float,
                          min_div: float = 1.0):
    """``kind`` in {'cmrnorm', 'rnorm', 'cnorm'}; x (N, C, S, S) -> ``(y, cache)``."""
    xp = array_module(x)
    if kind not in _KINDS:
        raise ValueError(f"unknown normalisation {kind!r}")
    alpha = scale / size if kind == "cmrnorm" else scale / (size * size)
    d = xp.empty_like(x)
    scale_pow = xp.empty_like(x)
    y = xp.empty_like(x)
    mean_diff = xp.empty_like(x) if kind == "cnorm" else None
    counts = xp.asarray(_pixel_counts(x.shape[2], size).astype(x.dtype)) \
        if kind == "cnorm" else None
    for a, b in _case_blocks(x):
        xb, db = x[a:b], d[a:b]
        if kind == "cmrnorm":
            _window_sum_maps(xp, xb * xb, size, out=db)
        elif kind == "rnorm":
            _window_sum_2d(xp, xb * xb, size, out=db)
        else:
            mean = _window_sum_2d(xp, xb, size)
            mean /= counts
            md = xp.subtract(xb, mean, out=mean_diff[a:b])
            _window_sum_2d(xp, md * md, size, out=db)
        db *= alpha
        db += min_div
        _pow_neg(xp, db, pow, out=scale_pow[a:b])
        xp.multiply(xb, scale_pow[a:b], out=y[a:b])
    return y, (d, scale_pow, mean_diff)


@kernel
def response_norm_backward(gy, x, y, cache, *, kind: str, size: int, scale: float, pow: float,
                           min_div: float = 1.0):
    """Exact gradient of :func:`response_norm_forward` with respect to x."""
    xp = array_module(gy)
    d, scale_pow, mean_diff = cache
    alpha = scale / size if kind == "cmrnorm" else scale / (size * size)
    counts = xp.asarray(_pixel_counts(x.shape[2], size).astype(x.dtype)) \
        if kind == "cnorm" else None
    dx = xp.empty(gy.shape, dtype=xp.result_type(gy, y))
    for a, b in _case_blocks(gy):
        gb = gy[a:b]
        t = gb * y[a:b]
        t /= d[a:b]  # = gy * x * d^(-pow-1)
        back = dx[a:b]
        if kind == "cmrnorm":
            _window_sum_maps(xp, t, size, transpose=True, out=back)
            back *= x[a:b]
        else:
            _window_sum_2d(xp, t, size, transpose=True, out=back)
            back *= x[a:b] if kind == "rnorm" else mean_diff[a:b]
        back *= -2.0 * alpha * pow
        if kind == "cnorm":
            back -= _window_sum_2d(xp, back / counts, size, transpose=True)
        xp.multiply(gb, scale_pow[a:b], out=t)
        back += t
    return dx
