"""The simulated training step: the executor's tasks, run by simulated workers.

The plan becomes the executor's task list (:func:`convnet.runtime.step.tasks.make_tasks`,
with the all-reduces split into per-rank slices where the executor's collective
does that), and one simulated worker per logical device picks its next task
by the executor's own rule (:mod:`convnet.runtime.step.workers`): the first of its
pending tasks, in list order, whose dependencies have ended, where a pending
all-reduce part or update (deferrable) lets later tasks of other layers pass
it.  So the all-reduce of one layer overlaps the backward pass of the layers
below it here as it does in training.  A task on several devices (an NCCL
all-reduce) starts once all of them have reached it and holds them all.

Logical devices on one compute resource (one GPU listed twice, or more CPU
workers than cores) run one task at a time between them.  Where resources
contend (cores sharing memory bandwidth and the interpreter lock), a task
that starts while others are busy runs slower by its measured contention
factor, in proportion to how many are busy (see :mod:`convnet.simulate.costs`).
A worker that found nothing to run sleeps until another's task ends, and then
takes the measured wake-up time to start its next task; every worker starts a
step asleep on its queue, which takes a wake-up of its own.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

from convnet.plan.ops import Plan
from convnet.plan.time_split import CATEGORY, DeviceTime
from convnet.runtime.step.tasks import make_tasks


@dataclass
class Simulation:
    step_seconds: float
    minibatch: int
    devices: list[DeviceTime] = field(default_factory=list)
    timeline: list[tuple[int, str, str, float, float]] = field(default_factory=list)

    def with_overhead(self, seconds: float) -> Simulation:
        """The step lengthened by ``seconds`` of work outside the tasks (every device
        idle meanwhile)."""
        devices = [replace(d, idle=d.idle + seconds) for d in self.devices]
        return replace(self, step_seconds=self.step_seconds + seconds, devices=devices)

    @property
    def images_per_second(self) -> float:
        return self.minibatch / self.step_seconds if self.step_seconds > 0 else 0.0


def _next_task(pending: list, done: set[int]) -> int | None:
    """Position in ``pending`` of the task a worker runs next (the workers' rule)."""
    held_layers = set()
    for i, task in enumerate(pending):
        if (task.layer not in held_layers and (i == 0 or not task.barrier)
                and all(d in done for d in task.deps)):
            return i
        if not task.deferrable:
            return None
        held_layers.add(task.layer)
    return None


def simulate(plan: Plan, seconds, resources: list[int] | None = None,
             sharded=lambda op: False, contended=lambda task: 1.0,
             start_wake: float = 0.0, wake: float = 0.0) -> Simulation:
    """Simulate one training step of ``plan``: ``seconds(task, plan)`` is a task's
    duration, ``resources[d]`` the compute resource of logical device ``d`` (default:
    its own), ``sharded(all_reduce_op)`` whether the collective works by slices,
    ``contended(task)`` the factor by which a task slows with every other resource
    busy, ``start_wake`` the seconds a worker takes to start a step and ``wake`` the
    seconds a worker that slept during the step takes to start a task."""
    resources = list(range(plan.num_devices)) if resources is None else resources
    shared = len(set(resources)) - 1  # other resources a task can contend with
    tasks = make_tasks(plan.ops, sharded)
    pending = [[t for t in tasks if d in t.devices] for d in range(plan.num_devices)]
    busy_resource: set[int] = set()
    idle = set(range(plan.num_devices))  # workers looking for a task
    starting = set(idle)  # workers yet to start their first task
    asleep: set[int] = set()  # workers that found nothing to run
    arrived: dict[int, set[int]] = {}  # multi-device task -> workers waiting in it
    done: set[int] = set()
    running: list[tuple[float, int]] = []  # (end, task index)
    splits = [DeviceTime(d) for d in range(plan.num_devices)]
    timeline = []
    now = 0.0

    def start(task, devices, delay: float) -> None:
        duration = seconds(task, plan)
        if shared:
            others = len(busy_resource - {resources[d] for d in devices})
            duration *= 1 + (contended(task) - 1) * others / shared
        begin = now + delay
        for d in devices:
            busy_resource.add(resources[d])
            category = CATEGORY[task.kind]
            setattr(splits[d], category, getattr(splits[d], category) + duration)
            timeline.append((d, task.kind, task.layer, begin, begin + duration))
        heapq.heappush(running, (begin + duration, task.index))

    while True:
        started = True
        while started:
            started = False
            for d in sorted(idle):
                if resources[d] in busy_resource:
                    continue
                i = _next_task(pending[d], done)
                if i is None:
                    asleep.add(d)
                    continue
                task = pending[d].pop(i)
                idle.discard(d)
                # A worker is up start_wake into the step; one asleep later, wake after.
                if d in starting and now < start_wake:
                    delay = start_wake - now
                else:
                    delay = wake if d in asleep else 0.0
                starting.discard(d)
                asleep.discard(d)
                started = True
                if len(task.devices) == 1:
                    start(task, task.devices, delay)
                    continue
                waiting = arrived.setdefault(task.index, set())
                waiting.add(d)
                if waiting == set(task.devices):
                    start(task, task.devices, delay)
        if not running:
            break
        now, index = heapq.heappop(running)
        finished = [index]
        while running and running[0][0] == now:
            finished.append(heapq.heappop(running)[1])
        for index in finished:
            done.add(index)
            for d in tasks[index].devices:
                idle.add(d)
                busy_resource.discard(resources[d])
    if any(pending):
        raise RuntimeError("the simulated workers stopped with tasks left (a dependency cycle)")
    step = now
    for split in splits:
        split.idle = max(step - split.compute - split.copy - split.allreduce, 0.0)
    return Simulation(step, plan.minibatch, splits, timeline)
