"""Freeing a training step's activations after their last reader.

A step's activations (``StepBuffers.acts``, keyed (layer, piece, device)) are read by
the forwards of the layers that consume them, by the copies that move them to other
devices (or the sends to other processes), and by the backward calls of their own
layer and of its consumers.  Once all of those have run, nothing in the step reads
the array again (the statistics that a layer normalising over its replicas' cases
computes before its forward and backward calls read it too), and holding it to the
end of the step only raises the peak: with
micro-batches, a stage would hold every micro-batch's activations even where the
schedule (1F1B, docs/PIPELINE.md) has finished with them long before.

:class:`ActivationReaders` counts, once per task list, the tasks that read each
activation; :class:`StepFrees` is one step's countdown: after each task it takes the
task's reads off the counts and drops an activation whose count reaches 0.  The
device workers run tasks in parallel threads, so the countdown is under a lock.
Only training steps free: ``features()`` reads a layer's output after the walk, and
the evaluation walk is short.  Activations no task of the step reads (a cost
layer's output, an output layer's) are never freed, so what is read after the
step (the non-finite diagnostics read what is held) still finds them.  Dropping an
array only drops the step's reference: a CUDA copy still queued keeps its source
alive (:mod:`convnet.runtime.devices.cuda`, rule 2), so freeing never races a read.
"""

from __future__ import annotations

import threading
from collections import Counter

from convnet.config.model import NetConfig
from convnet.plan.memory import activation_reads, statistics_reads
from convnet.runtime.step.tasks import Task, TaskAction


def task_activation_reads(task: Task, net: NetConfig) -> tuple[tuple, ...]:
    """The activation keys (layer, piece, device) that ``task`` reads: its operation's
    (:func:`convnet.plan.memory.activation_reads`), where the task carries the
    operation out here; a send to another process reads what its copy reads."""
    if task.action in (TaskAction.COPY, TaskAction.FORWARD, TaskAction.BACKWARD) or (
            task.action is TaskAction.SEND and task.transfer.what == "act"):
        return activation_reads(task.op, net)
    if task.action in (TaskAction.FORWARD_STATS, TaskAction.BACKWARD_STATS):
        return statistics_reads(task.op, task.rank, net)
    return ()


class ActivationReaders:
    """Per task of a list, the activations it reads; per activation, how many reads
    the list makes of it (made once per task list, see the module docstring)."""

    def __init__(self, tasks: list[Task], net: NetConfig):
        self.reads = {t.index: reads for t in tasks if (reads := task_activation_reads(t, net))}
        self.counts = Counter(key for reads in self.reads.values() for key in reads)

    def countdown(self, acts: dict) -> StepFrees:
        """A fresh countdown for one step whose activations are ``acts``."""
        return StepFrees(self, acts)


class StepFrees:
    """One step's countdown of the reads left per activation (thread-safe)."""

    def __init__(self, readers: ActivationReaders, acts: dict):
        self._reads = readers.reads
        self._left = dict(readers.counts)
        self._acts = acts
        self._lock = threading.Lock()

    def task_done(self, task: Task) -> None:
        """``task`` has run: drop every activation it was the last reader of."""
        reads = self._reads.get(task.index)
        if not reads:
            return
        with self._lock:
            for key in reads:
                self._left[key] -= 1
                if not self._left[key]:
                    self._acts.pop(key, None)


__all__ = ["ActivationReaders", "StepFrees", "task_activation_reads"]
