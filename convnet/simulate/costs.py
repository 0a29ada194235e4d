"""Seconds per task of a plan: compute from a short profile, transfers from link figures.

Compute (load, forward, backward, update) is measured.  The net is profiled
with every layer on one device (and no ``updatePeriod``, which may need
replicas), on one thread in plan order with one BLAS thread, as each CPU
device's worker runs, so the times are the operations' own.  It is profiled
on the first minibatch and on its first half; each (kind, layer) keeps the
median time of its operation at each size, and a straight line through the
two, ``fixed + per_case * cases``, separates the per-operation overhead from
the work per case.  Where the logical devices are worker threads sharing the
host's cores, the net is also run data-parallel on every core (every layer
replicated, parallel workers as in training) for a few consecutive steps.
The median time of each operation there over its time alone at the same
shard size (from the lines above; an all-reduce's parts, from the link
figures below) is its *contention*, what the workers lose to each other:
memory bandwidth, caches, and the interpreter lock that Python-side work
holds (the replicas of a data-parallel step run the same operations side by
side, so the small ones, mostly Python dispatch under the lock, slow each
other the most: 2-4x on the digits net, against 1.0-1.1x for its
convolutions).  The same run gives the workers' *wake-ups*: the time from a
step's start to each worker's first task (asleep on its queue), and from the
end of the last task a worker waited for to the start of its own (asleep on
an event); a sleeping worker needs the operating system to wake it and then
the interpreter lock, which the other workers hold while they run Python.

The three runs take turns in rounds, a short block of each per round, for the
reason the measurements they are checked against do: a shared machine's speed
moves in phases of about a second (the digits net's one-device step ran 16-17
ms for a second, then 21-24 ms for the next), and a profile taken in one burst
lands in one phase.  The operations' times are the medians over every round;
a round's contention is taken against the times alone of the same round, so
that a slow phase slows both sides of the ratio, and the median over the
rounds counts.

Any plan of the same net is then predicted from that one profile: load,
forward and backward at its shard's cases, updates (a function of the weights
alone) at the profiled time, divided by the ranks that share a sharded update.

Transfers are not measured per plan: a copy takes ``latency + bytes /
bandwidth`` of the link (for this host, the measured memory-copy bandwidth,
:mod:`convnet.simulate.hardware`).  An all-reduce takes what the executor's
collective does: on the host (chunked, sharded) each rank copies in and adds
``(R-1)/R`` of the gradient bytes (``reduce``), updates its slice, and copies
in the other ``(R-1)/R`` of the weights (``gather``); between distinct GPUs
(NCCL) a ring of ``2(R-1)`` steps of ``latency`` plus ``2(R-1)/R * bytes /
bandwidth`` holding all replicas.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace

from convnet.plan.ops import FLOAT_BYTES, AllReduce, Plan
from convnet.runtime.step.tasks import Task, TaskAction
from convnet.runtime.step.workers import DeviceWorkers
from convnet.simulate.hardware import DEVICE_KINDS, DeviceKind, HostFigures, Link, link_of
from convnet.simulate.schedule import Simulation, simulate

#: Op kinds whose time is measured rather than derived from a link.
COMPUTE_KINDS = ("load", "forward", "backward", "update")

#: Profiled steps per block, at each of the two sizes, after one warm-up step.
PROFILE_STEPS = 2

#: The data-parallel block of a round that measures contention: its steps not counted
#: (a fresh executor's first steps run slow: the digits net's data-parallel step took
#: 14-26 ms in its first 2-4 steps after another executor's, then 11 ms), counted.
CONTENTION_WARMUP = 3
CONTENTION_STEPS = 4


@dataclass(frozen=True)
class OpCost:
    """Seconds of one operation: ``fixed + per_case * cases``."""

    fixed: float
    per_case: float = 0.0

    def at(self, cases: int) -> float:
        return self.fixed + self.per_case * cases

    @classmethod
    def through(cls, small: tuple[int, float], big: tuple[int, float]) -> OpCost:
        """The least-squares line through (cases, seconds) at two sizes with neither part
        negative.  Where the two points give a negative part (noise on a shared machine,
        or an operation too small to measure), that part is 0 and the other is fitted to
        both points: the smaller size no faster reads as a fixed cost (their mean), a
        smaller size faster than in proportion as all per-case work.  Extrapolated from a
        small profile to ``--mini``, the per-case part is multiplied many times over, so
        a noisy fixed-cost operation must not be read as per-case work."""
        (c1, t1), (c2, t2) = small, big
        slope = (t2 - t1) / (c2 - c1) if c2 != c1 else 0.0
        fixed = t2 - slope * c2
        if slope <= 0:
            return cls((t1 + t2) / 2)
        if fixed < 0:
            return cls(0.0, (c1 * t1 + c2 * t2) / (c1 * c1 + c2 * c2))
        return cls(fixed, slope)


def op_seconds(steps: list[tuple[float, list]]) -> dict[tuple[str, str], float]:
    """(kind, layer) -> the median seconds of its compute operations over the profiled
    steps."""
    samples: dict[tuple[str, str], list[float]] = {}
    for _, timings in steps:
        for t in timings:
            if t.kind in COMPUTE_KINDS:
                samples.setdefault((t.kind, t.layer), []).append(t.end - t.start)
    return {key: statistics.median(v) for key, v in samples.items()}


def fixed_share(seconds: list[float], sizes: list[int]) -> float:
    """The per-call overhead of the updates: the intercept of a least-squares line of
    update seconds against weight count over the net's layers, kept within
    [0, the fastest update]."""
    if len(seconds) < 2 or len(set(sizes)) < 2:
        return 0.0
    mx, my = statistics.mean(sizes), statistics.mean(seconds)
    slope = (sum((x - mx) * (y - my) for x, y in zip(sizes, seconds)) /
             sum((x - mx) ** 2 for x in sizes))
    return min(max(my - slope * mx, 0.0), min(seconds))


@dataclass
class ComputeProfile:
    """Per (kind, layer) cost of the net's compute operations, and the host's figures."""

    shard_size: float  # cases per shard of the larger profiled minibatch
    costs: dict[tuple[str, str], OpCost] = field(default_factory=dict)
    host: HostFigures = HostFigures(1, 1e11, 1e10)
    step_seconds: list[float] = field(default_factory=list)  # larger size, sequential
    #: (kind, layer) -> its time in a data-parallel step on every core / alone.
    contention: dict[tuple[str, str], float] = field(default_factory=dict)
    update_overhead: float = 0.0  # seconds of an update that do not shrink with its slice
    dispatch: float = 0.0  # seconds the device workers spend handing out one task
    start_wake: float = 0.0  # seconds for a worker asleep on its queue to start a step
    wake: float = 0.0  # seconds for a worker waiting for another's task to run again
    step_overhead: float = 0.0  # seconds of a step outside its tasks (batch checks, costs)
    rounds: int = 0  # rounds of the profile the medians are over

    @classmethod
    def fit(cls, small: tuple[float, list], big: tuple[float, list], host: HostFigures,
            param_counts: dict[str, int] | None = None,
            dispatch: float = 0.0, slices: dict[str, int] | None = None) -> ComputeProfile:
        """From (cases per shard, the executor's timed steps) at two minibatch sizes; the
        weight count of each layer; the workers' seconds per task; and for layers
        whose profiled update was split into slices over R replicas, that R."""
        (c1, steps1), (c2, steps2) = small, big
        t1, t2 = op_seconds(steps1), op_seconds(steps2)
        for times in (t1, t2):  # a slice's update -> the whole layer's
            for name, r in (slices or {}).items():
                if ("update", name) in times:
                    times[("update", name)] *= r
        costs = {}
        for key, seconds in t2.items():
            if key[0] == "update":  # no cases: both sizes measure the same work
                costs[key] = OpCost(statistics.median([seconds, t1.get(key, seconds)]))
            else:
                costs[key] = OpCost.through((c1, t1.get(key, seconds)), (c2, seconds))
        updates = [(costs[key].fixed, param_counts[key[1]]) for key in costs
                   if key[0] == "update" and param_counts and key[1] in param_counts]
        overhead = fixed_share([u for u, _ in updates], [p for _, p in updates])
        outside = statistics.median(seconds - sum(t.end - t.start for t in timings)
                                    for seconds, timings in steps2)
        return cls(c2, costs, host, [seconds for seconds, _ in steps2],
                   update_overhead=overhead, dispatch=dispatch,
                   step_overhead=max(outside, 0.0))


@dataclass
class CostModel:
    """Seconds of any task of a plan of the profiled net on devices of ``kind``."""

    profile: ComputeProfile
    kind: DeviceKind

    @property
    def link(self) -> Link:
        return link_of(self.kind, self.profile.host)

    @property
    def speed(self) -> float:
        return self.kind.speed_over(self.profile.host)

    @property
    def shares_cores(self) -> bool:
        """Whether the logical devices are worker threads sharing this host's cores."""
        return not self.kind.own_hardware

    def resources(self, plan: Plan) -> list[int]:
        """The compute resource each logical device runs on: on the host, a core of its
        own up to the core count, beyond it cores shared round-robin; on hardware of
        its own, its physical device (``--gpu 0,0`` shares one GPU)."""
        if self.shares_cores:
            return [d % self.profile.host.cores for d in range(plan.num_devices)]
        return list(plan.physical_devices)

    def sharded(self, plan: Plan):
        """Whether the executor's collective for an all-reduce works by slices: the
        chunked one does (host workers, or a GPU listed twice), NCCL does not."""
        def rule(op: AllReduce) -> bool:
            physical = {plan.physical_devices[d] for d in op.replica_devices}
            return self.shares_cores or len(physical) < len(op.replica_devices)
        return rule

    def seconds(self, task: Task, plan: Plan) -> float:
        """The task's seconds alone on its device, the workers' hand-out included."""
        return self.profile.dispatch + self.work(task, plan)

    def contended(self, task: Task) -> float:
        """How much slower the task runs with every other core busy (1: not at all)."""
        if not self.shares_cores:
            return 1.0
        return self.profile.contention.get((task.action.category, task.layer), 1.0)

    def work(self, task: Task, plan: Plan) -> float:
        """The task's own seconds alone on its device."""
        op, action, link = task.op, task.action, self.link
        if action in (TaskAction.COPY, TaskAction.GRAD_COPY):
            return link.latency + op.nbytes / link.bandwidth
        if action is TaskAction.ALL_REDUCE:
            r = len(op.replica_devices)
            return 0.0 if r < 2 else (2 * (r - 1) * link.latency +
                                      2 * (r - 1) / r * op.nbytes / link.bandwidth)
        if action in (TaskAction.REDUCE_SLICE, TaskAction.GATHER, TaskAction.AVERAGE_SLICE):
            r = len(plan.layers[op.layer].devices)
            moved = (r - 1) / r * (op.nbytes if isinstance(op, AllReduce)
                                   else self._weight_bytes(plan, op.layer))
            passes = 1 if action is TaskAction.GATHER else 2  # copy in, then add
            return link.latency + passes * moved / link.bandwidth
        if action is TaskAction.CONSTRAIN:
            return 0.0  # inside the profiled update
        cost = self.profile.costs.get((action.category, op.layer))
        if cost is None:
            return 0.0
        if action is TaskAction.UPDATE_SLICE:
            overhead = min(self.profile.update_overhead, cost.fixed)
            share = (cost.fixed - overhead) / len(plan.layers[op.layer].devices)
            return (overhead + share) / self.speed
        if action is TaskAction.UPDATE:
            return cost.fixed / self.speed
        return cost.at(plan.piece_size) / self.speed  # an operation works on one piece

    @staticmethod
    def _weight_bytes(plan: Plan, layer: str) -> int:
        return plan.layers[layer].param_count * FLOAT_BYTES

    def predict(self, plan: Plan) -> Simulation:
        """The simulated training step of ``plan`` on devices of this kind."""
        wakes = ((self.profile.start_wake, self.profile.wake) if self.shares_cores
                 else (0.0, 0.0))
        sim = simulate(plan, self.seconds, self.resources(plan), self.sharded(plan),
                       self.contended, *wakes)
        return sim.with_overhead(self.profile.step_overhead)

    def on(self, kind: DeviceKind) -> CostModel:
        """The same profile, predicted for devices of ``kind``."""
        return replace(self, kind=kind)


class Profiler:
    """The rounds of one net's profile: each :meth:`round` times a block of training
    steps of ``batch`` and of its first half on ``executor`` (``plan``, best on one
    device, run sequentially; its weights change, so use one made for the purpose)
    and, given ``data_parallel`` ((an executor, its plan) of the net replicated on
    every core with parallel workers), a block of that (steps not counted, counted); :meth:`profile` fits each
    operation's cost to the two sizes over every round so far, with the contention
    and the wake-ups of the data-parallel blocks.  Rounds are taken one at a time so
    that a caller can take them between other work."""

    def __init__(self, executor, batch: list, host: HostFigures, plan: Plan,
                 dispatch: float = 0.0, data_parallel=None,
                 contention_steps: tuple[int, int] = (CONTENTION_WARMUP, CONTENTION_STEPS)):
        self._executor, self._batch, self._plan = executor, batch, plan
        self._contention_steps = contention_steps
        self._host, self._dispatch, self._data_parallel = host, dispatch, data_parallel
        self._half = [column[:max(len(batch[0]) // 2, 1)] for column in batch]
        self._sliced = {name: len(p.devices) for name, p in plan.layers.items()
                        if len(p.devices) > 1 and all(
                            task.action is not TaskAction.UPDATE
                            for task in executor.train_tasks() if task.layer == name)}
        self._alone: list[tuple[list, list]] = []  # per round: (half steps, whole steps)
        self._together: list[list] = []  # per round: counted data-parallel steps

    def round(self) -> None:
        self._alone.append((self._executor.timed_steps(self._half, PROFILE_STEPS),
                            self._executor.timed_steps(self._batch, PROFILE_STEPS)))
        if self._data_parallel is not None:
            warmup, counted = self._contention_steps
            steps = self._data_parallel[0].timed_steps(self._batch, warmup + counted)
            self._together.append(steps[warmup:])

    def _fit(self, small: list, big: list) -> ComputeProfile:
        shards = self._plan.num_shards
        return ComputeProfile.fit(
            (len(self._half[0]) / shards, small), (len(self._batch[0]) / shards, big),
            self._host, {name: p.param_count for name, p in self._plan.layers.items()},
            self._dispatch, self._sliced)

    def profile(self) -> ComputeProfile:
        profile = replace(self._fit([s for small, _ in self._alone for s in small],
                                    [s for _, big in self._alone for s in big]),
                          rounds=len(self._alone))
        if self._data_parallel is None:
            return profile
        executor, plan = self._data_parallel
        tasks = executor.train_tasks()
        start_wake, wake = wake_seconds(tasks, self._together)
        paired = [(CostModel(self._fit(*sizes), DEVICE_KINDS["measured"]), steps)
                  for sizes, steps in zip(self._alone, self._together)]
        return replace(profile, start_wake=start_wake, wake=wake,
                       contention=measured_contention(plan, tasks, paired))


def measured_contention(plan: Plan, tasks: list[Task],
                        rounds: list[tuple[CostModel, list[tuple[float, list]]]]
                        ) -> dict[tuple[str, str], float]:
    """(kind, layer) -> how much slower its tasks (``tasks`` of ``plan``: computations
    and the all-reduces' parts, whose copies share the memory bandwidth) ran in the
    rounds of timed steps than the round's model (its profile alone) predicts them:
    the median over a round's steps and devices of their seconds over the prediction,
    the median over the rounds, kept within [1, the core count] (sharing cores can
    make a task no slower than running after the others)."""
    per_round: dict[tuple[str, str], list[float]] = {}
    for model, steps in rounds:
        alone: dict[tuple[int, str, str], float] = {}
        for task in tasks:
            for d in task.devices:
                key = (d, task.kind, task.layer)
                alone[key] = alone.get(key, 0.0) + model.work(task, plan)
        ratios: dict[tuple[str, str], list[float]] = {}
        for _, timings in steps:
            took: dict[tuple[int, str, str], float] = {}
            for t in timings:
                key = (t.device, t.kind, t.layer)
                if alone.get(key, 0.0) > 0:
                    took[key] = took.get(key, 0.0) + t.end - t.start
            for key, seconds in took.items():
                ratios.setdefault(key[1:], []).append(seconds / alone[key])
        for key, values in ratios.items():
            per_round.setdefault(key, []).append(statistics.median(values))
    cores = max((model.profile.host.cores for model, _ in rounds), default=1)
    return {key: min(max(statistics.median(values), 1.0), cores)
            for key, values in per_round.items()}


def wake_seconds(tasks: list[Task], rounds: list[list[tuple[float, list]]]
                 ) -> tuple[float, float]:
    """How long a sleeping worker takes to run again, over rounds of timed parallel steps
    of ``tasks``: (the time from the start of a step's tasks to each worker's first
    task, a worker asleep on its queue; the time from the end of the last dependency
    a worker waited for to the start of its task, a worker asleep on an event), each
    the median over a round, then the median over the rounds: a virtual machine whose
    second core comes and goes wakes a worker late in some rounds, and the steps it
    runs pay for that as often (the least round predicted the digits net's
    data-parallel step 13-21% short where the median of the rounds came within 11%)."""
    own: dict[tuple[int, str, str], list[Task]] = {}  # a device's tasks of one layer
    for task in tasks:  # run in list order on each device
        for d in task.devices:
            own.setdefault((d, task.kind, task.layer), []).append(task)
    starts, waits = [], []
    for steps in rounds:
        firsts, woken = [], []
        for _, timings in steps:
            ran: dict[tuple[int, int], tuple[float, float]] = {}  # (task, device) -> times
            count: dict[tuple[int, str, str], int] = {}
            for t in sorted(timings, key=lambda t: t.start):
                key = (t.device, t.kind, t.layer)
                count[key] = count.get(key, 0) + 1
                ran[(own[key][count[key] - 1].index, t.device)] = (t.start, t.end)
            ended: dict[int, float] = {}  # task -> when its last device finished it
            for (index, _), (_, end) in ran.items():
                ended[index] = max(ended.get(index, 0.0), end)
            last_end: dict[int, float] = {}  # device -> end of its previous task
            for (index, d), (start, end) in sorted(ran.items(), key=lambda kv: kv[1]):
                ready = max((ended[i] for i in tasks[index].deps if i in ended), default=0.0)
                if d not in last_end:
                    firsts.append(start)
                elif ready > last_end[d]:  # it slept until another worker's task ended
                    woken.append(start - ready)
                last_end[d] = end
        if firsts:
            starts.append(statistics.median(firsts))
        if woken:
            waits.append(statistics.median(woken))
    return (statistics.median(starts) if starts else 0.0,
            statistics.median(waits) if waits else 0.0)


def dispatch_seconds(tasks: list, devices: list, repeats: int = 5) -> float:
    """Seconds per task that :class:`DeviceWorkers` takes to hand out ``tasks`` (run on
    ``devices`` with no work), per task of the busiest device."""
    workers = DeviceWorkers(devices)
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            workers.run(tasks, lambda task, device: None)
            times.append(time.perf_counter() - start)
    finally:
        workers.close()
    per_device = max(sum(1 for t in tasks if d in t.devices) for d in range(len(devices)))
    return statistics.median(times) / per_device
