"""Replicas of a data-parallel net that run apart, one thread each.

Both ways of letting the replicas of a data-parallel net run apart (local SGD
between its averages, :mod:`convnet.runtime.sync.local_replicas`, and async:S,
:mod:`convnet.runtime.sync.async_replicas`) make each replica a one-device
:class:`~convnet.runtime.step.executor.Executor` of the whole net, driven by its
own thread, and hand the training loop a stand-in for the lockstep executor.
This module holds what they share: the threads, the jobs that the caller
runs on every replica's own thread between shards (evaluations, draining),
and failure handling: the first error of any replica stops them all and
reaches the caller at its next call, so nothing ever waits without watching
for it.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future

from convnet.errors import ConvnetError
from convnet.runtime.step.records import StepResult

_POLL_SECONDS = 0.05


class ReplicaFailed(ConvnetError):
    """A replica's thread raised an error that is not one of the engine's worded ones
    (those reach the caller as they are)."""


class ReplicaThreads:
    """Threads for the one-device executors ``replicas`` (this process's replicas of a
    data-parallel net); ``names`` says which replica each is, for error messages.

    A subclass says what a replica does next (:meth:`_next_shard`, called holding the
    lock; None: wait) and how it trains it (:meth:`_train`)."""

    def __init__(self, replicas: list, names: list[str]):
        self.replicas = replicas
        self._names = names
        self._jobs: list[collections.deque] = [collections.deque() for _ in replicas]
        self._error: BaseException | None = None
        self._failed_replica: int | None = None
        self._closing = False
        self._cv = threading.Condition()
        self._threads = [threading.Thread(target=self._serve, args=(r,), daemon=True,
                                          name=f"replica-{r}") for r in range(len(replicas))]

    def _start(self) -> None:
        """Start the threads (once the subclass has set up what they read)."""
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------ the caller's side
    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._release_waits()
        for thread in self._threads:
            thread.join(timeout=5)
        for replica in self.replicas:
            replica.close()

    def _wait_until(self, ready, bound=None) -> None:
        """Wait (holding the lock between checks) until ``ready()`` or a replica fails;
        ``bound`` (a :class:`~convnet.runtime.processes.communicator.WaitBound`) ends a
        wait on other ranks that lasts too long."""
        while not ready():
            self._raise_if_failed()
            if bound is not None:
                bound.check()
            self._cv.wait(_POLL_SECONDS)
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is None:
            return
        if isinstance(error, ConvnetError) or not isinstance(error, Exception):
            raise error
        raise ReplicaFailed(f"{self._failed_where()} failed: {type(error).__name__}: "
                            f"{error}") from error

    def _failed_where(self) -> str:
        """What failed, for the error message."""
        return self._names[self._failed_replica]

    def _on_every_replica(self, fn) -> list:
        """``fn(r)`` on every replica's own thread (once it is between shards); the results
        in replica order."""
        futures = [Future() for _ in self.replicas]
        with self._cv:
            self._raise_if_failed()
            for r, future in enumerate(futures):
                self._jobs[r].append((fn, future))
            self._cv.notify_all()
            self._wait_until(lambda: all(f.done() for f in futures))
        return [f.result() for f in futures]

    def _fail(self, error: BaseException, replica: int | None) -> None:
        """Record the run's first error (``replica``: whose; None: not a replica's)."""
        with self._cv:
            if self._error is None:
                self._error, self._failed_replica = error, replica
            self._cv.notify_all()
        self._release_waits()

    def _release_waits(self) -> None:
        """On a failure or at close: wake whatever a replica may be blocked in besides the
        lock (a subclass's)."""

    # ----------------------------------------------------------- the replicas' side
    def _serve(self, r: int) -> None:
        self.replicas[r].devices[0].activate()
        try:
            while True:
                work = self._next_work(r)
                if work is None:
                    return
                if isinstance(work, tuple):
                    fn, future = work
                    future.set_result(fn(r))
                else:
                    self._train(r, work)
                with self._cv:
                    self._cv.notify_all()
        except BaseException as error:  # noqa: BLE001 - handed to the caller
            self._fail(error, r)

    def _next_work(self, r: int):
        """The next job for replica ``r`` (the caller's first), else its next shard once
        :meth:`_next_shard` has one; None when the run ends."""
        with self._cv:
            while True:
                if self._closing or self._error is not None:
                    return None
                if self._jobs[r]:
                    return self._jobs[r].popleft()
                shard = self._next_shard(r)
                if shard is not None:
                    return shard
                self._cv.wait(_POLL_SECONDS)

    def _next_shard(self, r: int):
        raise NotImplementedError

    def _train(self, r: int, shard) -> None:
        raise NotImplementedError


def combined(results: list[StepResult]) -> StepResult:
    """One result for several shards' or parts' (case-weighted means; seconds added)."""
    cases = sum(r.num_cases for r in results)
    sums: dict[str, dict[str, float]] = {}
    for result in results:
        for layer, costs in result.costs.items():
            totals = sums.setdefault(layer, {})
            for k, v in costs.items():
                totals[k] = totals.get(k, 0.0) + v * result.num_cases
    return StepResult(cases, {layer: {k: v / cases for k, v in totals.items()}
                              for layer, totals in sums.items()},
                      sum(r.seconds for r in results))


__all__ = ["ReplicaFailed", "ReplicaThreads", "combined"]
