"""Array math shared by all layers, over numpy on the CPU and CuPy on GPUs.

Kernels take and return arrays of one array module; :func:`array_module`
says which (the Chainer/CuPy ``get_array_module`` idiom), so a layer written
once runs on both backends.
"""

from __future__ import annotations

import numpy as np

try:  # CuPy is optional (the ``gpu`` extra).
    import cupy as _cupy
except Exception:  # noqa: BLE001 - any import failure means "no CUDA backend"
    _cupy = None


def array_module(*arrays):
    """numpy, or cupy when any of ``arrays`` lives on a GPU."""
    if _cupy is not None:
        return _cupy.get_array_module(*arrays)
    return np


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    if _cupy is None:
        return False
    try:
        return _cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no driver, no device
        return False
