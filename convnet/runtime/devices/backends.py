"""``--backend cpu|cuda|auto``: which kind of logical device a run uses, and making them.

"Backend" means only this: the device kind (CPU workers or CUDA GPUs).  The
array module of a device (numpy or CuPy) is ``Device.xp``, and the kernels
compiled for CuPy are a :class:`convnet.kernels.cuda.kernel_set.KernelSet`.
"""

from __future__ import annotations

from convnet import kernels
from convnet.errors import DeviceError
from convnet.runtime.devices.base import Device
from convnet.runtime.devices.cpu import CpuDevice, keep_freed_memory, limit_blas_threads


def choose_backend(requested: str) -> str:
    """'cuda' or 'cpu': auto picks CUDA when CuPy imports and sees a GPU."""
    if requested == "cpu":
        return "cpu"
    available = kernels.cupy_available()
    if requested == "cuda" and not available:
        raise DeviceError("--backend cuda needs CuPy (pip install -e '.[gpu]') and a CUDA GPU, "
                          "and none was found; use --backend cpu")
    return "cuda" if available else "cpu"


def make_devices(gpus: tuple[int, ...], backend: str, first_index: int = 0) -> list[Device]:
    """One logical device per ``--gpu`` entry, of the kind ``backend`` names
    (``'cuda'`` or ``'cpu'``, as :func:`convnet.runtime.devices.backends.choose_backend` returns),
    numbered from ``first_index`` (a rank's first logical device in a multi-process run)."""
    if backend == "cuda":
        from convnet.runtime.devices.cuda import CudaDevice  # imported only when CuPy is wanted

        return [CudaDevice(first_index + i, p) for i, p in enumerate(gpus)]
    limit_blas_threads(1)
    keep_freed_memory()
    return [CpuDevice(first_index + i, p) for i, p in enumerate(gpus)]
