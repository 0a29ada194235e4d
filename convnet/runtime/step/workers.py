"""One worker thread per logical device, running its share of a step's tasks.

Each worker gets the tasks (:mod:`convnet.runtime.step.tasks`) that involve its device, in
list order (a subsequence of one global topological order).  It runs the
first task that may run now: one whose dependencies have finished and which
no earlier pending task of its device holds back.  An earlier task holds
back every later one unless it is *deferrable* (a part of an all-reduce or a
weight update: it only touches its own layer's weight state) and the later
one belongs to another layer.  So a worker whose all-reduce of one layer
still waits for another device goes on with the backward pass of the layers
below, instead of idling; the work of each layer, and of every buffer, still
happens in list order, which keeps results bitwise reproducible.  A task
whose devices meet inside it (an NCCL all-reduce, at a barrier) only starts
when nothing earlier is pending on its device.

Why this cannot deadlock: the earliest unfinished task in the global order
has all its dependencies finished and nothing earlier pending on its devices,
so its workers run it as soon as they are free; no task blocks once started
except at a barrier, which all its devices reach in that same way.

If any task raises, the run is aborted: every worker stops before its next task
(a waiting one wakes up), and :meth:`DeviceWorkers.run` re-raises the first error in
the calling thread, so one worker's failure never hangs the others.  A Ctrl-C in the
calling thread aborts the step the same way, and the workers are back, idle, before
it is raised, so the same workers run the next step (a notebook's interrupted
prediction, then another).  In a multi-process
run (``wait_after_error=False``) it re-raises at once, without waiting for
workers that may be blocked in a receive from another process: the caller
then ends every process of the run.

A receive from another process (:mod:`convnet.runtime.step.rank_tasks`) blocks
its worker, so, like a barrier task, it only starts when nothing earlier is
pending on its device.  The argument above then still holds across
processes: the ranks' task lists are subsequences of one global order in
which every send precedes its receive, and a worker blocked in a receive has
finished everything before it, so the earliest unfinished task of that
order is never stuck behind one.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable

_POLL_SECONDS = 0.05


class _Aborted(Exception):
    """Raised inside a worker when another worker has failed."""


class DeviceWorkers:
    """Persistent worker threads, one per device, reused across steps."""

    def __init__(self, devices: list, wait_after_error: bool = True):
        self.devices = devices
        self.wait_after_error = wait_after_error
        self._inboxes = [queue.Queue() for _ in devices]
        self._wake = [threading.Event() for _ in devices]
        self._threads = [threading.Thread(target=self._serve, args=(i,), daemon=True,
                                          name=f"device-{i}") for i in range(len(devices))]
        self._done: queue.Queue = queue.Queue()
        self._barriers: dict = {}
        self._barrier_lock = threading.Lock()
        self._finished: list[threading.Event] = []
        self._abort = threading.Event()
        for t in self._threads:
            t.start()

    def run(self, tasks: list, fn: Callable[[object, int], None],
            finish: Callable[[int], None] | None = None) -> None:
        """Run ``fn(task, device)`` for every task on each of its devices; re-raise the
        first error.  A task has ``index``, ``deps``, ``devices``, ``layer``,
        ``deferrable`` and ``barrier`` (see :class:`convnet.runtime.step.tasks.Task`).
        After its last task each worker calls ``finish(device)``, which must end with
        the device synchronised (the executor fetches the step's device results there);
        without it, the worker synchronises its device."""
        self._finished = [threading.Event() for _ in range(max((t.index for t in tasks),
                                                               default=-1) + 1)]
        present = {t.index for t in tasks}
        self._abort.clear()
        self._barriers = {}
        per_device = [[] for _ in self.devices]
        for task in tasks:
            for d in task.devices:
                per_device[d].append(task)
        for d, inbox in enumerate(self._inboxes):
            inbox.put((per_device[d], present, fn, finish))
        errors = []
        for received in range(len(self.devices)):
            error = self._report(len(self.devices) - received)
            if error is not None:
                errors.append(error)
                if not self.wait_after_error and not isinstance(error, _Aborted):
                    raise error
        real = [e for e in errors if not isinstance(e, _Aborted)]
        if real:
            raise real[0]

    def _report(self, outstanding: int):
        """The next worker's end of the step (None, or its error).  A Ctrl-C or SIGTERM
        while waiting for it abandons the step: the workers stop at their next task and
        are waited for (not in a multi-process run, whose caller ends every process), so
        that none is still in this step when the next one starts and takes its report
        for the new step's."""
        try:
            return self._done.get()
        except BaseException:
            self._fail()
            if self.wait_after_error:
                for _ in range(outstanding):
                    self._done.get()
            raise

    @property
    def thread_ids(self) -> list[int | None]:
        """The operating system's id of each device's worker thread, in device order
        (what a profile reads their run-queue waits by)."""
        return [t.native_id for t in self._threads]

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
            pending, present, fn, finish = job
            try:
                while pending:
                    if self._abort.is_set():  # another worker failed, or the step was stopped
                        raise _Aborted()
                    self._wake[device].clear()
                    i = self._next(pending, present)
                    if i is None:
                        self._sleep(device)
                        continue
                    task = pending.pop(i)
                    fn(task, device)
                    self._mark_done(task)
                if finish is None:
                    self.devices[device].synchronize()
                else:
                    finish(device)
                self._done.put(None)
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                self._fail()
                self._done.put(error)

    def _next(self, pending: list, present: set[int]) -> int | None:
        """Position in ``pending`` of the first task that may run now, or None."""
        held_layers = set()
        for i, task in enumerate(pending):
            if (task.layer not in held_layers and (i == 0 or not task.barrier)
                    and all(self._finished[d].is_set() for d in task.deps if d in present)):
                return i
            if not task.deferrable:
                return None
            held_layers.add(task.layer)
        return None

    def _sleep(self, device: int) -> None:
        """Wait until some task finishes (or the run is aborted)."""
        while not self._wake[device].wait(_POLL_SECONDS):
            if self._abort.is_set():
                raise _Aborted()
        if self._abort.is_set():
            raise _Aborted()

    def _mark_done(self, task) -> None:
        """Finish ``task`` (a multi-device task once all its devices did their part)."""
        if len(task.devices) > 1:
            with self._barrier_lock:
                count = self._barriers.get(("done", task.index), 0) + 1
                self._barriers[("done", task.index)] = count
            if count < len(task.devices):
                return
        self._finished[task.index].set()
        for wake in self._wake:
            wake.set()

    def _fail(self) -> None:
        self._abort.set()
        for wake in self._wake:
            wake.set()
        with self._barrier_lock:
            for barrier in self._barriers.values():
                if isinstance(barrier, threading.Barrier):
                    barrier.abort()
