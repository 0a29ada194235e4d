"""Per-thread scratch buffers, shared by the conv and pool kernels.

A kernel's temporaries (padded copies, column blocks, accumulators) are
reused from call to call instead of allocated afresh, which saves the page
faults of a new allocation on every step.  Each thread has its own buffers,
so the executor's one worker per device never shares one.
"""

from __future__ import annotations

import math
import threading

from convnet.kernels import array_module_name


_SCRATCH = threading.local()
_SCRATCH_LIMIT = 256 << 20  # bytes: larger temporaries are not kept between calls


def scratch(xp, name: str, shape, dtype, zero: bool = False):
    """A per-thread reusable temporary (saves the page faults of a fresh allocation).

    Only for arrays that never leave the kernel; each ``name`` has one buffer.
    """
    size = math.prod(shape)
    dtype = xp.dtype(dtype)
    if size * dtype.itemsize > _SCRATCH_LIMIT:
        return xp.zeros(shape, dtype) if zero else xp.empty(shape, dtype)
    try:
        bufs = _SCRATCH.bufs
    except AttributeError:
        bufs = _SCRATCH.bufs = {}
    key = (name, array_module_name(xp), dtype.str)
    buf = bufs.get(key)
    if buf is None or buf.size < size:
        buf = xp.empty(size, dtype)
        bufs[key] = buf
    out = buf[:size].reshape(shape)
    if zero:
        out.fill(0)
    return out
