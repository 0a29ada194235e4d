"""``--backend cpu|cuda|auto``: which kind of logical device a run uses, and making them.

"Backend" means only this: the device kind (CPU workers or CUDA GPUs).  The
array module of a device (numpy or CuPy) is ``Device.xp``, and the kernels
compiled for CuPy are a :class:`convnet.kernels.cuda.kernel_set.KernelSet`.

On CUDA an entry of ``--gpu`` is a physical GPU, as in cuda-convnet2: one per
logical device, repeats allowed (``--gpu 0,0`` runs two logical devices on GPU 0).
:func:`gpus_for_backend` checks every entry against the GPUs present before
anything touches a GPU, and without ``--gpu`` places the logical devices on the GPUs
present in turn.  On the CPU an entry only names a worker slot, as before.
"""

from __future__ import annotations

import os

from convnet import kernels
from convnet.errors import DeviceError, UsageError
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


def gpus_for_backend(gpus: tuple[int, ...], given: bool,
                     requested: str) -> tuple[tuple[int, ...], str | None]:
    """The physical devices of ``--gpu`` (``gpus``; ``given`` False when they are the
    default) for ``--backend requested``, and a note for the banner, or None.

    On CUDA a given list is checked against the GPUs present (a missing GPU: a
    :class:`UsageError`, exit 2, naming the list that would run); a default one becomes
    the same number of logical devices placed round robin on the GPUs present.  On the
    CPU, or where the CUDA backend cannot run (its own error comes later, where the
    backend is chosen), ``gpus`` stays as it is.
    """
    try:
        if choose_backend(requested) != "cuda":
            return gpus, None
    except DeviceError:
        return gpus, None
    count = kernels.cuda_device_count()
    if given:
        check_gpus_exist(gpus, count)
        return gpus, None
    placed = round_robin(len(gpus), count)
    note = f"no --gpu: in turn on this machine's {_gpus(count)}, as --gpu {_listed(placed)}"
    return placed, note


def round_robin(devices: int, count: int) -> tuple[int, ...]:
    """``devices`` logical devices on ``count`` GPUs in turn: 0, 1, ..., 0, 1, ..."""
    return tuple(i % count for i in range(devices))


def check_gpus_exist(gpus: tuple[int, ...], count: int) -> None:
    """Refuse (exit 2) a ``--gpu`` list that names a GPU CuPy does not see, in one line
    that says what this machine has and which list runs the same devices on it."""
    missing = sorted({g for g in gpus if not 0 <= g < count})
    if not missing:
        return
    names = (f"GPU {missing[0]} does not exist" if len(missing) == 1 else
             f"GPUs {', '.join(map(str, missing[:-1]))} and {missing[-1]} do not exist")
    target = "on it" if count == 1 else "on them"
    raise UsageError(f"{names}: this machine has {_gpus(count)}; "
                     f"--gpu {_listed(round_robin(len(gpus), count))} runs "
                     f"{_devices(len(gpus))} {target}")


def _gpus(count: int) -> str:
    """'1 GPU', '2 GPUs (0-1)', with CUDA_VISIBLE_DEVICES when it is set."""
    text = f"{count} GPU{'s' if count != 1 else ''}"
    if count > 1:
        text += f" (0-{count - 1})"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return text + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")


def _devices(n: int) -> str:
    return "the device" if n == 1 else "both devices" if n == 2 else f"the {n} devices"


def _listed(gpus) -> str:
    return ",".join(map(str, gpus))


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
