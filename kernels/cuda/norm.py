"""CUDA normalisations: each window sum is a loop inside one kernel.

The generic kernels (:mod:`convnet.kernels.norm`) build every window sum from
``size`` shifted whole-array adds (``size^2`` for the spatial windows, i.e.
81 passes for cuda-convnet2's size-9 cmrnorm in both directions).  Here each
output element loops over its own window:

* cmrnorm: forward ``cvn_cmr_fwd`` (y and the denominator d in one pass),
  backward ``cvn_cmr_bwd`` (one pass);
* rnorm: ``cvn_rnorm_fwd`` / ``cvn_rnorm_bwd``, one pass each;
* cnorm: forward = the mean difference, then rnorm's kernel on it (two
  passes); backward = rnorm's first part on the mean difference, then
  ``cvn_cnorm_bwd`` for the dependence of the mean on x (two passes).

Sums run in the generic kernels' order with the same roundings.  The cache
is ``(d, None, mean_diff)``: the backward pass recomputes ``d^-pow`` from d
rather than keeping a second full-size array alive between the passes.
"""

from __future__ import annotations

from .kernel_set import contiguous, current


def _pow_mode(p: float) -> int:
    """Which branch of kernels.norm._pow_neg (and cvn_pow_neg) computes d^-p."""
    if p == 0.75:
        return 0
    if p == 0.5:
        return 1
    if p == 1.0:
        return 2
    return 3


def response_norm_forward(x, *, kind: str, size: int, scale: float, pow: float,
                          min_div: float = 1.0):
    ks = current()
    xp = ks.xp
    x = contiguous(x)
    c, s = x.shape[1], x.shape[2]
    y = xp.empty(x.shape, dtype=x.dtype)
    d = xp.empty(x.shape, dtype=x.dtype)
    mode = _pow_mode(pow)
    mean_diff = None
    if kind == "cmrnorm":
        ks.kernel("cvn_cmr_fwd")(x, c, s * s, size, scale / size, min_div, mode, pow, y, d)
    elif kind == "rnorm":
        ks.kernel("cvn_rnorm_fwd")(x, x, s, size, scale / (size * size), min_div, mode, pow,
                                   y, d)
    elif kind == "cnorm":
        mean_diff = xp.empty(x.shape, dtype=x.dtype)
        ks.kernel("cvn_cnorm_mean_diff")(x, s, size, mean_diff)
        ks.kernel("cvn_rnorm_fwd")(mean_diff, x, s, size, scale / (size * size), min_div, mode,
                                   pow, y, d)
    else:
        raise ValueError(f"unknown normalisation {kind!r}")
    return y, (d, None, mean_diff)


def response_norm_backward(gy, x, y, cache, *, kind: str, size: int, scale: float, pow: float,
                           min_div: float = 1.0):
    ks = current()
    xp = ks.xp
    d, _, mean_diff = cache
    gy, x, y, d = contiguous(gy), contiguous(x), contiguous(y), contiguous(d)
    s = x.shape[2]
    mode = _pow_mode(pow)
    dx = xp.empty(x.shape, dtype=gy.dtype)
    if kind == "cmrnorm":
        coef = -2.0 * (scale / size) * pow
        ks.kernel("cvn_cmr_bwd")(gy, x, y, d, x.shape[1], s * s, size, coef, mode, pow, dx)
        return dx
    coef = -2.0 * (scale / (size * size)) * pow
    if kind == "rnorm":
        ks.kernel("cvn_rnorm_bwd")(gy, x, y, d, s, size, coef, mode, pow, 1, dx)
        return dx
    if kind != "cnorm":
        raise ValueError(f"unknown normalisation {kind!r}")
    back = xp.empty(x.shape, dtype=gy.dtype)
    ks.kernel("cvn_rnorm_bwd")(gy, contiguous(mean_diff), y, d, s, size, coef, mode, pow, 0, back)
    ks.kernel("cvn_cnorm_bwd")(back, gy, d, s, size, mode, pow, dx)
    return dx
