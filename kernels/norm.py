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

Window sums are whole-array shifted adds, one per offset of the window.
"""

from __future__ import annotations

import numpy as np

from . import array_module, kernel


def _shift_sum(xp, a, axis: int, lo: int, size: int):
    """out[i] = sum_{k < size} a[i + lo + k] along ``axis``, out-of-range terms dropped."""
    n = a.shape[axis]
    out = xp.zeros_like(a)
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


def _window_sum_2d(xp, a, size: int, transpose: bool = False):
    h = size // 2
    lo = (h - size + 1) if transpose else -h
    return _shift_sum(xp, _shift_sum(xp, a, 2, lo, size), 3, lo, size)


def _window_sum_maps(xp, a, size: int, transpose: bool = False):
    h = size // 2
    lo = (h - size + 1) if transpose else -h
    return _shift_sum(xp, a, 1, lo, size)


def _pixel_counts(img_size: int, size: int) -> np.ndarray:
    """Number of pixels inside the clipped window at each position (img, img)."""
    h = size // 2
    lo = np.arange(img_size) - h
    c = np.minimum(lo + size, img_size) - np.maximum(lo, 0)
    return np.outer(c, c)


def _pow_neg(xp, d, p: float):
    if p == 0.75:  # the usual exponent: d^-0.75 = 1 / (sqrt(d) * d^0.25)
        r = xp.sqrt(d)
        r *= xp.sqrt(r)
        return xp.reciprocal(r, out=r)
    if p == 0.5:
        return xp.reciprocal(xp.sqrt(d))
    if p == 1.0:
        return xp.reciprocal(d)
    return xp.power(d, -p)


@kernel
def response_norm_forward(x, *, kind: str, size: int, scale: float, pow: float,
                          min_div: float = 1.0):
    """``kind`` in {'cmrnorm', 'rnorm', 'cnorm'}; x (N, C, S, S) -> ``(y, cache)``."""
    xp = array_module(x)
    mean_diff = None
    if kind == "cmrnorm":
        d = _window_sum_maps(xp, x * x, size)
        alpha = scale / size
    elif kind == "rnorm":
        d = _window_sum_2d(xp, x * x, size)
        alpha = scale / (size * size)
    elif kind == "cnorm":
        counts = xp.asarray(_pixel_counts(x.shape[2], size).astype(x.dtype))
        mean = _window_sum_2d(xp, x, size)
        mean /= counts
        mean_diff = x - mean
        d = _window_sum_2d(xp, mean_diff * mean_diff, size)
        alpha = scale / (size * size)
    else:
        raise ValueError(f"unknown normalisation {kind!r}")
    d *= alpha
    d += min_div
    scale_pow = _pow_neg(xp, d, pow)
    y = x * scale_pow
    return y, (d, scale_pow, mean_diff)


@kernel
def response_norm_backward(gy, x, y, cache, *, kind: str, size: int, scale: float, pow: float,
                           min_div: float = 1.0):
    """Exact gradient of :func:`response_norm_forward` with respect to x."""
    xp = array_module(gy)
    d, scale_pow, mean_diff = cache
    t = gy * y
    t /= d  # = gy * x * d^(-pow-1)
    if kind == "cmrnorm":
        back = _window_sum_maps(xp, t, size, transpose=True)
        alpha = scale / size
        back *= x
    else:
        back = _window_sum_2d(xp, t, size, transpose=True)
        alpha = scale / (size * size)
        back *= x if kind == "rnorm" else mean_diff
    back *= -2.0 * alpha * pow
    if kind == "cnorm":
        counts = xp.asarray(_pixel_counts(x.shape[2], size).astype(x.dtype))
        back -= _window_sum_2d(xp, back / counts, size, transpose=True)
    back += gy * scale_pow
    return back
