"""Local SGD of a data-parallel net with the replicas running apart between averages.

Under ``--sync local:K`` a replica needs nothing from the others between two
averages: it trains on its own shard of every minibatch and updates its own
weights and momentum.  The lockstep executor still ends every step when the
slowest device does, so a device that lags in one step holds the others in
that step, and the lags of different devices in different steps add up.
Here each replica is a one-device :class:`~convnet.runtime.step.executor.Executor`
on its own thread, working through its own queue of shards (shard r of every
minibatch goes to replica r, as in a lockstep step), and the replicas meet
only where a layer averages: after the K-th step every replica waits for the
others, then each averages its slice of the layer's weights and copies the
others' slices, as the lockstep walk does
(:meth:`~convnet.runtime.devices.collectives.ChunkedAllReduce.average_slice`).  A
replica that lagged in one step catches up in the next ones before the
average; only a device slower at every step sets the pace.

It is the same arithmetic on the same shards in the same order per replica,
with the same dropout masks (each shard keeps its case offset and step), so
the weights are bitwise those of the lockstep walk: the walk is the only
difference.  That holds for nets whose every replicated layer trains by local
SGD (:func:`apart_periods`), in one process; a net with synchronous layers,
a hybrid net, a multi-process run, ``--sequential`` and ``--profile`` keep
the lockstep executor.

The training loop sees what it sees of an :class:`Executor`: :meth:`step`
queues a minibatch's shards and returns the costs of the steps every
replica has finished since the last call, :meth:`settle` trains what is
queued before a test; evaluation, features and checkpoints run on the
drained replicas, each on its own shard as in a lockstep step (between two
averages the replicas' weights differ), and a checkpoint holds replica 0's
weights and momentum, as the lockstep walk saves them.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass

import numpy as np

from convnet.config.model import NetConfig, on_one_device
from convnet.plan.ops import AllReduce, Plan, shard_bounds
from convnet.plan.planner import make_plan
from convnet.runtime.sync.replica_plans import async_replica_devices, replica_statistics_layers
from convnet.runtime.step.batch_check import check_batch
from convnet.runtime.devices.collectives import ChunkedAllReduce
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.records import OpTiming, StepResult
from convnet.runtime.sync.replica_threads import ReplicaThreads, combined
from convnet.runtime.devices.slowdown import Slowdown
from convnet.runtime.step.tasks import local_periods


def apart_periods(plan: Plan, net: NetConfig, local_sgd: int | None) -> dict[str, int] | None:
    """Layer -> K when the replicas of ``plan`` can run apart under local SGD: a
    data-parallel net whose every replicated layer trains by local SGD (``--sync
    local:K`` or its own ``sync=local:K`` key) and none normalises over every replica's
    cases (bnorm's ``stats=global``, whose statistics need the replicas together at
    each step); None otherwise."""
    if async_replica_devices(plan) is None or replica_statistics_layers(plan, net):
        return None
    periods = local_periods(plan, net, local_sgd)
    replicated = {op.layer for op in plan.ops if isinstance(op, AllReduce)}
    return periods if replicated and set(periods) == replicated else None


@dataclass
class _Shard:
    step: int  # the minibatch step it belongs to
    batch: list
    case_offset: int  # of its first case in the minibatch (the dropout masks' key)
    progress: float


class LocalReplicas(ReplicaThreads):
    """The replicas of ``net`` on ``devices`` (those of
    :func:`~convnet.runtime.sync.replica_plans.async_replica_devices`), trained by local
    SGD with the layers' periods ``periods`` (from :func:`apart_periods`), apart
    between averages.  ``seed``, ``check_finite``, ``slowdown`` and ``precision`` are the
    :class:`Executor`'s."""

    def __init__(self, net: NetConfig, plan: Plan, devices: list, periods: dict[str, int],
                 seed: int = 0, check_finite: bool = True, slowdown: Slowdown | None = None,
                 precision: str = "fp32"):
        replica_devices = async_replica_devices(plan)
        if replica_devices is None:
            raise ValueError("the replicas run apart only in a data-parallel net")
        self.net, self.plan, self.periods = net, plan, dict(periods)
        self.count = count = len(replica_devices)
        self.replica_devices = replica_devices
        one = on_one_device(net)
        one_plan = make_plan(one, (plan.physical_devices[replica_devices[0]],),
                             plan.minibatch // count)
        super().__init__([Executor(one, one_plan, [devices[d]], seed=seed, parallel=False,
                                   check_finite=check_finite, precision=precision,
                                   slowdown=slowdown and slowdown.on_devices((d,)))
                          for d in replica_devices],
                         [f"replica {r} (device {d})" for r, d in enumerate(replica_devices)])
        self._averaging = ChunkedAllReduce([devices[d] for d in replica_devices])
        self._barrier = threading.Barrier(count)
        self._queued = 0  # the steps queued
        self.timings = None  # set to a list by timed_steps: each replica's operations
        self._started = 0.0  # when timed_steps began its current step
        # Each replica's queue of shards, and each step's results by replica.
        self._queues: list[list[_Shard]] = [[] for _ in range(count)]
        self._results: dict[int, dict[int, StepResult]] = {}
        self._completed = 0  # the steps every replica has finished
        self._finished: list[StepResult] = []  # completed since the last step() or settle()
        # Steps queued past the slowest replica: enough for a fast one to run up to the
        # next average.  The shards are views of the caller's minibatches (never written).
        self._queue_limit = max(self.periods.values())
        self._start()

    # ------------------------------------------------------------ the caller's side
    @property
    def step_count(self) -> int:
        """The steps queued so far."""
        return self._queued

    @step_count.setter
    def step_count(self, steps: int) -> None:
        """Go on from step ``steps`` (a resumed run), once everything queued is trained."""
        self.drain()
        with self._cv:
            self._queued = self._completed = steps

    def step(self, batch: list[np.ndarray], progress: float = 0.0) -> StepResult:
        """Queue one minibatch's shards; the costs of the steps completed since the last
        call, with this call's wall time (it waits only while the queue is full)."""
        start = time.perf_counter()
        num_cases = check_batch(self.net, self.plan, batch)
        with self._cv:
            self._raise_if_failed()
            for queue, (lo, hi) in zip(self._queues, shard_bounds(num_cases, self.count)):
                queue.append(_Shard(self._queued, [c[lo:hi] for c in batch], lo, progress))
            self._queued += 1
            self._cv.notify_all()
            self._wait_until(lambda: self._queued - self._completed <= self._queue_limit)
            finished, self._finished = self._finished, []
        result = combined(finished)
        result.seconds = time.perf_counter() - start
        return result

    def drain(self) -> None:
        """Wait until every replica has trained every queued shard."""
        with self._cv:
            self._wait_until(lambda: self._completed >= self._queued)

    def settle(self) -> StepResult:
        """Drain, and return the costs of the steps completed since the last :meth:`step`
        with the drain's wall time (the training loop counts them before it tests)."""
        start = time.perf_counter()
        self.drain()
        with self._cv:
            finished, self._finished = self._finished, []
        result = combined(finished)
        result.seconds = time.perf_counter() - start
        return result

    def evaluate(self, batch: list[np.ndarray]) -> StepResult:
        """Forward only: replica r evaluates shard r with its own weights, as in a
        lockstep evaluation."""
        return combined(self._on_shards(batch, lambda replica, part: replica.evaluate(part)))

    def features(self, batch: list[np.ndarray], layer: str) -> np.ndarray:
        return np.concatenate(self._on_shards(batch, lambda replica, part:
                                              replica.features(part, layer)))

    def _on_shards(self, batch, fn) -> list:
        """``fn(replica r, shard r of batch)`` on each drained replica's thread."""
        self.drain()
        bounds = shard_bounds(check_batch(self.net, self.plan, batch), self.count)
        return self._on_every_replica(
            lambda r: fn(self.replicas[r], [c[slice(*bounds[r])] for c in batch]))

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Replica 0's weights and momentum, as the lockstep walk saves them."""
        self.drain()
        return self.replicas[0].state_arrays()

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.drain()
        for replica in self.replicas:
            replica.load_state_arrays(arrays)

    def timed_steps(self, batch: list[np.ndarray], steps: int) -> list[tuple[float, list]]:
        """``steps`` training steps of ``batch`` after a warm-up step, each drained, as
        (its seconds, every replica's :class:`OpTiming` list on the run's devices, the
        averages included): the profile of ``--compare``.  The weights change as in any
        training step, and the costs of these steps are not reported."""
        runs = []
        for i in range(max(int(steps), 1) + 1):
            self.timings = [[] for _ in self.replicas]
            self._started = time.perf_counter()
            self.step(batch, progress=1.0)
            self.settle()
            seconds = time.perf_counter() - self._started
            if i:
                runs.append((seconds, [t for per_replica in self.timings for t in per_replica]))
        self.timings = None
        for replica in self.replicas:
            replica.timings = None  # the replicas record no more operations
        return runs

    def close(self) -> None:
        super().close()
        self._averaging.close()

    def _release_waits(self) -> None:
        self._barrier.abort()  # a replica waiting for the others to average stops

    # ----------------------------------------------------------- the replicas' side
    def _next_shard(self, r: int) -> _Shard | None:
        queue = self._queues[r]
        return queue.pop(0) if queue else None

    def _train(self, r: int, shard: _Shard) -> None:
        """Train on ``shard`` with a local update, then take part in the averages due."""
        replica = self.replicas[r]
        replica.step_count = shard.step  # the dropout masks' step, and the slowdown's
        profile = self.timings
        if profile is not None:
            replica.timings = []
        began = time.perf_counter()
        result = replica.step(shard.batch, shard.progress, case_offset=shard.case_offset)
        if profile is not None:
            offset = began - self._started
            profile[r].extend(dataclasses.replace(t, device=self.replica_devices[r],
                                                  start=t.start + offset, end=t.end + offset)
                              for t in replica.timings)
        due = [layer for layer, period in self.periods.items() if (shard.step + 1) % period == 0]
        if due:
            self._average(r, due, profile)
        with self._cv:
            done = self._results.setdefault(shard.step, {})
            done[r] = result
            while len(self._results.get(self._completed, ())) == self.count:
                per_replica = self._results.pop(self._completed)
                self._finished.append(combined([per_replica[q] for q in range(self.count)]))
                self._completed += 1

    def _average(self, r: int, layers: list[str], profile) -> None:
        """Replica ``r``'s part of averaging ``layers``: once every replica has updated,
        its slice of the mean; once every slice is averaged, the others' slices (and
        ``wball``); then it waits until every replica has read its slice."""
        began = time.perf_counter()
        weights = {layer: [replica.store.weights[layer][0] for replica in self.replicas]
                   for layer in layers}
        self._barrier.wait()
        for layer in layers:
            self._averaging.average_slice(weights[layer], r)
        self._barrier.wait()
        for layer in layers:
            self._averaging.gather_slices(weights[layer], r)
            self.replicas[r].constrain(layer, 0)
        self._barrier.wait()
        if profile is not None:  # one span: the layers average together
            profile[r].append(OpTiming(self.replica_devices[r], "allreduce", "+".join(layers),
                                       began - self._started,
                                       time.perf_counter() - self._started))


__all__ = ["LocalReplicas", "apart_periods"]
