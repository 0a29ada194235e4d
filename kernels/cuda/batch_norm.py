"""CUDA batch normalisation: the per-channel sums and the element-wise passes as kernels.

The generic kernels (:mod:`convnet.kernels.batch_norm`) take the per-case sums over the
pixels as batched matrix products and the element-wise forward and input gradient as
two and five whole-array passes.  Here ``cvn_bn_case_sums`` runs one thread per (case,
channel) over its pixels, accumulating in double (then CuPy sums the cases in float64,
as the generic kernel does), and ``cvn_bn_affine`` and ``cvn_bn_input_grad`` are one
pass each, with the generic kernel's roundings in its order.  The per-channel float64
arithmetic (the mean, 1/std, the constants) is the generic kernel's own, on CuPy.
"""

from __future__ import annotations

from .. import batch_norm as kbn
from .kernel_set import contiguous, current


def _case_sums(a, mode: int, mean=None, b=None):
    """(N, C) float64 per-case sums over the pixels of the (N, C, P) ``a`` (see the
    ``cvn_bn_case_sums`` source for the modes)."""
    ks = current()
    xp = ks.xp
    n, c, p = a.shape
    mean = xp.zeros(c, a.dtype) if mean is None else contiguous(mean)
    out = xp.empty((n, c), xp.float64)
    ks.kernel("cvn_bn_case_sums")(a, a if b is None else contiguous(b), mean, mode, c, p, out)
    return out.sum(axis=0)


def batch_moments(x):
    xp = current().xp
    x = contiguous(x)
    mean = _case_sums(x, 0) / kbn.moments_count(x)
    return xp.concatenate([mean, _case_sums(x, 1, mean.astype(x.dtype))])


def batch_norm_forward(x, mean, invstd, scale, shift):
    ks = current()
    xp = ks.xp
    x = contiguous(x)
    a, beta = kbn.affine_constants(mean, invstd, scale, shift)
    y = xp.empty(x.shape, x.dtype)
    ks.kernel("cvn_bn_affine")(x, a.astype(x.dtype), beta.astype(x.dtype), x.shape[1],
                               x.shape[2], y)
    return y


def batch_norm_grad_sums(g, x, mean, invstd):
    xp = current().xp
    g, x = contiguous(g), contiguous(x)
    rounded = mean.astype(x.dtype)
    sums = _case_sums(g, 0)
    dots = _case_sums(x, 2, rounded, g) + (rounded - mean) * sums
    return xp.concatenate([sums, dots * invstd])


def batch_norm_backward(g, x, mean, invstd, scale, sums, count: int):
    ks = current()
    xp = ks.xp
    g, x = contiguous(g), contiguous(x)
    c = mean.shape[0]
    a, slope, rounded, offset = kbn.input_grad_constants(mean, invstd, scale, sums, count,
                                                         x.dtype)
    dx = xp.empty(x.shape, g.dtype)
    ks.kernel("cvn_bn_input_grad")(g, x, a.astype(g.dtype), rounded, slope.astype(x.dtype),
                                   offset.astype(g.dtype), c, x.shape[2], dx)
    return dx
