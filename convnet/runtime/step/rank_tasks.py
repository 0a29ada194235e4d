"""The task list of one process of a multi-process run: its own tasks, plus sends and receives.

Every rank builds the same plan and the same global task list
(:func:`convnet.runtime.step.tasks.make_tasks`) over all logical devices, then
keeps the tasks of its own devices.  Where data crosses from one rank to
another, the pull that one process would do becomes a pair:

* a ``Copy`` or ``GradCopy`` from a device of rank A to one of rank B: a
  ``SEND`` on A's device after the producer, and a ``RECV`` on B's device
  that takes the pull's place (its dependants wait for the ``RECV``);
* ``REDUCE_SLICE`` of replica r: every replica q on another rank sends its
  gradients' slice r (``SEND_SLICE``) and r's device receives it
  (``RECV_SLICE``) before summing, in replica order as in one process, so
  the sums are bitwise the same;
* ``GATHER`` of replica r: every owner q on another rank sends its updated
  weight slice q after its ``UPDATE_SLICE``, and r's device receives it
  before the gather copies it in;
* ``AVERAGE_SLICE`` of replica r (local SGD): like ``REDUCE_SLICE``, with
  the locally updated weights' slice r instead of the gradients';
* ``STATS_REDUCE`` of replica r (a BatchStats operation): every replica q on
  another rank sends its own statistics (``SEND``, after its ``FORWARD_STATS``
  or ``BACKWARD_STATS``) and r's device receives them before combining all in
  replica order.

Each pair gets a tag: its position among the run's transfers, counted over
the global list (the same count on every rank), modulo the communicator's
tag limit.  Sends are non-blocking; receives block, so a receive task only
starts once nothing earlier is pending on its device
(:attr:`convnet.runtime.step.tasks.Task.barrier`).  That keeps the run free of
deadlocks: the ranks' lists are subsequences of one global order in which
every send comes before its receive, so the earliest unfinished task of
that order can always run (see :mod:`convnet.runtime.step.workers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

from convnet.runtime.step.tasks import Task, TaskAction


@dataclass(frozen=True)
class Transfer:
    """What one SEND/RECV pair carries and between which ranks.

    ``what`` is ``'act'`` (an activation shard), ``'grad'`` (the gradient a
    consumer sends back), ``'stats'`` (replica ``source_replica``'s statistics for
    replica ``target_replica``'s combination), ``'grad-slice'`` (replica ``source_replica``'s
    gradients, slice ``target_replica``, for that replica's reduce),
    ``'avg-slice'`` (the same of its weights, for local SGD's average) or
    ``'weight-slice'`` (owner ``source_replica``'s updated weights, slice
    ``source_replica``, for replica ``target_replica``'s gather).
    """

    what: str
    peer: int  # the rank at the other end
    tag: int
    source_replica: int = -1
    target_replica: int = -1


#: The tasks that read what every other replica has (a slice, or its statistics), and
#: what that is.
_SLICE_TRANSFERS = {TaskAction.REDUCE_SLICE: "grad-slice", TaskAction.GATHER: "weight-slice",
                    TaskAction.AVERAGE_SLICE: "avg-slice", TaskAction.STATS_REDUCE: "stats"}


def tasks_for_rank(tasks: list[Task], rank_of, rank: int, replica_devices,
                   tag_limit: int) -> list[Task]:
    """The tasks ``rank`` runs, renumbered, with the sends and receives it takes part in.

    ``rank_of(device)`` is the rank holding a logical device and
    ``replica_devices(layer)`` the devices of a layer's replicas.
    """
    out: list[Task] = []
    renumbered: dict[int, int] = {}  # global task index -> the local task that completes it
    tags = count()

    def local(device: int) -> bool:
        return rank_of(device) == rank

    def deps(indices) -> tuple[int, ...]:
        return tuple(sorted({renumbered[d] for d in indices if d in renumbered}))

    def add(task: Task, action: TaskAction, dep_indices: tuple[int, ...], device: int,
            transfer: Transfer | None = None) -> int:
        out.append(Task(len(out), task.op, action, dep_indices, device, transfer))
        return len(out) - 1

    def pair(task: Task, src: int, dst: int, what: str, source_replica: int = -1,
             target_replica: int = -1) -> int | None:
        """Add this rank's side of a transfer from ``src`` to ``dst``; the receive's index."""
        tag = next(tags) % tag_limit
        slices = what.endswith("slice")
        if local(src):
            add(task, TaskAction.SEND_SLICE if slices else TaskAction.SEND, deps(task.deps), src,
                Transfer(what, rank_of(dst), tag, source_replica, target_replica))
        if local(dst):
            return add(task, TaskAction.RECV_SLICE if slices else TaskAction.RECV, (), dst,
                       Transfer(what, rank_of(src), tag, source_replica, target_replica))
        return None

    for task in tasks:
        action, op = task.action, task.op
        if action in (TaskAction.COPY, TaskAction.GRAD_COPY) and rank_of(op.src) != rank_of(op.dst):
            received = pair(task, op.src, op.dst, "act" if action is TaskAction.COPY else "grad")
            if received is not None:
                renumbered[task.index] = received
        elif action in _SLICE_TRANSFERS:
            target, devices = task.rank, replica_devices(op.layer)
            received = []
            for source, device in enumerate(devices):
                if source == target or rank_of(device) == rank_of(task.device):
                    continue
                what = _SLICE_TRANSFERS[action]
                index = pair(task, device, task.device, what, source, target)
                if index is not None:
                    received.append(index)
            if local(task.device):
                renumbered[task.index] = add(task, action, deps(task.deps) + tuple(received),
                                             task.device)
        elif all(local(d) for d in task.devices):
            renumbered[task.index] = add(task, action, deps(task.deps), task.device)
        elif any(local(d) for d in task.devices):
            raise ValueError(f"{task.action.value} of layer '{task.layer}' spans processes but "
                             f"cannot be split into sends and receives")
    return out


__all__ = ["Transfer", "tasks_for_rank"]
