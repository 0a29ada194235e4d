"""The executor's units of work: plan operations, with sharded weight updates split up.

A plan (:mod:`convnet.plan.ops`) says *what* happens in a minibatch; a task list
says what each device's worker runs.  Most operations become one task each.
The all-reduce and the updates of a replicated layer whose collective can
work on slices (:attr:`convnet.runtime.devices.collectives.AllReduce.sharded`) become three
one-device tasks per rank r instead of one collective and R full updates:

* ``reduce``: sum slice r of the layer's weight gradients over the ranks (in
  rank order), on rank r's device;
* ``update-slice``: apply the weight update (:mod:`convnet.runtime.step.optimizer`)
  to slice r of rank r's weights and momentum only, with that summed slice;
* ``gather``: copy every other slice of the weights from the rank that
  updated it (nothing to copy where the replicas share one copy of the
  weights, see :class:`convnet.runtime.step.weights.WeightStore`: it then only
  releases the rank's gradients, and is what the layer's next forward waits for).

Every replica then holds the weights a full update would give, bit for bit
(the same element-wise operations on the same sums), each rank does 1/R of
the update work, and no rank ever waits at a barrier: a ``reduce`` waits for
the other ranks' backward passes of that layer, a ``gather`` for their
``update-slice``, both through ordinary dependencies.  The momentum of rank r
is current on slice r only (see :meth:`convnet.runtime.step.weights.WeightStore.state_arrays`).
Collectives that cannot be split (NCCL) stay one task with a barrier.

Local SGD (:class:`ReplicaSync`) changes only the weight state of the replicated
layers it applies to (every one under ``--sync local:K``, or those whose ``sync=``
key says ``local:K``, each with its own K: :func:`local_periods`; the others keep
their all-reduce): on a ``LOCAL`` step their all-reduce is left out and each replica runs
its whole update with its own gradient; on an ``AVERAGE`` step the same local
updates are followed, per rank r, by an ``average`` task (slice r of the
weights, summed over the replicas in replica order and divided by R, written
into rank r's weights) and the ``gather`` (and ``constrain``) tasks of a
sharded update, so every replica again holds the same weights.  Momentum stays
each replica's own.

A :class:`~convnet.plan.ops.BatchStats` operation becomes two one-device tasks per
replica: its own piece's statistics (``forward-stats`` or ``backward-stats``, after
the tasks of its own device that it reads), then ``stats-reduce``, which combines
every replica's statistics in replica order, copying the others' in (or receiving
them from other processes), so every replica holds bitwise the same combination.

A gradient pull (:class:`~convnet.plan.ops.GradCopy`) comes in the task list
right before the first task that needs it, not where the plan has it (right
after the backward call that made the gradient, on another device): a device
whose next task in plan order would pull a gradient that the other device is
still computing first runs its own backward calls that do not need it.  Where
two towers cross (a conv or fc layer with inputs from both), each device then
computes its half of the crossing layer at the same time as the other, instead
of one after the other.  Where a gradient has two parts (one from this device,
one pulled) the sum is the same either way (addition commutes); with more, it
is summed in the task list's order, the same in both walks.

Tasks that only touch their own layer's weight state (all-reduce parts and
updates) are *deferrable*: a worker whose next such task is still waiting
for another device may run later tasks of other layers first (see
:mod:`convnet.runtime.step.workers`), so the all-reduce of one layer overlaps the backward
pass of the layers below it.  Each task records the plan operation it comes
from and its :class:`TaskAction`, which the executor looks up to run it;
``kind`` names it in timings and profiles.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from convnet.config.model import NetConfig
from convnet.config.values.typed import local_sgd_period
from convnet.plan.ops import (AllReduce, Backward, BatchStats, Copy, Forward, GradCopy, Load, Op,
                              Plan, Update)


class TaskAction(enum.Enum):
    """What a task does: a whole plan operation, or one rank's part of a sharded update.

    ``category`` names the action in timings and profiles: a whole operation's
    is its :attr:`convnet.plan.ops.Op.kind`, and the parts of a sharded update
    count as the all-reduce or update they replace.  ``weight_state`` marks the
    actions that only touch their own layer's weight state (see
    :attr:`Task.deferrable`).
    """

    LOAD = ("load", "load", False)
    COPY = ("copy", "copy", False)
    FORWARD = ("forward", "forward", False)
    BACKWARD = ("backward", "backward", False)
    GRAD_COPY = ("gradcopy", "gradcopy", False)
    ALL_REDUCE = ("allreduce", "allreduce", True)
    UPDATE = ("update", "update", True)
    REDUCE_SLICE = ("reduce", "allreduce", True)
    UPDATE_SLICE = ("update-slice", "update", True)
    GATHER = ("gather", "allreduce", True)
    CONSTRAIN = ("constrain", "update", True)  # wball, once every gather has read the slices
    AVERAGE_SLICE = ("average", "allreduce", True)  # local SGD: slice r of the mean weights
    # Transfers between processes (see convnet.runtime.step.rank_tasks): an activation or
    # a gradient, and a slice of a sharded all-reduce (gradients or updated weights).
    SEND = ("send", "copy", False)
    RECV = ("recv", "copy", False)
    SEND_SLICE = ("send-slice", "allreduce", True)
    RECV_SLICE = ("recv-slice", "allreduce", True)
    # A BatchStats operation: each replica's statistics of its piece, before its forward
    # or its backward call, then each replica's combination of all of them.
    FORWARD_STATS = ("forward-stats", "forwardstats", False)
    BACKWARD_STATS = ("backward-stats", "backwardstats", False)
    STATS_REDUCE = ("stats-reduce", "statsreduce", False)

    def __new__(cls, label: str, category: str, weight_state: bool):
        action = object.__new__(cls)
        action._value_ = label
        action.category = category
        action.weight_state = weight_state
        return action

    @classmethod
    def of_op(cls, op: Op) -> TaskAction:
        """The action that runs ``op`` whole."""
        try:
            return _WHOLE_OP_ACTIONS[type(op)]
        except KeyError:
            raise TypeError(f"unknown plan operation {op!r}") from None


_WHOLE_OP_ACTIONS = {Load: TaskAction.LOAD, Copy: TaskAction.COPY, Forward: TaskAction.FORWARD,
                     Backward: TaskAction.BACKWARD, GradCopy: TaskAction.GRAD_COPY,
                     AllReduce: TaskAction.ALL_REDUCE, Update: TaskAction.UPDATE}


class ReplicaSync(enum.Enum):
    """How one training step keeps a replicated layer's replicas together."""

    ALL_REDUCE = "all-reduce"  # synchronous SGD: sum the gradients, then the same update
    LOCAL = "local"  # local SGD between averages: each replica updates from its own gradient
    AVERAGE = "average"  # local SGD's K-th step: local updates, then average the weights
    # async:S in a lockstep net: local updates whose increments move beside the steps
    # (convnet.runtime.processes.increment_exchange); the tasks are LOCAL's
    ASYNC = "async"


def local_periods(plan: Plan, net: NetConfig, local_sgd: int | None) -> dict[str, int]:
    """The K of every replicated layer that trains by local SGD, in plan order: the
    layer's own ``sync=`` key where it has one (``local:K``, or ``sync`` to keep its
    all-reduce), else the run's ``local_sgd`` (``--sync local:K``; None: sync).  The
    replicated layers left out all-reduce their gradients every step."""
    periods: dict[str, int] = {}
    for op in plan.ops:
        if isinstance(op, AllReduce):
            mode = net[op.layer].params.get("sync")
            period = local_sgd if mode is None else local_sgd_period(mode)
            if period is not None:
                periods[op.layer] = period
    return periods


def exchanges_per_step(plan: Plan, periods: Mapping[str, int]) -> float:
    """How many replica exchanges a training step does on average: a gradient
    all-reduce per plan :class:`AllReduce` of a synchronous layer, a weight average
    every K-th step per one of a layer with local period K (``periods``, see
    :func:`local_periods`)."""
    return sum(1 / periods.get(op.layer, 1) for op in plan.ops if isinstance(op, AllReduce))


@dataclass(frozen=True)
class Task:
    """One worker's unit of work; ``index`` is its position in the task list."""

    index: int
    op: Op
    action: TaskAction
    deps: tuple[int, ...]
    device: int | None = None  # the device of a one-device part; None: the op's own devices
    transfer: object = None  # SEND/RECV tasks: a convnet.runtime.step.rank_tasks.Transfer

    @property
    def devices(self) -> tuple[int, ...]:
        return self.op.devices if self.device is None else (self.device,)

    @property
    def layer(self) -> str:
        return self.op.layer

    @property
    def kind(self) -> str:
        """The category of timings and profiles: ``forward``, ``allreduce``, ..."""
        return self.action.category

    @property
    def barrier(self) -> bool:
        """Its devices meet inside it, or it waits inside it for another process (a
        receive): it may only start once nothing earlier is pending."""
        return len(self.devices) > 1 or self.action in (TaskAction.RECV, TaskAction.RECV_SLICE)

    @property
    def deferrable(self) -> bool:
        """Later tasks of other layers may run before it while it waits."""
        return not self.barrier and self.action.weight_state

    @property
    def rank(self) -> int:
        """The replica this part works for (parts of an all-reduce, an update or a
        combination of statistics)."""
        if isinstance(self.op, (AllReduce, BatchStats)):
            return self.op.replica_devices.index(self.device)
        return self.op.replica


def make_tasks(ops: list[Op], sharded, constrained=lambda layer: False,
               sync: ReplicaSync | Mapping[str, ReplicaSync] = ReplicaSync.ALL_REDUCE
               ) -> list[Task]:
    """Tasks for ``ops`` (a plan's operations, or a subset in plan order).

    ``sharded(op)`` says whether an :class:`AllReduce` is split into slices.
    ``constrained(layer)`` says whether the layer's weights are rescaled after each
    update (``wball``): a sharded update then ends, on every rank, with a
    ``CONSTRAIN`` task after all the ranks' gathers, since the rescaling needs whole
    weight arrays and must not change a slice another rank has yet to gather.
    ``sync`` says what happens to a replicated layer's weights (see the module
    docstring), for every layer or per layer (a mapping; a layer not in it:
    ``ALL_REDUCE``): with anything but ``ALL_REDUCE`` the layer's
    :class:`AllReduce` does not run.
    Dependencies on operations not in ``ops`` are dropped, like the workers do.
    """
    tasks: list[Task] = []
    finished_by: dict[int, list[int]] = {}  # op index -> tasks that complete it
    reduces: dict[tuple[str, int], list[int]] = {}  # (layer, pass) -> reduce task per rank
    slices: dict[tuple[str, int], list[tuple[Update, int]]] = {}
    waiting: set[int] = set()  # sharded updates whose gather tasks are not made yet
    replica_counts: dict[tuple[str, int], int] = {}  # local SGD: (layer, pass) -> R
    sync_of = ((lambda layer: sync.get(layer, ReplicaSync.ALL_REDUCE))
               if isinstance(sync, Mapping) else (lambda layer: sync))

    def deps_of(op: Op) -> tuple[int, ...]:
        if any(d in waiting for d in op.deps):  # the planner emits a layer's updates together
            raise ValueError(f"{op!r} needs an update whose layer's other updates come later")
        return tuple(sorted({t for d in op.deps for t in finished_by.get(d, ())}))

    def add(op: Op, action: TaskAction, deps, device: int | None = None) -> int:
        tasks.append(Task(len(tasks), op, action, tuple(deps), device))
        return len(tasks) - 1

    def gather(group: list[tuple[Update, int]], deps: list[int]) -> None:
        """Each rank's gather of the others' slices once ``deps`` (every rank's slice
        task) are done, then its ``wball`` projection once every gather is; these
        finish the group's updates."""
        gathers = []
        for update, _ in group:
            gathers.append(add(update, TaskAction.GATHER, deps, update.device))
            finished_by[update.index].append(gathers[-1])
            waiting.discard(update.index)
        if constrained(group[0][0].layer):
            for update, _ in group:
                finished_by[update.index].append(
                    add(update, TaskAction.CONSTRAIN, gathers, update.device))

    for op in _pulls_late(ops):
        key, mode = (op.layer, op.pass_index), sync_of(op.layer)
        if isinstance(op, AllReduce) and mode is not ReplicaSync.ALL_REDUCE:
            replica_counts[key] = len(op.replica_devices)
            finished_by[op.index] = []
        elif isinstance(op, Update) and mode is ReplicaSync.AVERAGE and key in replica_counts:
            group = slices.setdefault(key, [])
            group.append((op, add(op, TaskAction.UPDATE, deps_of(op))))
            finished_by[op.index] = []  # filled by the gather tasks
            waiting.add(op.index)
            if len(group) == replica_counts[key]:
                updated = [t for _, t in group]
                gather(group, [add(u, TaskAction.AVERAGE_SLICE, updated, u.device)
                               for u, _ in group])
        elif isinstance(op, BatchStats):
            action = (TaskAction.FORWARD_STATS if op.phase == "forward"
                      else TaskAction.BACKWARD_STATS)
            deps = deps_of(op)  # each replica's statistics need only its own device's
            own = [add(op, action, [t for t in deps if d in tasks[t].devices], d)
                   for d in op.replica_devices]
            finished_by[op.index] = [add(op, TaskAction.STATS_REDUCE, own, d)
                                     for d in op.replica_devices]
        elif isinstance(op, AllReduce) and sharded(op):
            deps = deps_of(op)
            reduces[key] = [add(op, TaskAction.REDUCE_SLICE, deps, d) for d in op.replica_devices]
            finished_by[op.index] = list(reduces[key])
        elif isinstance(op, Update) and key in reduces:
            rank_reduce = reduces[key][op.replica]
            group = slices.setdefault(key, [])
            group.append((op, add(op, TaskAction.UPDATE_SLICE, (rank_reduce,), op.device)))
            finished_by[op.index] = []  # filled by the gather tasks below
            waiting.add(op.index)
            if len(group) == len(reduces[key]):
                gather(group, [t for _, t in group])
        else:
            finished_by[op.index] = [add(op, TaskAction.of_op(op), deps_of(op))]
    return tasks


def _pulls_late(ops: list[Op]) -> list[Op]:
    """``ops`` with every :class:`GradCopy` moved to right before the first operation
    that depends on it (see the module docstring); still a dependency order."""
    held: dict[int, GradCopy] = {}
    out: list[Op] = []
    for op in ops:
        if isinstance(op, GradCopy):
            held[op.index] = op
            continue
        due = [d for d in op.deps if d in held]
        out.extend(held.pop(d) for d in sorted(due))
        out.append(op)
    out.extend(held[d] for d in sorted(held))
    return out


__all__ = ["ReplicaSync", "Task", "TaskAction", "exchanges_per_step", "local_periods",
           "make_tasks"]
