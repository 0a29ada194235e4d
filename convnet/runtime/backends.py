"""Choosing the array backend for the logical devices (``--backend``)."""

from __future__ import annotations

import kernels
from convnet.errors import DeviceError


def choose_backend(requested: str) -> str:
    """'cuda' or 'cpu': auto picks CUDA when CuPy imports and sees a GPU."""
    if requested == "cpu":
        return "cpu"
    available = kernels.cupy_available()
    if requested == "cuda" and not available:
        raise DeviceError("--backend cuda needs CuPy (pip install -e '.[gpu]') and a CUDA GPU, "
                          "and none was found; use --backend cpu")
    return "cuda" if available else "cpu"
