"""Asynchronous data parallelism with bounded staleness (``--sync async:S``).

In a lockstep step every replica waits for the slowest one, so a slow device
holds every step.  Here the replicas of a data-parallel net run apart: each
replica is a one-device :class:`~convnet.runtime.step.executor.Executor` of the
whole net driven by its own thread, and takes shards from one shared queue
fed by the training loop (a minibatch of step t is cut into R shards, as in a
synchronous step).  A faster replica therefore takes more shards.

* **Own update at once.** A replica updates its own weights and momentum with
  its shard's gradient sum over M / R (M: the minibatch's cases, also for an
  uneven cut), the learning rates divided by R: the R shard updates of a
  minibatch add up to synchronous SGD's one (gradient and weight decay alike).
* **The others' updates when they arrive.** The increment a replica's update
  added (the optimizer's ``inc``) is sent to every other replica, which adds it
  to its own weights before its next shard (and rescales ``wball`` layers): its
  weights are the initial ones plus every update it has received; momentum
  stays each replica's own, as under local SGD.
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
(:func:`~convnet.runtime.sync.replica_plans.async_replica_devices`): a hybrid net
keeps its lockstep schedule.
If a replica fails, the others stop and the caller's next call raises its
error; nothing waits without also watching for that.

**Several processes.** In a multi-process run each rank makes the replicas
of its own devices, and every rank's training loop queues the same stream of
shards, numbered in queueing order.  A free replica *claims* the next number
from a dealer: a counter here in one process, rank 0's in several (through
a :class:`~convnet.runtime.processes.rank_courier.RankCourier`, which also sends each
finished shard's increments and costs to the other ranks).  A shard counts
as finished on a rank once it was trained there or its update arrived there,
so the bound above holds across processes: a replica starts a shard of step
t only when this rank holds the update of every shard of the steps before
t - S.  An evaluation's pieces are dealt the same way (a stream of their
own) and the ranks exchange the results; features are each rank's own
replicas' (they agree with the others' once drained); rank 0, which holds
replica 0, returns the checkpoint state.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from convnet.config.model import NetConfig, on_one_device
from convnet.plan.ops import Plan, shard_bounds
from convnet.plan.planner import make_plan
from convnet.runtime.step.batch_check import check_batch
from convnet.runtime.processes.cluster import Cluster, single_process
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.records import StepResult
from convnet.runtime.step.learning_rules import ScaledRate, scale_rates
from convnet.runtime.processes.rank_courier import TRAINING, Dealer, RankCourier, update_layout
from convnet.runtime.sync.replica_plans import async_replica_devices
from convnet.runtime.sync.replica_threads import ReplicaThreads, combined
from convnet.runtime.devices.slowdown import Slowdown

EVAL_PIECES = 2  # pieces per replica that an evaluation's minibatch is cut into


@dataclass
class _Shard:
    ordinal: int  # its number in the stream of shards (the order they were queued)
    step: int  # the minibatch step it belongs to
    index: int  # its position in that minibatch
    batch: list
    progress: float
    minibatch_cases: int  # M, the cases of its whole minibatch


@dataclass
class StalenessRecord:
    """What the bound did on this rank: the largest lead taken (steps between a started
    shard and the oldest shard not known to be finished), how often a replica waited
    for it, and how many shards each of this rank's replicas trained."""

    max_lead: int = 0
    waits: int = 0
    shards: list = dataclasses.field(default_factory=list)


class AsyncReplicas(ReplicaThreads):
    """The replicas of ``net`` on ``devices`` (those :func:`async_replica_devices` names),
    trained asynchronously with staleness bound ``staleness``.

    It offers what the training loop uses of an :class:`Executor`: ``step``,
    ``evaluate``, ``features``, ``state_arrays``, ``load_state_arrays``,
    ``step_count``, ``timings`` and ``close``.  ``step`` queues the minibatch's shards
    and returns the costs of the shards finished since the last call (it waits only
    while the queue is full).  ``seed``, ``check_finite``, ``slowdown``, ``precision``
    and ``cluster`` are the :class:`Executor`'s: in a multi-process run ``devices`` holds
    stand-ins for the other ranks' devices, and every rank must make its replica set at
    the same point (see the module docstring).
    """

    def __init__(self, net: NetConfig, plan: Plan, devices: list, staleness: int,
                 seed: int = 0, check_finite: bool = True, slowdown: Slowdown | None = None,
                 cluster: Cluster | None = None, precision: str = "fp32"):
        replica_devices = async_replica_devices(plan)
        if replica_devices is None:
            raise ValueError("asynchronous training needs every layer replicated on the same "
                             "devices (a data-parallel net)")
        if staleness < 0:
            raise ValueError(f"the staleness bound is a number of steps >= 0, not {staleness}")
        self.net, self.plan, self.staleness = net, plan, staleness
        self.cluster = cluster if cluster is not None else single_process(len(devices))
        self.count = count = len(replica_devices)  # R: the replicas of every rank
        self.replica_devices = tuple(d for d in replica_devices if self.cluster.is_local(d))
        one = on_one_device(net)
        one_plan = make_plan(one, (plan.physical_devices[self.replica_devices[0]],),
                             plan.minibatch // count)
        super().__init__([Executor(one, one_plan, [devices[d]], seed=seed, parallel=False,
                                   check_finite=check_finite, precision=precision,
                                   slowdown=slowdown and slowdown.on_devices((d,)))
                          for d in self.replica_devices],
                         [f"replica {replica_devices.index(d)} (device {d})"
                          for d in self.replica_devices])
        if count > 1:
            for replica in self.replicas:
                for name in replica.store.rules:
                    scale_rates(replica.store.rules, name, 1.0 / count)
        self.step_count = 0
        self.timings = None  # per-operation profiles are a lockstep figure: not recorded
        local = len(self.replicas)
        self.record = StalenessRecord(shards=[0] * local)
        # Shards are numbered in queueing order (the same on every rank).
        self._shards: dict[int, _Shard] = {}  # queued, not yet started here nor finished
        self._queued = 0  # shards queued so far
        self._seen = 0  # 1 + the highest shard number known to be claimed
        self._queue_limit = 2 * count  # unclaimed shards the loop may queue ahead
        self._claims: list[int | None] = [None] * local  # each replica's next shard
        self._asking = [False] * local  # waiting for rank 0's answer to a claim
        self._waiting = [False] * local  # held by the staleness bound (counted once)
        self._finished_above: set[int] = set()  # finished shards past the first unfinished
        self._first_unfinished = 0  # every shard before it is finished (known here)
        # Per replica, the increments sent to it: layer -> array name -> array (on the
        # sender's device, or on the host from another rank), in arrival order.
        self._inboxes: list[list[dict]] = [[] for _ in range(local)]
        self._finished: list[tuple[int, StepResult]] = []  # (shard number, its result)
        self._layout = self._courier = None
        if self.cluster.size > 1:
            store = self.replicas[0].store
            self._layout = update_layout({name: {k: v.shape for k, v in momentum[0].items()}
                                          for name, momentum in store.momentum.items()})
            self._courier = RankCourier(self.cluster.comm, self._layout.nbytes,
                                        self._deliver, self._courier_failed)
        self._dealer = self._courier or Dealer()  # claimed from holding the lock
        self._tests = 0  # evaluations so far: each deals its pieces as its own stream
        self._start()

    # ------------------------------------------------------------ the caller's side
    def step(self, batch: list[np.ndarray], progress: float = 0.0) -> StepResult:
        """Queue one minibatch's shards; the costs of the shards finished since the last
        call, with this call's wall time (the training loop's clock: it runs only as fast
        as the replicas empty the queue)."""
        start = time.perf_counter()
        num_cases = check_batch(self.net, self.plan, batch)
        with self._cv:
            self._raise_if_failed()
            for i, (lo, hi) in enumerate(shard_bounds(num_cases, self.count)):
                if not self._is_finished(self._queued):  # (another rank may be ahead)
                    self._shards[self._queued] = _Shard(self._queued, self.step_count, i,
                                                        [np.array(c[lo:hi]) for c in batch],
                                                        progress, num_cases)
                self._queued += 1
            self.step_count += 1
            self._cv.notify_all()
            self._wait_until(lambda: self._queued - self._seen <= self._queue_limit,
                             self.cluster.comm.bound("room in the shard queue"))
            finished, self._finished = self._finished, []
        result = combined([r for _, r in sorted(finished, key=lambda f: f[0])])
        result.seconds = time.perf_counter() - start
        return result

    def drain(self) -> None:
        """Wait until every queued shard is trained and every replica (of this rank) holds
        every update.  The costs of the shards finished meanwhile are kept for the next
        :meth:`step`."""
        with self._cv:
            self._wait_until(lambda: self._first_unfinished >= self._queued,
                             self.cluster.comm.bound("every shard's update, to drain"))
        self._on_every_replica(self._add_received)

    def settle(self) -> StepResult:
        """Drain, and return the costs of the shards finished since the last :meth:`step`
        with the drain's wall time: the training that :meth:`step` only queued, so that
        a training loop counts it (and its time) before it tests."""
        start = time.perf_counter()
        self.drain()
        with self._cv:
            finished, self._finished = self._finished, []
        result = combined([r for _, r in sorted(finished, key=lambda f: f[0])])
        result.seconds = time.perf_counter() - start
        return result

    def evaluate(self, batch: list[np.ndarray]) -> StepResult:
        """Forward only on the drained replicas.  The minibatch is cut into pieces that
        the replicas claim from the dealer, as they claim shards, so a faster replica
        (wherever it runs) evaluates more of them; the results are combined in piece
        order, and with several processes the ranks exchange theirs, so that every rank
        returns the same."""
        self.drain()
        num_cases = check_batch(self.net, self.plan, batch)
        count = self.count
        # One replica evaluates the minibatch whole: exactly the lockstep evaluation.
        cuts = shard_bounds(num_cases, min(num_cases, count * EVAL_PIECES) if count > 1 else 1)
        stream = self._tests = self._tests + 1

        def evaluate_pieces(r: int) -> list[tuple[int, StepResult]]:
            done = []
            while (i := self._claim_piece(stream, len(cuts))) >= 0:
                lo, hi = cuts[i]
                done.append((i, self.replicas[r].evaluate([c[lo:hi] for c in batch])))
            return done

        results = [done for per_replica in self._on_every_replica(evaluate_pieces)
                   for done in per_replica]
        results = [done for share in self.cluster.comm.allgather(  # every rank's pieces
            results, what="gathering a test's results") for done in share]
        return combined([result for _, result in sorted(results, key=lambda d: d[0])])

    def _claim_piece(self, stream: int, limit: int) -> int:
        """(On a replica's thread.)  The next piece of test ``stream``, -1 when all are
        dealt; waits for rank 0's answer where it comes by message."""
        answer: list[int] = []

        def granted(number: int) -> None:
            with self._cv:
                answer.append(number)
                self._cv.notify_all()

        with self._cv:
            if (number := self._dealer.claim(stream, limit, granted)) is not None:
                return number
            self._wait_until(lambda: answer, self.cluster.comm.bound("a test piece", [0]))
        return answer[0]

    def features(self, batch: list[np.ndarray], layer: str) -> np.ndarray:
        self.drain()
        return self.replicas[0].features(batch, layer)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Replica 0's weights and momentum, after a drain (see the module docstring); in
        a multi-process run rank 0 returns them and the other ranks an empty dict."""
        self.drain()
        return self.replicas[0].state_arrays() if self.cluster.rank == 0 else {}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.drain()
        for replica in self.replicas:
            replica.load_state_arrays(arrays)

    def close(self) -> None:
        super().close()
        if self._courier is not None:
            self._courier.close()

    def _failed_where(self) -> str:
        if self._failed_replica is None:
            return f"moving the replicas' updates between processes on rank {self.cluster.rank}"
        return super()._failed_where()

    # ----------------------------------------------------------- the replicas' side
    def _next_shard(self, r: int) -> _Shard | None:
        """(Holding the lock.)  Replica ``r``'s next shard once it is queued here and the
        staleness bound allows it; None while it must wait.  A free replica claims the
        next shard number as soon as some queued shard may still be unclaimed."""
        if self._claims[r] is None and not self._asking[r] and \
                self._seen + sum(self._asking) < self._queued:
            granted = self._dealer.claim(TRAINING, 0, lambda ordinal: self._grant(r, ordinal))
            if granted is None:  # rank 0 answers later (_grant)
                self._asking[r] = True
            else:
                self._claimed(r, granted)
        ordinal = self._claims[r]
        if ordinal is None or ordinal not in self._shards:
            return None
        lead = ordinal // self.count - self._first_unfinished // self.count
        if lead > self.staleness:
            if not self._waiting[r]:
                self.record.waits += 1
                self._waiting[r] = True
            return None
        self._claims[r] = None
        self._waiting[r] = False
        record = self.record
        record.max_lead = max(record.max_lead, lead)
        record.shards[r] += 1
        return self._shards.pop(ordinal)

    def _claimed(self, r: int, ordinal: int) -> None:
        """(Holding the lock.)  Replica ``r`` trains shard ``ordinal`` next."""
        self._claims[r] = ordinal
        self._seen = max(self._seen, ordinal + 1)
        self._cv.notify_all()  # room in the queue

    def _grant(self, r: int, ordinal: int) -> None:
        """Rank 0's answer to replica ``r``'s claim (on the courier's thread)."""
        with self._cv:
            self._asking[r] = False
            self._claimed(r, ordinal)

    def _is_finished(self, ordinal: int) -> bool:
        """(Holding the lock.)  Whether shard ``ordinal`` is known here to be finished."""
        return ordinal < self._first_unfinished or ordinal in self._finished_above

    def _finish(self, ordinal: int, result: StepResult) -> None:
        """(Holding the lock.)  Shard ``ordinal`` is finished, here or elsewhere."""
        self._finished.append((ordinal, result))
        self._finished_above.add(ordinal)
        while self._first_unfinished in self._finished_above:
            self._finished_above.remove(self._first_unfinished)
            self._first_unfinished += 1
        self._cv.notify_all()

    def _train(self, r: int, shard: _Shard) -> None:
        """Add the updates received so far, train on ``shard`` and update at once (every
        case weighs 1/M), then send the increments to the other replicas (and ranks)."""
        self._add_received(r)
        replica = self.replicas[r]
        replica.step_count = shard.step * self.count + shard.index  # the dropout masks' step
        result = replica.step(shard.batch, shard.progress,
                              update_cases=shard.minibatch_cases / self.count)
        device = replica.devices[0]
        momentum = replica.store.momentum
        increments = message = None
        if len(self.replicas) > 1:
            increments = {name: {k: device.copy_from(v) for k, v in m[0].items()}
                          for name, m in momentum.items()}
        if self._courier is not None:
            message = self._layout.pack({"ordinal": shard.ordinal, "cases": result.num_cases,
                                         "seconds": result.seconds, "costs": result.costs},
                                        {name: {k: device.to_host(v) for k, v in m[0].items()}
                                         for name, m in momentum.items()})
        device.synchronize()
        with self._cv:
            for q, inbox in enumerate(self._inboxes):
                if q != r and increments is not None:
                    inbox.append(increments)
            self._finish(shard.ordinal, result)
        if message is not None:
            self._courier.send_update(message)

    def _deliver(self, message: np.ndarray) -> None:
        """An update from another rank (on the courier's thread): every replica here adds
        its increments, and its shard is finished."""
        head, increments = self._layout.unpack(message)
        ordinal = head["ordinal"]
        with self._cv:
            for inbox in self._inboxes:
                inbox.append(increments)
            self._shards.pop(ordinal, None)
            self._seen = max(self._seen, ordinal + 1)
            self._finish(ordinal, StepResult(head["cases"], head["costs"], head["seconds"]))

    def _courier_failed(self, error: BaseException) -> None:
        self._fail(error, None)

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
                replica.constrain(name, 0)  # the executor's own wball step


__all__ = ["AsyncReplicas", "ScaledRate", "StalenessRecord"]
