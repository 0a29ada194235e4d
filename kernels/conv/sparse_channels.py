"""cuda-convnet v1's random sparse connectivity (``randSparse``) as array operations.

Filter group g of an input with ``randSparse`` reads the channels
``table[g*fc:(g+1)*fc]`` (fc = filterChannels) of the input instead of its
g-th block of channels.  So the layer *gathers* the channels its table names,
in table order, into an image of groups x fc channels, whose g-th block is then
group g's: an ordinary grouped convolution (or locally-connected layer) of that
image computes the layer.  The gradient of the gathered image goes back by a
*scatter-add*: a channel read by k groups receives the sum of its k copies'
gradients.

The table is ``overSample = groups*fc/channels`` permutations of the channels
one after the other (the draw of :mod:`convnet.layers.connectivity`), so the
scatter-add is a sum of ``overSample`` inverse permutations, in table order:
plain gathers, the same on numpy and CuPy arrays (no atomic adds, so the sum's
order and its float rounding are fixed).
"""

from __future__ import annotations

from convnet.kernels import array_module


def gather_channels(x, table, channels: int):
    """The channels of ``x`` (N, channels, ...) that ``table`` names, in its order:
    (N, len(table), ...).  ``table`` holds channel indices (any numeric dtype)."""
    xp = array_module(x)
    n = x.shape[0]
    image = x.reshape(n, channels, -1)
    index = xp.asarray(table).astype(xp.intp)
    return xp.take(image, index, axis=1)


def scatter_channels(grad, table, channels: int, shape):
    """The gradient of :func:`gather_channels`' input, of shape ``shape``, from the
    gradient ``grad`` (N, len(table), ...) of its output: for each permutation block
    of the table, its gradients put back at the channels it read, summed over the
    blocks."""
    xp = array_module(grad)
    n, width = grad.shape[0], len(table)
    blocks = width // channels
    parts = grad.reshape(n, blocks, channels, -1)
    index = xp.asarray(table).astype(xp.intp).reshape(blocks, channels)
    inverse = xp.argsort(index, axis=1)  # block b's channel c came from place inverse[b, c]
    out = xp.take(parts[:, 0], inverse[0], axis=1)
    for b in range(1, blocks):  # overSample blocks: a handful, not a loop over the data
        out += xp.take(parts[:, b], inverse[b], axis=1)
    return out.reshape(shape)


__all__ = ["gather_channels", "scatter_channels"]
