"""CUDA dropout uniforms: :func:`convnet.kernels.random.uniform_like` as one kernel.

The generic version makes about fifteen passes over a uint64 array
(arange, the multiply-xorshift rounds of splitmix64, the shift and the
conversion).  ``cvn_uniform`` computes each element's uniform from its
counter in registers, with the same wrapping 64-bit arithmetic, so the bits
(and so the dropout masks) are identical to numpy's: masks do not depend on
``--backend`` either, so a run gives the same masks on CPU and GPU devices,
whatever the device count or shard split (:mod:`convnet.kernels.random`).
"""

from __future__ import annotations

import numpy as np

from ..random import _MASK
from .kernel_set import current


def uniform_like(x, key: int, case_offset: int):
    ks = current()
    shape = tuple(x.shape)
    features = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    u = ks.xp.empty(shape, dtype=np.float64)
    base = (int(case_offset) * features) & _MASK
    ks.kernel("cvn_uniform")(np.uint64(int(key) & _MASK), np.uint64(base), u)
    return u
