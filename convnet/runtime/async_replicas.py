"""Asynchronous data parallelism with bounded staleness (``--sync async:S``).

In a lockstep step every replica waits for the slowest one, so a slow device
holds every step.  Here the replicas of a data-parallel net run apart: each
replica is a one-device :class:`~convnet.runtime.executor.Executor` of the
whole net driven by its own thread, and takes shards from one shared queue
fed by the training loop (a minibatch of step t is cut into R shards, as in a
synchronous step).  A faster replica therefore takes more shards.

* **Own update at once.** A replica trains on its shard and updates its own
  weights and momentum with its shard's gradient, the learning rates divided
  by R: the R shard updates of a minibatch then add up to synchronous SGD's
  one update (gradient and weight-decay terms alike).
* **The others' updates when they arrive.** The increment a replica's update
  added to its weights (the optimizer's ``inc``) is sent to every other
  replica, which adds it to its own weights before its next shard (and
  rescales ``wball`` layers).  A replica's weights are thus the initial
  weights plus every update it has received; momentum stays each replica's
  own, as under local SGD.
* **Bounded staleness S.** A replica may start a shard of step t only when
  every shard of the steps before ``t - S`` is finished, and it adds every
  finished update before starting.  So no replica runs more than S steps
  ahead of the oldest shard still in work, and a gradient never misses the
  updates of more than the last S steps (plus its own step's).  A replica
  that would break the bound waits.

The order in which updates arrive depends on timing, so runs are not bitwise
reproducible (with one replica it is synchronous SGD exactly).  The run's
state is read after a *drain*: every queued shard trained and every replica
holding every update, when the replicas agree up to float rounding;
evaluation then cuts its minibatch into pieces that the replicas take from a
shared list (a faster replica evaluates more), and checkpoints hold replica
0's weights and momentum.

Only nets whose every layer is replicated on the same devices qualify
(:func:`async_replica_devices`): a hybrid net keeps its lockstep schedule.
If a replica fails, the others stop and the caller's next call raises its
error; nothing waits without also watching for that.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from convnet.config.model import NetConfig, on_one_device
from convnet.errors import ConvnetError
from convnet.plan.ops import Plan, shard_bounds
from convnet.plan.planner import make_plan
from convnet.runtime.batch_check import check_batch
from convnet.runtime.executor import Executor, StepResult
from convnet.runtime.learning_rules import ScaledRate, scale_rates

_POLL_SECONDS = 0.05
EVAL_PIECES = 2  # pieces per replica that an evaluation's minibatch is cut into


def async_replica_devices(plan: Plan) -> tuple[int, ...] | None:
    """The devices of the replicas when every placed layer of ``plan`` is replicated on
    the same devices in the same order (a data-parallel net); None otherwise."""
    lists = {p.devices for p in plan.layers.values() if p.devices}
    return next(iter(lists)) if len(lists) == 1 and plan.num_passes == 1 else None


@dataclass
class _Shard:
    step: int  # the minibatch step it belongs to
    index: int  # its position in that minibatch
    batch: list
    progress: float


@dataclass
class StalenessRecord:
    """What the bound did: the largest lead taken (steps between a started shard and the
    oldest shard in work), how often a replica waited for it, and how many shards each
    replica trained."""

    max_lead: int = 0
    waits: int = 0
    shards: list = dataclasses.field(default_factory=list)


class ReplicaFailed(ConvnetError):
    """A replica's thread raised an error that is not one of the engine's worded ones
    (those reach the caller as they are)."""


class AsyncReplicas:
    """The replicas of ``net`` on ``devices`` (those :func:`async_replica_devices` names),
    trained asynchronously with staleness bound ``staleness``.

    It offers what the training loop uses of an :class:`Executor`: ``step``,
    ``evaluate``, ``features``, ``state_arrays``, ``load_state_arrays``,
    ``step_count``, ``timings`` and ``close``.  ``step`` queues the minibatch's shards
    and returns the costs of the shards finished since the last call (it waits only
    while the queue is full).  ``seed``, ``check_finite`` and ``slowdown`` (device
    index -> factor) are the :class:`Executor`'s.
    """

    def __init__(self, net: NetConfig, plan: Plan, devices: list, staleness: int,
                 seed: int = 0, check_finite: bool = True,
                 slowdown: dict[int, float] | None = None):
        replica_devices = async_replica_devices(plan)
        if replica_devices is None:
            raise ValueError("asynchronous training needs every layer replicated on the same "
                             "devices (a data-parallel net)")
        if staleness < 0:
            raise ValueError(f"the staleness bound is a number of steps >= 0, not {staleness}")
        self.net, self.plan, self.staleness = net, plan, staleness
        self.replica_devices = replica_devices
        count = len(replica_devices)
        one = on_one_device(net)
        one_plan = make_plan(one, (plan.physical_devices[replica_devices[0]],),
                             plan.minibatch // count)
        slowdown = slowdown or {}
        self.replicas = [Executor(one, one_plan, [devices[d]], seed=seed, parallel=False,
                                  check_finite=check_finite,
                                  slowdown={0: slowdown[d]} if d in slowdown else None)
                         for d in replica_devices]
        if count > 1:
            for replica in self.replicas:
                for name in replica.store.rules:
                    scale_rates(replica.store.rules, name, 1.0 / count)
        self.step_count = 0
        self.timings = None  # per-operation profiles are a lockstep figure: not recorded
        self.record = StalenessRecord(shards=[0] * count)
        self._queue: collections.deque[_Shard] = collections.deque()
        self._queue_limit = 2 * count
        self._in_work: list[int | None] = [None] * count  # step of each replica's shard
        # Per replica, the increments sent to it: layer -> array name -> array (on the
        # sender's device), in arrival order.
        self._inboxes: list[list[dict]] = [[] for _ in range(count)]
        self._jobs: list[collections.deque] = [collections.deque() for _ in range(count)]
        self._finished: list[tuple[int, StepResult]] = []  # (shard index, its result)
        self._error: BaseException | None = None
        self._failed_replica: int | None = None
        self._closing = False
        self._cv = threading.Condition()
        self._threads = [threading.Thread(target=self._serve, args=(r,), daemon=True,
                                          name=f"replica-{r}") for r in range(count)]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------ the caller's side
    def step(self, batch: list[np.ndarray], progress: float = 0.0) -> StepResult:
        """Queue one minibatch's shards; the costs of the shards finished since the last
        call, with this call's wall time (the training loop's clock: it runs only as fast
        as the replicas empty the queue)."""
        start = time.perf_counter()
        num_cases = check_batch(self.net, self.plan, batch)
        with self._cv:
            self._raise_if_failed()
            for i, (lo, hi) in enumerate(shard_bounds(num_cases, len(self.replicas))):
                self._queue.append(_Shard(self.step_count, i,
                                          [np.array(c[lo:hi]) for c in batch], progress))
            self.step_count += 1
            self._cv.notify_all()
            self._wait_until(lambda: len(self._queue) <= self._queue_limit)
            finished, self._finished = self._finished, []
        result = _combined([r for _, r in sorted(finished, key=lambda f: f[0])])
        result.seconds = time.perf_counter() - start
        return result

    def drain(self) -> None:
        """Wait until every queued shard is trained and every replica holds every update.
        The costs of the shards finished meanwhile are kept for the next :meth:`step`."""
        with self._cv:
            self._wait_until(lambda: not self._queue and all(s is None for s in self._in_work))
        self._on_every_replica(self._add_received)

    def settle(self) -> StepResult:
        """Drain, and return the costs of the shards finished since the last :meth:`step`
        with the drain's wall time: the training that :meth:`step` only queued, so that
        a training loop counts it (and its time) before it tests."""
        start = time.perf_counter()
        self.drain()
        with self._cv:
            finished, self._finished = self._finished, []
        result = _combined([r for _, r in sorted(finished, key=lambda f: f[0])])
        result.seconds = time.perf_counter() - start
        return result

    def evaluate(self, batch: list[np.ndarray]) -> StepResult:
        """Forward only on the drained replicas.  The minibatch is cut into pieces that
        the replicas take from a shared list, so a faster replica evaluates more of
        them; the results are combined in piece order."""
        self.drain()
        num_cases = check_batch(self.net, self.plan, batch)
        count = len(self.replicas)
        # One replica evaluates the minibatch whole: exactly the lockstep evaluation.
        cuts = shard_bounds(num_cases, min(num_cases, count * EVAL_PIECES) if count > 1 else 1)
        pieces = collections.deque((i, [c[lo:hi] for c in batch])
                                   for i, (lo, hi) in enumerate(cuts))

        def evaluate_pieces(r: int) -> list[tuple[int, StepResult]]:
            done = []
            while True:
                with self._cv:
                    if not pieces:
                        return done
                    i, part = pieces.popleft()
                done.append((i, self.replicas[r].evaluate(part)))

        results = [done for per_replica in self._on_every_replica(evaluate_pieces)
                   for done in per_replica]
        return _combined([result for _, result in sorted(results, key=lambda d: d[0])])

    def features(self, batch: list[np.ndarray], layer: str) -> np.ndarray:
        self.drain()
        return self.replicas[0].features(batch, layer)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Replica 0's weights and momentum, after a drain (see the module docstring)."""
        self.drain()
        return self.replicas[0].state_arrays()

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.drain()
        for replica in self.replicas:
            replica.load_state_arrays(arrays)

    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        for replica in self.replicas:
            replica.close()

    def _wait_until(self, ready) -> None:
        """Wait (holding the lock between checks) until ``ready()`` or a replica fails."""
        while not ready():
            self._raise_if_failed()
            self._cv.wait(_POLL_SECONDS)
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is None:
            return
        if isinstance(error, ConvnetError) or not isinstance(error, Exception):
            raise error
        device = self.replica_devices[self._failed_replica]
        raise ReplicaFailed(f"replica {self._failed_replica} (device {device}) failed: "
                            f"{type(error).__name__}: {error}") from error

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

    # ----------------------------------------------------------- the replicas' side
    def _serve(self, r: int) -> None:
        replica = self.replicas[r]
        replica.devices[0].activate()
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
            with self._cv:
                if self._error is None:
                    self._error, self._failed_replica = error, r
                self._cv.notify_all()

    def _next_work(self, r: int):
        """The next job for replica ``r`` (one of the caller's first), the next shard once
        the staleness bound allows it, or None when the run ends."""
        waited = False
        with self._cv:
            while True:
                if self._closing or self._error is not None:
                    return None
                if self._jobs[r]:
                    return self._jobs[r].popleft()
                if self._queue:
                    step = self._queue[0].step
                    busy = [s for s in self._in_work if s is not None]
                    oldest = min(busy, default=step)
                    if step - oldest <= self.staleness:
                        shard = self._queue.popleft()
                        self._in_work[r] = step
                        record = self.record
                        record.max_lead = max(record.max_lead, step - oldest)
                        record.shards[r] += 1
                        self._cv.notify_all()  # room in the queue
                        return shard
                    if not waited:
                        record = self.record
                        record.waits += 1
                        waited = True
                self._cv.wait(_POLL_SECONDS)

    def _train(self, r: int, shard: _Shard) -> None:
        """Add the updates received so far, train on ``shard`` and update at once, then
        send the update's increments to the other replicas."""
        self._add_received(r)
        replica = self.replicas[r]
        count = len(self.replicas)
        replica.step_count = shard.step * count + shard.index  # the dropout masks' step
        result = replica.step(shard.batch, shard.progress)
        increments = None
        if count > 1:
            device = replica.devices[0]
            increments = {name: {k: device.copy_from(v) for k, v in momentum[0].items()}
                          for name, momentum in replica.store.momentum.items()}
            device.synchronize()
        with self._cv:
            for q, inbox in enumerate(self._inboxes):
                if q != r and increments is not None:
                    inbox.append(increments)
            self._in_work[r] = None
            self._finished.append((shard.step * count + shard.index, result))
            self._cv.notify_all()

    def _add_received(self, r: int) -> None:
        """Add every increment sent to replica ``r`` to its weights, in arrival order."""
        with self._cv:
            received, self._inboxes[r] = self._inboxes[r], []
        if not received:
            return
        replica = self.replicas[r]
        device = replica.devices[0]
        weights = replica.store.weights
        for increments in received:
            for name, arrays in increments.items():
                for k, inc in arrays.items():
                    weights[name][0][k] += device.copy_from(inc)
        for name, rules in replica.store.rules.items():
            if any(rule.ball for rule in rules.values()):
                replica._constrain(name, 0)  # the executor's own wball step


def _combined(results: list[StepResult]) -> StepResult:
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


__all__ = ["AsyncReplicas", "ReplicaFailed", "ScaledRate",
           "StalenessRecord", "async_replica_devices"]
