"""What a step leaves on its devices for the host: cost sums and finite flags.

A step's task actions compute their cost sums and their finite checks on the
device and leave them here as device scalars, without reading them: a cost
layer's sums (``cost``, ``error``...), whether its cost and inputs are finite,
and, at each update, whether each weight gradient is finite (the update itself
is gated on the device by the same flag, so a non-finite gradient is never
added to the weights).  When a device has run its last task of the step, its
worker brings all of them to the host in one transfer
(:meth:`StepResults.fetch`, through :class:`~convnet.runtime.step.host_reads.HostReads`),
which is that device's one wait of the step.  The executor then reads the host
values: the costs it returns, and the first failed check in task order, which
it turns into the error (:mod:`convnet.runtime.step.non_finite`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class FailedCheck:
    """A finite check that failed: the task (its place in the step's list) and what it
    checked: a cost layer's forward (``key`` None) or a weight array's gradient."""

    order: int
    op: object  # the plan operation: a Forward of a cost layer, or an Update
    key: str | None = None  # the weight array, for a gradient


class StepResults:
    """One step's device scalars, by device, and their host values once fetched."""

    def __init__(self, num_devices: int):
        self._pending: list[list[tuple]] = [[] for _ in range(num_devices)]
        self._packed: list[list[tuple]] = [[] for _ in range(num_devices)]  # (kind, what)
        self._lock = threading.Lock()
        self.metrics: dict[tuple[str, int], dict[str, float]] = {}  # (cost layer, shard) -> sums
        self.failed: list[FailedCheck] = []

    def _add(self, device: int, entry: tuple) -> None:
        with self._lock:
            self._pending[device].append(entry)

    def add_metrics(self, device: int, layer: str, shard: int, sums: dict) -> None:
        """A cost layer's sums over a shard (device scalars, by name)."""
        for name, value in sums.items():
            self._add(device, ("metric", (layer, shard, name), value))

    def add_check(self, device: int, check: FailedCheck, finite) -> None:
        """A finite check's device flag; ``check`` is recorded as failed if it is False."""
        self._add(device, ("check", check, finite))

    def fetch(self, device_index: int, device, reads) -> None:
        """Bring ``device``'s scalars to the host in one transfer (its one wait of the
        step, also when it has none: then only its synchronisation)."""
        self.unpack(device_index, device, reads, self.pack(device_index, device, reads))

    def pack(self, device_index: int, device, reads) -> tuple:
        """Pack ``device``'s scalars on the device (no wait): what :meth:`unpack` reads,
        now or, for a captured step, after each replay (:mod:`.step_graph`)."""
        with self._lock:
            pending = self._pending[device_index]
            self._packed[device_index] = [(kind, what) for kind, what, _ in pending]
        return reads.pack(device, [value for _, _, value in pending])

    def unpack(self, device_index: int, device, reads, packed: tuple) -> None:
        """Read what :meth:`pack` packed (one wait) into :attr:`metrics` and :attr:`failed`."""
        values = reads.unpack(device, packed)
        with self._lock:
            for (kind, what), host in zip(self._packed[device_index], values):
                if kind == "metric":
                    layer, shard, name = what
                    self.metrics.setdefault((layer, shard), {})[name] = host
                elif not host:
                    self.failed.append(what)

    def cleared(self) -> StepResults:
        """A fresh record for another run of the same step (a replay): the entries as
        packed, no host values yet."""
        fresh = StepResults(len(self._pending))
        fresh._packed = [list(entries) for entries in self._packed]
        return fresh

    def first_failure(self) -> FailedCheck | None:
        """The failed check to report: a cost (its forward ran before any update it could
        explain) before a gradient, then the earliest in the step's task order."""
        if not self.failed:
            return None
        return min(self.failed, key=lambda c: (c.key is not None, c.order))


__all__ = ["FailedCheck", "StepResults"]
