"""A test-only handicap: make one logical device slower on purpose (``--slow-device D:F``).

Measuring what asynchronous or local SGD gain when one device lags needs a
lagging device on demand.  After each unit of work on a slowed device (a task
of a step, see :class:`convnet.runtime.executor.Executor`) its thread sleeps
``F - 1`` times what the work took, so the device runs at ``1/F`` of its
speed while leaving the cores to the others, as a slower GPU would.
"""

from __future__ import annotations

import time


def slow_down(factors: dict[int, float], devices, began: float) -> None:
    """Sleep as the slowest of ``devices`` requires for work begun at ``began``
    (a :func:`time.perf_counter` value); ``factors`` maps a device index to F."""
    factor = max((factors.get(d, 1.0) for d in devices), default=1.0)
    if factor > 1.0:
        time.sleep((factor - 1.0) * (time.perf_counter() - began))


__all__ = ["slow_down"]
