"""CPU logical devices: one worker thread each, with one BLAS thread.

A logical device (:class:`convnet.runtime.devices.base.Device`) is a CUDA stream on
a GPU with ``--backend cuda`` (see :mod:`convnet.runtime.devices.backends` and
:mod:`convnet.runtime.devices.cuda`) and otherwise a CPU worker.  Each device
owns its buffers: moving an array onto a device always makes a real copy, so
a copy in the plan costs what it would cost between GPUs (a memory copy on
the CPU).

On the CPU every logical device is one worker thread, and BLAS is limited to
one thread per device (threadpoolctl), so ``--gpu 0,1`` on two cores runs two
replicas truly in parallel instead of two BLAS thread pools fighting over the
same cores.  numpy releases the GIL inside BLAS and large element-wise loops,
which is where the time goes.

A training step allocates and frees hundreds of megabytes of activations and
temporaries.  glibc's malloc serves every block above its mmap threshold with
a fresh mapping and unmaps it again when the block is freed, so each step
page-faults all of that memory back in (the kernel zeroes every page first),
and with one worker thread per device every unmap also stalls the other
worker (a TLB shootdown).  :func:`keep_freed_memory` turns this off for the
process when CPU devices are made: freed memory stays in the heap and the
next step reuses it.  It also makes every thread allocate from the one main
heap: glibc gives each worker thread a heap of its own, which cannot hold a
block of 64 MiB or more (a 4096x4096 fc layer's weight gradient), so such
blocks were mapped and unmapped every step anyway (8 ms of page faults per
64 MiB gradient on this machine's cores).
"""

from __future__ import annotations

import contextlib
import ctypes
import platform

import numpy as np

from convnet.runtime.devices.base import Device, Uploaded


class CpuDevice(Device):
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

    def scope(self) -> contextlib.AbstractContextManager[CpuDevice]:
        """This device current inside the block (nothing to switch on the CPU)."""
        return contextlib.nullcontext(self)

    def to_device(self, host_array: np.ndarray) -> np.ndarray:
        return np.array(host_array, dtype=np.float32, copy=True, order="C")

    def upload(self, host_array: np.ndarray) -> Uploaded:
        """The host array itself, read where it is: its only reader, the float conversion
        of stored images, writes a new array."""
        return Uploaded(host_array)

    def copy_from(self, array) -> np.ndarray:
        """A real copy of an array that lives on another device."""
        return np.array(array, copy=True)

    def copy_into(self, out: np.ndarray, array) -> None:
        """Copy an array of another device into ``out``, a buffer of this device."""
        np.copyto(out, array)

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


_M_TRIM_THRESHOLD = -1  # glibc mallopt() parameters (malloc.h)
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_kept_freed_memory = False


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for reuse (no mmap, no trimming, one
    heap for all threads).

    Process-wide and kept for the run; a no-op (False) where the C library is
    not glibc.  The heap then stays at the largest size a step needed.  Threads
    that allocated before the call keep the heap they have; the device workers
    start later.
    """
    global _kept_freed_memory
    if _kept_freed_memory:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = (mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, 2 ** 31 - 1) == 1
          and mallopt(_M_ARENA_MAX, 1) == 1)
    _kept_freed_memory = ok
    return ok

