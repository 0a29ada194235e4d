"""CUDA pooling: one kernel per pass instead of one strided operation per window offset.

Forward: one thread per output computes its clipped window (max / avg /
maxabs with the winning offset).  Backward: one thread per *input* pixel
gathers the gradients of the windows that contain it, so no atomics are
needed and the result is deterministic.  The gather keeps the generic
kernel's semantics exactly: with ``max`` every pixel equal to its window's
maximum gets that window's gradient (ties included), ``avg`` divides by the
number of pixels inside the window, and ``maxabs`` sends the gradient to the
offset recorded in the forward pass; contributions are added in the generic
kernel's order, so the max and avg gradients match numpy bit for bit.
"""

from __future__ import annotations

import numpy as np

from .kernel_set import contiguous, current

_KINDS = {"max": 0, "avg": 1, "maxabs": 2}


def pool_forward(x, *, pool: str, size: int, stride: int, start: int, outputs: int):
    if pool not in _KINDS:
        raise ValueError(f"unknown pooling {pool!r}")
    ks = current()
    xp = ks.xp
    x = contiguous(x)
    n, c, s = x.shape[0], x.shape[1], x.shape[2]
    y = xp.empty((n, c, outputs, outputs), dtype=x.dtype)
    geom = (s, outputs, size, stride, start)
    if pool == "max":
        ks.kernel("cvn_pool_max_fwd")(x, *geom, y)
        return y, None
    if pool == "avg":
        ks.kernel("cvn_pool_avg_fwd")(x, *geom, y)
        return y, None
    which = xp.empty((n, c, outputs, outputs), dtype=np.int32)
    ks.kernel("cvn_pool_maxabs_fwd")(x, *geom, y, which)
    return y, which


def pool_backward(gy, x, y, cache, *, pool: str, size: int, stride: int, start: int,
                  outputs: int):
    if pool not in _KINDS:
        raise ValueError(f"unknown pooling {pool!r}")
    ks = current()
    xp = ks.xp
    x = contiguous(x)
    if pool == "maxabs":
        which = contiguous(cache)
        if which.dtype != np.int32:  # the generic forward records uint8 offsets
            which = which.astype(np.int32)
    else:
        which = xp.zeros(1, dtype=np.int32)
    dx = xp.empty(x.shape, dtype=gy.dtype)
    ks.kernel("cvn_pool_bwd")(contiguous(gy), x, contiguous(y), which, x.shape[2], outputs, size,
                              stride, start, _KINDS[pool], dx)
    return dx
