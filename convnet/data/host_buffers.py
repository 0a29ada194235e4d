"""Host memory that batches are loaded into, handed out again batch after batch.

The ``image`` provider decodes a batch's crops straight into buffers that the devices
upload from.  For a GPU those are page-locked (pinned: the upload then runs while the
GPU computes), and pinning is slow (the kernel locks every page), so the buffers are
kept: :class:`HostBuffers` hands out a :class:`Lease` per batch, whose ``empty`` takes
a free buffer large enough (or allocates one), and whose ``release`` gives the batch's
buffers back once nothing reads the batch any more.  The pool never holds more buffers
than were leased at once (a buffer too small for a request is dropped for the new one),
so with the prefetcher's bound on batches in flight its memory is bounded too.
"""

from __future__ import annotations

import math
import threading
from typing import Callable

import numpy as np


def _host_array(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, np.uint8)


class HostBuffers:
    """A pool of flat uint8 host arrays from ``allocate(nbytes)`` (plain memory by default;
    pinned memory for a GPU: :func:`convnet.runtime.devices.cuda.pinned_host_array`)."""

    def __init__(self, allocate: Callable[[int], np.ndarray] | None = None):
        self._allocate = allocate or _host_array
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.allocations = 0  # buffers allocated so far (the rest were reused)

    def lease(self) -> Lease:
        """The buffers of one batch, to be given back together."""
        return Lease(self)

    @property
    def free(self) -> int:
        """Buffers waiting to be handed out again."""
        with self._lock:
            return len(self._free)

    def _take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            fitting = [k for k, b in enumerate(self._free) if b.nbytes >= nbytes]
            if fitting:
                return self._free.pop(min(fitting, key=lambda k: self._free[k].nbytes))
            if self._free:  # too small for this batch: replaced by the new buffer
                self._free.pop(max(range(len(self._free)), key=lambda k: self._free[k].nbytes))
            self.allocations += 1
        return self._allocate(nbytes)

    def _give(self, buffers: list[np.ndarray]) -> None:
        with self._lock:
            self._free.extend(buffers)


class Lease:
    """The buffers one batch was loaded into (see :class:`HostBuffers`)."""

    def __init__(self, pool: HostBuffers):
        self._pool = pool
        self._held: list[np.ndarray] = []

    def empty(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        """An uninitialised array of ``shape`` and ``dtype`` in one of the pool's buffers
        (``numpy.empty``'s signature, what ``load_batch`` allocates with)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        buffer = self._pool._take(nbytes)
        self._held.append(buffer)
        return buffer[:nbytes].view(dtype).reshape(shape)

    def release(self) -> None:
        """Give the buffers back to the pool: nothing reads the batch any more."""
        held, self._held = self._held, []
        self._pool._give(held)


__all__ = ["HostBuffers", "Lease"]
