"""Logical devices: where a replica's arrays live and whose worker computes them.

A logical device is a CUDA GPU when the CUDA backend is chosen (see
:mod:`convnet.backends`) and otherwise a CPU worker.  Each device owns its
buffers: moving an array onto a device always makes a real copy, so a copy in
the plan costs what it would cost between GPUs (a memory copy on the CPU).

On the CPU every logical device is one worker thread, and BLAS is limited to
one thread per device (threadpoolctl), so ``--gpu 0,1`` on two cores runs two
replicas truly in parallel instead of two BLAS thread pools fighting over the
same cores.  numpy releases the GIL inside BLAS and large element-wise loops,
which is where the time goes.
"""

from __future__ import annotations

import numpy as np


class CpuDevice:
    """A logical device backed by host memory and one worker thread."""

    kind = "cpu"
    xp = np

    def __init__(self, index: int, physical: int):
        self.index = index
        self.physical = physical

    def __repr__(self) -> str:
        return f"cpu:{self.index}"

    def activate(self) -> None:
        """Make this device current for the calling thread (nothing to do on the CPU)."""

    def to_device(self, host_array: np.ndarray) -> np.ndarray:
        return np.array(host_array, dtype=np.float32, copy=True, order="C")

    def copy_from(self, array) -> np.ndarray:
        """A real copy of an array that lives on another device."""
        return np.array(array, copy=True)

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def synchronize(self) -> None:
        """Wait for queued work (nothing is queued on the CPU)."""


_blas_limit = None


def limit_blas_threads(threads: int = 1) -> None:
    """Give each CPU device's worker one BLAS thread (process-wide, kept for the run)."""
    global _blas_limit
    from threadpoolctl import threadpool_limits

    _blas_limit = threadpool_limits(limits=threads, user_api="blas")


def make_devices(gpus: tuple[int, ...], backend: str) -> list:
    """One logical device per ``--gpu`` entry, on the chosen backend."""
    if backend == "cuda":
        from convnet.cuda_device import CudaDevice  # imported only when CuPy is wanted

        return [CudaDevice(i, p) for i, p in enumerate(gpus)]
    limit_blas_threads(1)
    return [CpuDevice(i, p) for i, p in enumerate(gpus)]
