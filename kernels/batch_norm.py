"""Batch normalisation per channel, forward and exact backward, on (N, C, P) arrays.

A layer's input is viewed as ``(cases, channels, pixels)`` (an image's pixels, or 1
for a flat input, whose features are the channels).  Per channel c, over the
cases and pixels of a minibatch (count m):

* statistics: ``mean``, the biased ``var = M2 / m`` with ``M2`` the sum of squared
  deviations; ``invstd = 1 / sqrt(var + epsilon)``;
* forward: ``y = (x - mean) * (W invstd) + b``;
* backward, with ``xhat = (x - mean) invstd``: ``db = sum g``, ``dW = sum g xhat``
  and ``dx = W invstd (g - db / m - xhat dW / m)``.

Statistics that several replicas compute over their own shards are combined
exactly (:func:`combine_moments`, :func:`combine_sums`), so that a minibatch cut
into shards is normalised as a whole: each shard gives its mean and M2 (a two-pass
computation with no cancellation), and the shards' moments are combined in a
fixed order with Chan's formula, which is the sums and sums of squares of the
whole minibatch without the cancellation of ``sum x^2 - m mean^2`` in float32.
The backward statistics, ``sum g`` and ``sum g xhat``, are plain sums.

Every statistics array is flat, ``(2 C,)`` and float64: the first C entries (the mean,
or ``sum g``), then the other C (M2, or ``sum g xhat``), so that moving one between
devices or processes needs nothing but its length.  The reductions over the pixels
are matrix products (a BLAS dot product per case and channel: blocked, so as exact as
a pairwise sum, and no temporary of the input's size), then summed over the cases in
float64, as PyTorch's CPU kernels accumulate: float32 sums of 10^5 values lose about
3e-7 of the mean, which after normalisation puts three times PyTorch's relu ties on
the other side in a ResNet (``bench/agreement.py``).

On numpy each kernel goes over the cases in blocks of about :data:`BLOCK_BYTES`, doing
all its element-wise steps on one block before the next, so that a step's temporaries
and its second reading of a block come from the cache instead of memory: the same
operations on the same values (bitwise the results of whole-array steps), 10-20%
faster than whole-array steps when the arrays come from memory rather than the cache.
"""

from __future__ import annotations

import numpy as np

from . import array_module, kernel
from .scratch import scratch

BLOCK_BYTES = 512 << 10  # bytes of one block of cases of a numpy kernel's input (L2-sized)


def moments_count(x) -> int:
    """The values per channel of an (N, C, P) array: what its moments average over."""
    return int(x.shape[0]) * int(x.shape[2])


def _channel_dots(a, b=None):
    """Per channel of (N, C, P) arrays, ``sum a b`` (``b`` None: ``sum a``) over the cases
    and pixels, accumulated in float64 (see the module docstring)."""
    return _case_dots(a, b).sum(axis=0, dtype=array_module(a).float64)


def _case_dots(a, b=None, out=None):
    """``sum a b`` over the pixels of every case and channel of (N, C, P) arrays (``b``
    None: ``sum a``): (N, C) in their dtype, each a BLAS dot product."""
    xp = array_module(a)
    if b is None:
        return xp.matmul(a, xp.ones(a.shape[2], a.dtype), out=out)
    dots = xp.matmul(a[:, :, None, :], b[:, :, :, None])[:, :, 0, 0]
    if out is None:
        return dots
    out[...] = dots
    return out


def _case_blocks(x):
    """Slices of the cases of an (N, C, P) numpy array, about :data:`BLOCK_BYTES` each
    (one slice of all of them for any other array module)."""
    n = x.shape[0]
    step = _cases_per_block(x)
    for n0 in range(0, n, step):
        yield slice(n0, min(n, n0 + step))


def _cases_per_block(x) -> int:
    if array_module(x) is not np:
        return x.shape[0]
    return max(1, min(x.shape[0], BLOCK_BYTES // max(1, x[:1].nbytes)))


def _block_buffer(x):
    """A per-thread scratch block of cases of ``x``, (cases, C*P) (numpy; None
    otherwise: a fresh array per step)."""
    xp = array_module(x)
    if xp is not np:
        return None
    return scratch(xp, "batch_norm_block", (_cases_per_block(x), x[0].size), x.dtype)


def _into(buf, cases):
    """The part of a scratch block for the block of cases ``cases`` (None: none)."""
    return None if buf is None else buf[:cases.stop - cases.start]


def _channel_row(values, x):
    """Per-channel ``values`` (C,) as one case's row of (channel, pixel) values of the
    (N, C, P) ``x``, in its dtype: an element-wise step between a block of cases (k,
    C*P) and this row runs along contiguous rows, 1.3-1.8x faster in numpy than
    broadcasting (C, 1) along the pixels (the same operation on the same values)."""
    return array_module(x).repeat(values.astype(x.dtype), x.shape[2])


def _flat(a):
    """An (N, C, P) array as (N, C*P)."""
    return a.reshape(a.shape[0], -1)


def _deviation_dots(x, rounded, g=None):
    """(N, C): ``sum (x - rounded) g`` over the pixels of every case and channel (``g``
    None: ``sum (x - rounded)^2``), the deviations made block by block of cases."""
    xp = array_module(x)
    per_case = xp.empty(x.shape[:2], x.dtype)
    buf, row, xf = _block_buffer(x), _channel_row(rounded, x), _flat(x)
    for cases in _case_blocks(x):
        dev = xp.subtract(xf[cases], row, out=_into(buf, cases))
        dev = dev.reshape((-1,) + x.shape[1:])
        _case_dots(dev, dev if g is None else g[cases], out=per_case[cases])
    return per_case


@kernel
def batch_moments(x):
    """(2C,) float64: the mean and the sum of squared deviations of every channel of
    ``x`` (the deviations from the mean rounded to ``x``'s dtype: the same sum up to
    n (rounding)^2)."""
    xp = array_module(x)
    mean = _channel_dots(x) / moments_count(x)
    m2 = _deviation_dots(x, mean.astype(x.dtype)).sum(axis=0, dtype=xp.float64)
    return xp.concatenate([mean, m2])


def combine_moments(parts: list, counts: list[int]):
    """The (2C,) moments of the union of shards whose moments are ``parts`` (in the
    given order) over ``counts`` values per channel each (Chan's parallel formula)."""
    total = sum(counts)
    c = parts[0].shape[0] // 2
    weighted = parts[0][:c] * counts[0]
    for part, count in zip(parts[1:], counts[1:]):
        weighted = weighted + part[:c] * count
    mean = weighted / total
    m2 = None
    for part, count in zip(parts, counts):
        d = part[:c] - mean
        term = part[c:] + count * (d * d)
        m2 = term if m2 is None else m2 + term
    xp = array_module(mean)
    return xp.concatenate([mean, m2])


def combine_sums(parts: list, counts: list[int]):
    """The backward statistics of the union of shards: their sums, in the given order."""
    total = parts[0] + parts[1] if len(parts) > 1 else parts[0].copy()
    for part in parts[2:]:
        total = total + part
    return total


def inverse_std(var, epsilon: float):
    """1 / sqrt(var + epsilon), in float64."""
    xp = array_module(var)
    return 1.0 / xp.sqrt(var.astype(xp.float64) + epsilon)


def affine_constants(mean, invstd, scale, shift):
    """(a, beta) per channel in float64: the forward is ``x a + beta`` (here and in the
    CUDA kernel, which must round alike)."""
    a = scale.astype(invstd.dtype) * invstd
    return a, shift.astype(a.dtype) - mean.astype(a.dtype) * a


def input_grad_constants(mean, invstd, scale, sums, count: int, dtype):
    """(a, slope, rounded mean, offset) per channel: the input gradient is
    ``g a + (x - rounded) slope + offset``, the mean's rounding to ``dtype`` folded into
    the offset (here and in the CUDA kernel, which must round alike)."""
    c = mean.shape[0]
    a = scale.astype(invstd.dtype) * invstd
    slope = -a * invstd * sums[c:] / count
    rounded = mean.astype(dtype)
    return a, slope, rounded, -a * sums[:c] / count + (rounded - mean) * slope


@kernel
def batch_norm_forward(x, mean, invstd, scale, shift):
    """``(x - mean) * (scale invstd) + shift`` per channel of the (N, C, P) ``x``, as
    ``x a + beta`` with ``a`` and ``beta = shift - mean a`` made in float64 (as
    PyTorch's CPU kernel: two passes, and half the rounding of subtracting a rounded
    mean first)."""
    a, beta = affine_constants(mean, invstd, scale, shift)
    xp = array_module(x)
    a, beta = _channel_row(a, x), _channel_row(beta, x)
    y = xp.empty_like(x)
    xf, yf = _flat(x), _flat(y)
    for cases in _case_blocks(x):
        out = yf[cases]
        xp.multiply(xf[cases], a, out=out)
        out += beta
    return y


@kernel
def batch_norm_grad_sums(g, x, mean, invstd):
    """(2C,) float64: ``sum g`` and ``sum g xhat`` of every channel (the shift's and the
    scale's gradients over these cases); the deviations from ``mean`` rounded to ``x``'s
    dtype, with the rounding of the mean added back exactly."""
    xp = array_module(g)
    rounded = mean.astype(x.dtype)
    sums = _channel_dots(g)
    dots = _deviation_dots(x, rounded, g).sum(axis=0, dtype=xp.float64) + \
        (rounded - mean) * sums
    return xp.concatenate([sums, dots * invstd])


@kernel
def batch_norm_backward(g, x, mean, invstd, scale, sums, count: int):
    """The input gradient of the (N, C, P) ``x`` from the output gradient ``g``, given
    ``sums`` (:func:`batch_norm_grad_sums`) over all ``count`` values per channel that
    the statistics covered: ``g a + (x - mean) k + k0`` with per-channel float64
    constants (the mean's rounding folded into ``k0``)."""
    a, slope, rounded, offset = input_grad_constants(mean, invstd, scale, sums, count,
                                                     x.dtype)
    xp = array_module(g)
    a, slope, offset = _channel_row(a, g), _channel_row(slope, x), _channel_row(offset, g)
    rounded = _channel_row(rounded, x)
    dx = xp.empty_like(g)
    buf, xf, gf, dxf = _block_buffer(x), _flat(x), _flat(g), _flat(dx)
    for cases in _case_blocks(x):
        out = dxf[cases]
        xp.multiply(gf[cases], a, out=out)
        dev = xp.subtract(xf[cases], rounded, out=_into(buf, cases))
        dev *= slope
        out += dev
        out += offset
    return dx


__all__ = ["batch_moments", "combine_moments", "combine_sums", "inverse_std",
           "batch_norm_forward", "batch_norm_grad_sums", "batch_norm_backward",
           "moments_count", "affine_constants", "input_grad_constants"]
