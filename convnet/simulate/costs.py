"""Seconds per task of a plan: compute from a short profile, transfers from link figures.

The compute figures come from a short profile of the net
(:mod:`convnet.simulate.profiler`): each (kind, layer) keeps the median time of its
operation at two shard sizes, and a straight line through the two, ``fixed +
per_case * cases`` (:class:`OpCost`), separates the per-operation overhead from the
work per case.  Any plan of the same net is then predicted from that one profile:
load, forward and backward at its shard's cases, updates (a function of the weights
alone) at the profiled time, divided by the ranks that share a sharded update, and a
task run beside others slowed by the measured contention.

The statistics a bnorm layer with ``stats=global`` computes on each replica are
measured like a forward (kinds ``forwardstats`` and ``backwardstats``); their
combination copies the other R-1 replicas' in (``latency + (R-1) bytes / bandwidth``).
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
from dataclasses import dataclass, field, replace

from convnet.plan.ops import FLOAT_BYTES, AllReduce, Plan
from convnet.runtime.step.tasks import Task, TaskAction
from convnet.simulate.hardware import DeviceKind, HostFigures, Link, link_of
from convnet.simulate.schedule import Simulation, simulate

#: Op kinds whose time is measured rather than derived from a link.
COMPUTE_KINDS = ("load", "forward", "backward", "update", "forwardstats", "backwardstats")

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
    parallel_rounds: int = 0  # of those, rounds that also ran the net on every core
    #: of those, rounds whose workers ran side by side (the contention and the wake-ups
    #: are from them; with none, other work kept the workers taking turns on one core)
    side_by_side_rounds: int = 0
    #: earlier profiles of the net on this machine whose contention and wake-ups are in
    #: the medians with this one's (convnet.app.prediction.side_by_side)
    earlier_profiles: int = 0
    run_share: float = 1.0  # the median share of its runnable time a profiled thread ran
    #: cases per shard of the smaller profiled minibatch (what the report says was timed:
    #: half the larger rounded down, not always half the larger's shard)
    small_shard_size: float = 0.0

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
                   step_overhead=max(outside, 0.0), small_shard_size=c1)


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
        if action is TaskAction.STATS_REDUCE:  # the other replicas' statistics copied in
            return link.latency + (len(op.replica_devices) - 1) * op.nbytes / link.bandwidth
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
