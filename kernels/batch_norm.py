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

Every statistics array is flat, ``(2 C,)``: the first C entries (the mean, or
``sum g``), then the other C (M2, or ``sum g xhat``), so that moving one between
devices or processes needs nothing but its length.  The reductions over cases and
pixels are ``einsum`` sums (no temporary of the input's size for the products).
"""

from __future__ import annotations

from . import array_module, kernel


def moments_count(x) -> int:
    """The values per channel of an (N, C, P) array: what its moments average over."""
    return int(x.shape[0]) * int(x.shape[2])


@kernel
def batch_moments(x):
    """(2C,): the mean and the sum of squared deviations of every channel of ``x``."""
    xp = array_module(x)
    count = moments_count(x)
    mean = xp.einsum("ncp->c", x) / count
    d = x - mean[:, None]
    m2 = xp.einsum("ncp,ncp->c", d, d)
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
    xp = array_module(var)
    return 1.0 / xp.sqrt(var + epsilon)


@kernel
def batch_norm_forward(x, mean, invstd, scale, shift):
    """``(x - mean) * (scale invstd) + shift`` per channel of the (N, C, P) ``x``."""
    a = (scale * invstd)[:, None]
    y = x - mean[:, None]
    y *= a
    y += shift[:, None]
    return y


@kernel
def batch_norm_grad_sums(g, x, mean, invstd):
    """(2C,): ``sum g`` and ``sum g xhat`` of every channel (the shift's and the scale's
    gradients over these cases)."""
    xp = array_module(g)
    d = x - mean[:, None]
    return xp.concatenate([xp.einsum("ncp->c", g), xp.einsum("ncp,ncp->c", g, d) * invstd])


@kernel
def batch_norm_backward(g, x, mean, invstd, scale, sums, count: int):
    """The input gradient of the (N, C, P) ``x`` from the output gradient ``g``, given
    ``sums`` (:func:`batch_norm_grad_sums`) over all ``count`` values per channel that
    the statistics covered."""
    c = mean.shape[0]
    a = scale * invstd
    slope = (-a * invstd * sums[c:] / count)[:, None]
    dx = g * a[:, None]
    d = x - mean[:, None]
    d *= slope
    dx += d
    dx += (-a * sums[:c] / count)[:, None]
    return dx


__all__ = ["batch_moments", "combine_moments", "combine_sums", "inverse_std",
           "batch_norm_forward", "batch_norm_grad_sums", "batch_norm_backward",
           "moments_count"]
