"""``--backend cpu|cuda|auto``: which kind of logical device a run uses.

"Backend" means only this: the device kind (CPU workers or CUDA GPUs).  The
array module of a device (numpy or CuPy) is ``Device.xp``, and the kernels
compiled for CuPy are a :class:`convnet.kernels.cuda.kernel_set.KernelSet`.
"""

from __future__ import annotations

from convnet import kernels
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
