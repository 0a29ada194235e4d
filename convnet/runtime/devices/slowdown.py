"""A test-only handicap: make a logical device slower on purpose (``--slow-device``).

Measuring what asynchronous or local SGD gain when devices lag needs lagging
devices on demand.  After each unit of work on a slowed device (a task of a
step, see :class:`convnet.runtime.step.executor.Executor`) its thread sleeps
``F - 1`` times what the work took, so the device runs at ``1/F`` of its
speed while leaving the cores to the others, as a slower GPU would.

Two kinds of straggler:

* ``D:F``: device D is slow at every step (a slower card).  Every scheme that
  gives each device the same share of the cases is held to D's pace.
* ``any:F``: at every step one device, drawn at random (the same draw for a
  given step in every run), is slow for that step (a noisy neighbour that
  moves between machines).  Lockstep steps then always wait for someone, while
  replicas that run apart between averages (local SGD, async) each lag only in
  the steps that hit them.
"""

from __future__ import annotations

import functools
import random
import time
from dataclasses import dataclass

ANY = None  # the device of an ``any:F`` straggler: a different one each step
_DRAW_SALT = 0x5A0D  # keeps the draws apart from other uses of the step number


@dataclass(frozen=True)
class Slowdown:
    """``factor`` F > 1 for ``device`` (a logical device of the run, or :data:`ANY`),
    among ``num_devices`` logical devices.  ``placed`` maps the device indices of the
    executor that applies it to the run's logical devices, where they differ (a
    one-device replica of a data-parallel net runs on the run's device ``placed[0]``)."""

    factor: float
    device: int | None
    num_devices: int
    placed: tuple[int, ...] | None = None

    def on_devices(self, devices: tuple[int, ...]) -> Slowdown:
        """The same straggler, seen by an executor whose device i is the run's ``devices[i]``."""
        return Slowdown(self.factor, self.device, self.num_devices, tuple(devices))

    def slowed(self, step: int) -> int:
        """The logical device (of the run) that is slow in ``step``."""
        if self.device is not ANY:
            return self.device
        return _drawn(step, self.num_devices)

    def factor_of(self, device: int, step: int) -> float:
        """How many times slower the executor's ``device`` runs in ``step``."""
        run_device = self.placed[device] if self.placed is not None else device
        return self.factor if run_device == self.slowed(step) else 1.0

    def sleep_after(self, devices, step: int, began: float) -> None:
        """Sleep as the slowest of ``devices`` requires in ``step`` for work begun at
        ``began`` (a :func:`time.perf_counter` value)."""
        factor = max((self.factor_of(d, step) for d in devices), default=1.0)
        if factor > 1.0:
            time.sleep((factor - 1.0) * (time.perf_counter() - began))


@functools.lru_cache(maxsize=64)
def _drawn(step: int, num_devices: int) -> int:
    """The device an ``any:F`` straggler slows in ``step``: drawn once per step, not once
    per task of it."""
    return random.Random(_DRAW_SALT * 1_000_003 + step).randrange(num_devices)


__all__ = ["ANY", "Slowdown"]
