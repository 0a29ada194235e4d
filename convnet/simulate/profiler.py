"""The short profile of a net that the cost model rests on (:mod:`convnet.simulate.costs`).

Compute (load, forward, backward, update) is measured.  The net is profiled
with every layer on one device (and no ``updatePeriod``, which may need
replicas), on one thread in plan order with one BLAS thread, as each CPU
device's worker runs, so the times are the operations' own.  It is profiled
on the first minibatch and on its first half, and each operation's time is
fitted to the two sizes (:class:`~convnet.simulate.costs.OpCost`).  Where the
logical devices are worker threads sharing the host's cores, the net is also run
data-parallel on every core (every layer replicated, parallel workers as in
training) for a few consecutive steps.  The median time of each operation there
over its time alone at the same shard size (from the lines above; an all-reduce's
parts, from the link figures) is its *contention*, what the workers lose to each
other: memory bandwidth, caches, and the interpreter lock that Python-side work
holds (the replicas of a data-parallel step run the same operations side by
side, so the small ones, mostly Python dispatch under the lock, slow each
other the most: 2-4x on the digits net, against 1.0-1.1x for its
convolutions).  The same run gives the workers' *wake-ups*: the time from a
step's start to each worker's first task (asleep on its queue), and from the
end of the last task a worker waited for to the start of its own (asleep on
an event); a sleeping worker needs the operating system to wake it and then
the interpreter lock, which the other workers hold while they run Python.  Both are
read only from the rounds whose workers really ran side by side
(:data:`SIDE_BY_SIDE_CORES`): beside other work the operating system runs them in
turns on one core, and such a round sees neither.

The three runs take turns in rounds, a short block of each per round, for the
reason the measurements they are checked against do: a shared machine's speed
moves in phases of about a second (the digits net's one-device step ran 16-17
ms for a second, then 21-24 ms for the next), and a profile taken in one burst
lands in one phase.  The operations' times are the medians over every round;
a round's contention is taken against the times alone of the same round, so
that a slow phase slows both sides of the ratio, and the median over the
rounds counts.

Other work on the machine is taken out of every block (:mod:`convnet.simulate.run_queue`):
each task on one thread less the time it waited for a core, the parallel workers'
timings scaled by the share of their runnable time they really ran, so that a profile
under load reads the machine's own speed.  Without that, two
predictions of the CIFAR-10 net half a minute apart, at a load of 3-4, read 401 and
204 ms; docs/SIMULATE.md has the figures with it.

Each round also gives a model of its own (:meth:`Profiler.round_profiles`): how far the
predictions of those move is the noise within which ``--auto-place`` calls candidates
a tie.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from convnet.plan.ops import Plan
from convnet.runtime.step.records import OpTiming
from convnet.runtime.step.tasks import Task, TaskAction
from convnet.runtime.step.workers import DeviceWorkers
from convnet.simulate.costs import ComputeProfile, CostModel
from convnet.simulate.hardware import DEVICE_KINDS, HostFigures
from convnet.simulate.run_queue import Shares, waited_seconds

#: Profiled steps per block, at each of the two sizes, after one warm-up step.
PROFILE_STEPS = 2

#: The data-parallel block of a round that measures contention: its steps not counted
#: (a fresh executor's first steps run slow: the digits net's data-parallel step took
#: 14-26 ms in its first 2-4 steps after another executor's, then 11 ms), counted.
CONTENTION_WARMUP = 3
CONTENTION_STEPS = 4

#: The cores the data-parallel block's workers must keep busy at once, on average, for
#: it to have seen them side by side.  Where other processes hold the cores, the
#: operating system runs a net's workers one after the other on one core, however many
#: there are: the digits net's two workers kept 1.19-1.37 cores busy on the idle
#: two-core machine and 0.94-0.97 beside two busy processes, and, while one ran, the
#: other ran 1-2% of the time (57-75% idle), so that the contention such a block reads
#: (1.00-1.13 against 1.25-1.46) is what taking turns costs, not what running side by
#: side does.
SIDE_BY_SIDE_CORES = 1.1


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
        self._side_by_side: list[bool] = []  # per round: did its workers run so
        self._shares: list[float] = []  # every block's share of its runnable time, run

    def round(self) -> None:
        self._alone.append((self._block(self._executor, self._half, PROFILE_STEPS)[0],
                            self._block(self._executor, self._batch, PROFILE_STEPS)[0]))
        if self._data_parallel is not None:
            warmup, counted = self._contention_steps
            steps, busy = self._block(self._data_parallel[0], self._batch, warmup + counted)
            self._together.append(steps[warmup:])
            self._side_by_side.append(busy is None or busy >= SIDE_BY_SIDE_CORES)

    def _block(self, executor, batch: list, steps: int
               ) -> tuple[list[tuple[float, list]], float | None]:
        """``steps`` timed steps of ``batch``, read at the machine's own speed: run on one
        thread, each task less the time it waited for a core; run by parallel workers,
        scaled by the mean share of their runnable time they ran (one factor for the
        whole block keeps the order of the workers' tasks, from which the wake-ups are
        read); and the cores its threads kept busy at once (None where that cannot be
        read)."""
        one_thread = executor.workers is None
        executor.core_waits = waited_seconds if one_thread else None
        try:
            with executor_shares(executor) as block:
                runs = executor.timed_steps(batch, steps)
        finally:
            executor.core_waits = None
        share = statistics.mean(block.shares)
        self._shares.append(share)
        if one_thread:
            return [without_waits(run) for run in runs], block.cores_busy
        return [at_share(run, share) for run in runs], block.cores_busy

    def _fit(self, small: list, big: list) -> ComputeProfile:
        shards = self._plan.num_shards
        return ComputeProfile.fit(
            (len(self._half[0]) / shards, small), (len(self._batch[0]) / shards, big),
            self._host, {name: p.param_count for name, p in self._plan.layers.items()},
            self._dispatch, self._sliced)

    def profile(self) -> ComputeProfile:
        """The profile over every round so far."""
        return self._profile(self._alone, self._together, self._side_by_side)

    def round_profiles(self) -> list[ComputeProfile]:
        """One profile of each round alone: how far their predictions move is the
        profile's noise."""
        if self._data_parallel is None:
            return [self._profile([alone], [], []) for alone in self._alone]
        return [self._profile([alone], [together], [side])
                for alone, together, side in zip(self._alone, self._together,
                                                  self._side_by_side)]

    def _profile(self, alone: list[tuple[list, list]], together: list[list],
                 side_by_side: list[bool]) -> ComputeProfile:
        """The fit of ``alone``'s rounds, with the contention and the wake-ups of those
        rounds of ``together`` whose workers ran ``side_by_side`` (none where none did:
        a caller may have them from elsewhere, :attr:`ComputeProfile.side_by_side_rounds`
        says)."""
        profile = replace(self._fit([s for small, _ in alone for s in small],
                                    [s for _, big in alone for s in big]),
                          rounds=len(alone), parallel_rounds=len(together),
                          run_share=statistics.median(self._shares) if self._shares else 1.0)
        seen = [(sizes, steps) for sizes, steps, side in zip(alone, together, side_by_side)
                if side]
        if not seen:
            return profile
        executor, plan = self._data_parallel
        tasks = executor.train_tasks()
        start_wake, wake = wake_seconds(tasks, [steps for _, steps in seen])
        paired = [(CostModel(self._fit(*sizes), DEVICE_KINDS["measured"]), steps)
                  for sizes, steps in seen]
        return replace(profile, start_wake=start_wake, wake=wake, side_by_side_rounds=len(seen),
                       contention=measured_contention(plan, tasks, paired))


def executor_shares(executor) -> Shares:
    """The run-queue shares over a block of the threads that run ``executor``'s steps: its
    device workers', or the calling thread's where it runs them itself.  A step timed
    inside the block, scaled by the mean of the shares, is read as the profile reads its
    own: a measurement to hold a prediction against on a loaded machine."""
    workers = executor.workers
    return Shares(workers.thread_ids if workers is not None else [None])


def at_share(run: tuple[float, list[OpTiming]], share: float
             ) -> tuple[float, list[OpTiming]]:
    """One timed step (its seconds, its timings) at the machine's own speed: every time
    scaled by ``share``."""
    seconds, timings = run
    return seconds * share, [OpTiming(t.device, t.kind, t.layer, t.start * share,
                                      t.end * share) for t in timings]


def without_waits(run: tuple[float, list[OpTiming]]) -> tuple[float, list[OpTiming]]:
    """One timed step run on one thread (its seconds, its timings, each with the time
    its task waited for a core) at the machine's own speed: every task, and the step,
    less those waits."""
    seconds, timings = run
    tasks = {(t.start, t.end): t.waited for t in timings}  # a task on two devices: once
    return (seconds - sum(tasks.values()),
            [OpTiming(t.device, t.kind, t.layer, t.start, t.end - t.waited) for t in timings])


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
    ``devices`` with no work), per task of the busiest device, in the least disturbed
    of ``repeats`` runs."""
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
    # The least of the repeats: other work on the machine only ever adds to a hand-out
    # (a worker woken late), and the workers' own run counts are too small to scale by.
    return min(times) / per_device
