"""TF32 tensor cores for CuPy's float32 GEMMs (``--precision tf32``).

cuBLAS computes float32 GEMMs in full float32 unless asked for TF32 (inputs
rounded to 10 mantissa bits, products summed in float32), which the tensor cores
of Ampere and later GPUs run several times faster.  CuPy chooses the compute type
per dtype, process-wide (what its ``CUPY_TF32=1`` environment variable sets at
import); :func:`use_tf32` sets it for float32 either way, so that one process can
time both (bench/bench_cuda.py).  The cuDNN convolutions read :func:`tf32_enabled`
for their math mode.
"""

from __future__ import annotations

import numpy as np

_enabled = False


def use_tf32(on: bool = True) -> None:
    """Compute float32 GEMMs with TF32 (``on``) or in full float32."""
    global _enabled
    from cupy._core import _routines_linalg as linalg

    linalg.set_compute_type(np.dtype(np.float32),
                            linalg.COMPUTE_TYPE_TF32 if on else linalg.COMPUTE_TYPE_DEFAULT)
    _enabled = bool(on)


def tf32_enabled() -> bool:
    return _enabled
