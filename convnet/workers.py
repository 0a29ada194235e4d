"""One worker thread per logical device, running its share of a plan.

Each worker gets the plan's operations that involve its device, in plan order
(a subsequence of one global topological order, so waiting never deadlocks),
and before each operation waits until the operations it depends on that ran
on *other* devices have finished.  Collectives (the all-reduce) meet at a
barrier.

If any operation raises, the run is aborted: every waiting worker wakes up
and stops, and :meth:`DeviceWorkers.run` re-raises the first error in the
calling thread, so one worker's failure never hangs the others.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable

from convnet.plan import Op

_POLL_SECONDS = 0.05


class _Aborted(Exception):
    """Raised inside a worker when another worker has failed."""


class DeviceWorkers:
    """Persistent worker threads, one per device, reused across steps."""

    def __init__(self, devices: list):
        self.devices = devices
        self._inboxes = [queue.Queue() for _ in devices]
        self._threads = [threading.Thread(target=self._serve, args=(i,), daemon=True,
                                          name=f"device-{i}") for i in range(len(devices))]
        self._done: queue.Queue = queue.Queue()
        self._barriers: dict = {}
        self._barrier_lock = threading.Lock()
        self._finished: list[threading.Event] = []
        self._abort = threading.Event()
        for t in self._threads:
            t.start()

    def run(self, ops: list[Op], fn: Callable[[Op, int], None]) -> None:
        """Run ``fn(op, device)`` for every op on each of its devices; re-raise the first error."""
        self._finished = [threading.Event() for _ in range(max((op.index for op in ops),
                                                               default=-1) + 1)]
        present = {op.index for op in ops}
        self._abort.clear()
        self._barriers = {}
        per_device = [[] for _ in self.devices]
        for op in ops:
            for d in op.devices:
                per_device[d].append(op)
        for d, inbox in enumerate(self._inboxes):
            inbox.put((per_device[d], present, fn))
        errors = []
        for _ in self.devices:
            error = self._done.get()
            if error is not None:
                errors.append(error)
        real = [e for e in errors if not isinstance(e, _Aborted)]
        if real:
            raise real[0]

    def barrier(self, key, parties: int) -> None:
        """Meet the other ``parties - 1`` workers of collective ``key``."""
        with self._barrier_lock:
            barrier = self._barriers.setdefault(key, threading.Barrier(parties))
        if self._abort.is_set():
            raise _Aborted()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            raise _Aborted() from None

    def close(self) -> None:
        """Stop the workers, also ones still waiting inside an interrupted step."""
        self._fail()
        for inbox in self._inboxes:
            inbox.put(None)
        for t in self._threads:
            t.join(timeout=5)

    def _serve(self, device: int) -> None:
        self.devices[device].activate()
        while True:
            job = self._inboxes[device].get()
            if job is None:
                return
            ops, present, fn = job
            try:
                for op in ops:
                    self._wait_for(op, device, present)
                    fn(op, device)
                    if len(op.devices) == 1:
                        self._finished[op.index].set()
                    else:
                        self._mark_collective_part(op)
                self.devices[device].synchronize()
                self._done.put(None)
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                self._fail()
                self._done.put(error)

    def _mark_collective_part(self, op: Op) -> None:
        """A collective is finished once all its devices have done their part."""
        with self._barrier_lock:
            count = self._barriers.get(("done", op.index), 0) + 1
            self._barriers[("done", op.index)] = count
        if count == len(op.devices):
            self._finished[op.index].set()

    def _wait_for(self, op: Op, device: int, present: set[int]) -> None:
        for dep in op.deps:
            if dep not in present:
                continue
            event = self._finished[dep]
            while not event.wait(_POLL_SECONDS):
                if self._abort.is_set():
                    raise _Aborted()
            if self._abort.is_set():
                raise _Aborted()

    def _fail(self) -> None:
        self._abort.set()
        with self._barrier_lock:
            for barrier in self._barriers.values():
                if isinstance(barrier, threading.Barrier):
                    barrier.abort()
