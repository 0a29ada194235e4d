"""Every point where a step's host threads wait for a device, counted.

On a GPU the host only queues work: kernels, copies and cuBLAS calls return at
once, and the host waits only where it needs something the device has not
finished, such as a value it computed (``float(x)`` and ``bool(x)`` of a CuPy
array copy it to the host and wait for the stream) or the end of its work
(``synchronize``).  Each such wait leaves the GPU idle until the host has queued
the next kernels, so a step keeps one per device: at its end the device's cost
sums and finite flags come back in one transfer (:meth:`HostReads.pack`, then
:meth:`HostReads.unpack`, as :meth:`~convnet.runtime.step.device_results.StepResults.fetch`
does), which
is also the step's final synchronisation of that device.

Every read of a device array by the executor goes through a :class:`HostReads`
(the end-of-step fetch, the sends to other processes, the features, the
diagnosis of a step that failed), which counts it, so that ``--profile`` can say
``host waits per step: N`` on every backend and a test can hold the count to one
per device (``tests/runtime/step/test_host_waits.py``, which also runs a step on
arrays that refuse ``float()`` and ``bool()`` outside this module).  The upload
of a minibatch is not counted: it is a host-to-device copy, which waits for no
device result.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np


class HostReads:
    """The executor's one way to bring device values to the host, with a count of the
    waits (thread-safe: the device workers fetch at the same time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waits = 0

    def _counted(self) -> None:
        with self._lock:
            self.waits += 1

    def read(self, device, array) -> np.ndarray:
        """``array`` (of ``device``) on the host: one wait."""
        self._counted()
        return np.asarray(device.to_host(array))

    @staticmethod
    def pack(device, values: Sequence) -> tuple:
        """``values`` packed on the device into one float64 vector, by dtype (float32 sums
        and booleans convert exactly), so that they cross in one transfer, with the
        position of each value in it; no wait (a captured step packs here, and reads
        the same vector after each replay)."""
        if not values:
            return None, []
        groups: dict = {}
        for i, v in enumerate(values):
            groups.setdefault(np.dtype(v.dtype), []).append(i)
        xp = device.xp
        with device.scope():
            parts = [xp.stack([values[i] for i in idx]).astype(np.float64)
                     for idx in groups.values()]
            packed = parts[0] if len(parts) == 1 else xp.concatenate(parts)
        return packed, [i for idx in groups.values() for i in idx]

    def unpack(self, device, packed: tuple) -> list[float]:
        """What :meth:`pack` packed, on the host in the values' order: one wait (for
        everything queued on the device, then its synchronisation)."""
        self._counted()
        array, order = packed
        if array is None:
            device.synchronize()
            return []
        host = np.asarray(device.to_host(array))
        device.synchronize()  # finds the stream idle: releases what copies still held
        out = [0.0] * len(order)
        for position, i in enumerate(order):
            out[i] = float(host[position])
        return out

    def take(self) -> int:
        """The waits counted since the last call (one step's)."""
        with self._lock:
            waits, self.waits = self.waits, 0
        return waits


__all__ = ["HostReads"]
