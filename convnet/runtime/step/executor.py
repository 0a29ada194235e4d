"""Run a plan: one training step or one evaluation of a minibatch.

:class:`Executor` runs the operations of :mod:`convnet.plan.ops`, as the tasks
of :mod:`convnet.runtime.step.tasks`, either in list order on the calling thread
(``parallel=False``, the reference walk) or on one worker per logical device
(``parallel=True``, :mod:`convnet.runtime.step.workers`).  Both run each task
through the same table from its :class:`~convnet.runtime.step.tasks.TaskAction`
to the method that carries it out (:mod:`convnet.runtime.step.task_actions`),
and every buffer is written by the tasks of one device in list order, so the
two walks give bitwise-identical results.

The executor is composed of its set-up (:mod:`convnet.runtime.step.executor_setup`:
what it builds once and holds across steps), its task actions, and, here, the
walk of a step's tasks with what a step returns: the costs summed over the
shards (and over the processes), the features, checkpoint state.  It owns the
per-step buffers (:class:`~convnet.runtime.step.records.StepBuffers`; a training
step drops each activation after its last reader,
:mod:`convnet.runtime.step.activation_frees`); the
weights and their gradients live in a :class:`~convnet.runtime.step.weights.WeightStore`,
and the update rule is a :class:`~convnet.runtime.step.optimizer.MomentumSGD`.

In a multi-process run (a :class:`~convnet.runtime.processes.cluster.Cluster` of
several ranks) every process makes the same executor over all logical
devices, runs the tasks of its own devices with sends and receives where
data crosses processes (:mod:`convnet.runtime.step.rank_tasks`,
:mod:`convnet.runtime.step.transfers`), and combines the costs, features and
checkpoint state with small collectives, so every rank returns the same
results as one process running the whole plan.

With ``local_sgd=K`` the replicated layers train by local SGD: each replica
updates its own weights and momentum from the gradient of its own shards, and
every K-th step the replicas' weights are replaced by their mean (see
:class:`~convnet.runtime.step.tasks.ReplicaSync`).  A layer's ``sync=`` key overrides
the run's mode for that layer (``sync``, or ``local:K`` with its own K:
:func:`~convnet.runtime.step.tasks.local_periods`), so synchronous and local layers
can train side by side; each local layer averages at the steps its K says.
Momentum is never averaged: each replica keeps its own, as in plain local SGD
(no outer optimizer step as in DiLoCo).  K=1 with momentum 0 is synchronous SGD up to float rounding (the
mean of the updated weights, not the update with the mean gradient).

With ``async_staleness=S`` (a hybrid net under ``--sync async:S``) the steps
stay lockstep, but the replicated layers' replicas do not wait for each other:
each updates from its own shards at once, with the learning rates divided by
its layer's replica count, and the increments move between the replicas
beside the steps (:mod:`convnet.runtime.processes.increment_exchange`); a replica adds
the ones that arrived before each of its forwards of the layer, never more than S
steps late (with S = 0 where sync's all-reduce would have applied them).  Momentum
is each replica's own.  In a multi-process run the increments also go to the
replicas on other ranks (:mod:`convnet.runtime.processes.increment_link`), and each
rank's exchange learns from :meth:`Executor.step` which steps have ended everywhere
(what a drain waits for).
"""

from __future__ import annotations

import time

import numpy as np

from convnet.plan.ops import piece_bounds, shard_bounds
from convnet.runtime.devices.cuda_failures import note_running, op_text
from convnet.runtime.step.activation_frees import ActivationReaders
from convnet.errors import DivergedError, TrainingError
from convnet.runtime.step.batch_check import check_batch
from convnet.runtime.step.device_results import FailedCheck, StepResults
from convnet.runtime.step.executor_setup import ExecutorSetup
from convnet.runtime.step.non_finite import non_finite_cost_error, non_finite_gradient_error
from convnet.runtime.step.precision import StepBackup
from convnet.runtime.step.records import OpTiming, StepBuffers, StepResult
from convnet.runtime.step.task_actions import TaskActions
from convnet.runtime.step.tasks import Task
from convnet.runtime.step.uploads import staged_loads
from convnet.runtime.step.weights import assemble_state


class Executor(ExecutorSetup, TaskActions):
    """Train or evaluate ``net`` on ``devices`` following ``plan``.

    ``seed`` draws the initial weights (see :mod:`convnet.runtime.step.weights`)
    and the dropout masks; ``check_finite`` stops a step whose costs or weight
    gradients hold NaN or inf (see :mod:`convnet.runtime.step.non_finite`).
    ``cluster`` is this process's place in a multi-process run (``devices``
    then holds :class:`~convnet.runtime.processes.cluster.RemoteDevice` stand-ins for
    the other ranks' devices); by default the run is this process alone.
    ``local_sgd``, where given, is the K of local SGD (see the module docstring);
    None is synchronous SGD; either is the default of the layers without a
    ``sync=`` key.  ``async_staleness``, where given, is the S of the
    asynchronous exchange of the replicated layers' increments (see the module
    docstring; ``exchange_delay`` is the exchange's test hook).  ``slowdown``, a
    :class:`~convnet.runtime.devices.slowdown.Slowdown`, makes the tasks of a device F
    times as long in the steps it names (the device sleeps F - 1 times what each
    task took), a test-only way to make devices slower (``--slow-device``, see
    docs/DESIGN.md).  ``precision`` is ``--precision``'s mode
    (:mod:`convnet.runtime.step.precision`, docs/PRECISION.md): under ``fp16`` a step
    whose gradients overflow is undone and its :class:`StepResult` says ``skipped``.
    """

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Weights and momentum of every layer, on the host, for checkpoints.

        With several processes every rank must call it: each sends its share to
        rank 0, which returns the whole state; the others return an empty dict."""
        self.drain()
        if self.cluster.size == 1:
            return self.store.state_arrays()
        shares = self.cluster.comm.gather(self.store.local_state(), root=0,
                                         what="gathering the weights for a checkpoint")
        return assemble_state(shares) if shares is not None else {}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Put checkpointed weights and momentum onto every replica."""
        self.drain()  # no increment of the old weights may be added to the loaded ones
        self.store.load_state_arrays(arrays)

    # ------------------------------------------------------------------- steps
    def step(self, batch: list[np.ndarray], progress: float = 0.0,
             case_offset: int = 0, update_cases: float | None = None) -> StepResult:
        """One training step on a minibatch: forward, backward and the updates due.
        ``case_offset`` is the index of the batch's first case in a larger minibatch
        that it is a shard of (what the dropout masks of its cases are drawn by);
        ``update_cases``, if given, what the updates divide their gradient sums by
        instead of the cases they cover (a shard whose update is its part of a larger
        minibatch's: M / R, so that every case weighs 1/M however the shards fell)."""
        scaling = self.precision.loss_scale
        if scaling is not None:
            if self._backup is None:
                self._backup = StepBackup(self.store, self.devices)
            self._backup.take()
        if self.step_graph is not None and case_offset == 0 \
                and self.step_graph.applies(batch, update_cases):
            result = self.step_graph.step(batch, progress)  # replayed (step_graph.py)
        else:
            result = self._execute(batch, self.train_tasks(), train=True, progress=progress,
                                   case_offset=case_offset, update_cases=update_cases,
                                   readers=self.train_readers())
        if scaling is not None:
            if result.skipped:
                self._backup.restore()
                if scaling.exhausted:
                    raise DivergedError(f"the gradients overflow float16 even at loss scale "
                                        f"{scaling.scale:g} at step {self.step_count} "
                                        f"(--precision fp16); --precision bf16 has float32's "
                                        f"range")
            scaling.update(result.skipped)
        if self.exchange is not None:
            self.exchange.step_ended(self.step_count)
        self.step_count += 1
        return result

    def stage(self, batch: list[np.ndarray]) -> None:
        """Start the uploads of the next training minibatch's stored images while the
        current step runs (:mod:`convnet.runtime.step.uploads`); its step takes them."""
        pieces = piece_bounds(len(batch[0]), self.plan.num_shards, self.plan.micro_batches)
        self.uploads.stage(batch, staged_loads(self.net, self.train_tasks(), pieces,
                                               self.cluster.is_local))

    def timed_steps(self, batch: list[np.ndarray], steps: int) -> list[tuple[float, list]]:
        """``steps`` training steps of ``batch`` after one warm-up step, each as (its
        seconds, its :class:`OpTiming` list): the profiles of ``--compare`` and
        ``--simulate``.  The weights change as in any training step."""
        previous, self.timings = self.timings, []
        runs = []
        try:
            for i in range(max(int(steps), 1) + 1):
                result = self.step(batch, progress=1.0)
                if i:
                    runs.append((result.seconds, list(self.timings)))
        finally:
            self.timings = previous
        return runs

    def evaluate(self, batch: list[np.ndarray]) -> StepResult:
        """Forward only, in test mode (no dropout), no update."""
        self.drain()
        return self._execute(batch, self._eval_tasks, train=False, progress=0.0)

    def features(self, batch: list[np.ndarray], layer: str) -> np.ndarray:
        """The test-mode output of ``layer`` for every case of ``batch``, on the host."""
        self.drain()
        buffers = self._run_tasks(batch, self._eval_tasks, train=False, progress=0.0)
        placement = self.plan.layers[layer]
        parts = {}
        for piece in range(self.plan.num_pieces):
            _, device = self.plan.producer_of(layer, piece)
            if self.cluster.is_local(device):
                parts[piece] = self.reads.read(self.devices[device],
                                               buffers.acts[(layer, piece, device)])
        if self.cluster.size > 1:
            parts = {s: a for share in self.cluster.comm.allgather(
                parts, what=f"gathering layer {layer}'s features") for s, a in share.items()}
        in_case_order = sorted(range(self.plan.num_pieces), key=lambda i: buffers.pieces[i])
        return (np.concatenate([parts[i] for i in in_case_order])
                if placement.devices else np.empty((0,)))

    def drain(self) -> None:
        """Under the asynchronous exchange: wait until every increment has arrived and add
        it, so that the replicas agree (up to float rounding); nothing otherwise."""
        if self.exchange is None:
            return
        self.exchange.drain()
        for layer, replica_devices in self.exchange.replicas.items():
            for replica in self.exchange.local[layer]:
                self.devices[replica_devices[replica]].activate()
                self._add_increments(layer, replica, self.step_count)

    def close(self) -> None:
        if self.exchange is not None:
            self.exchange.close()
        if self.workers is not None:
            self.workers.close()
            self.workers = None
        for collective in self.collectives.values():
            collective.close()
        self.collectives.clear()

    def _execute(self, batch, tasks, train: bool, progress: float,
                 case_offset: int = 0, update_cases: float | None = None,
                 readers: ActivationReaders | None = None) -> StepResult:
        start = time.perf_counter()
        self.reads.take()  # what was read between steps (a checkpoint) is not the step's
        buffers = self._run_tasks(batch, tasks, train, progress, case_offset, update_cases,
                                  readers)
        num_cases = buffers.bounds[-1][1]
        metrics = buffers.results.metrics
        skipped = buffers.overflow is not None
        if self.cluster.size > 1:  # each rank has the shards of its own cost layer replicas
            shares = self.cluster.comm.allgather((metrics, skipped),
                                                 what="gathering a step's costs")
            metrics = {k: v for share, _ in shares for k, v in share.items()}
            skipped = any(overflow for _, overflow in shares)  # every rank skips it
        return self._step_result(metrics, num_cases, start, skipped)

    def _step_result(self, metrics: dict, num_cases: int, start: float,
                     skipped: bool) -> StepResult:
        """What a step returns: its costs from the shards' sums (``metrics``, by (cost
        layer, shard)), its time since ``start`` and its host waits."""
        costs: dict[str, dict[str, float]] = {}
        for (layer, _), sums in sorted(metrics.items()):  # fixed order: shard order
            totals = costs.setdefault(layer, {})
            for k, v in sums.items():
                totals[k] = totals.get(k, 0.0) + v
        costs = {layer: {k: v / num_cases for k, v in sums.items()}
                 for layer, sums in costs.items()}
        return StepResult(num_cases, costs, time.perf_counter() - start,
                          host_waits=self.reads.take(), skipped=skipped)

    def _run_tasks(self, batch, tasks: list[Task], train: bool, progress: float,
                   case_offset: int = 0, update_cases: float | None = None,
                   readers: ActivationReaders | None = None,
                   diagnosing: bool = False, capturing: bool = False) -> StepBuffers:
        """Run ``tasks`` on ``batch``; with ``readers`` (a training step's), every
        activation is dropped after its last reader (:mod:`.activation_frees`).  Each
        device's cost sums and finite flags come to the host once, after its last task;
        a failed check raises its error (:meth:`_failed_step`).  ``diagnosing`` runs
        the forward tasks of such a step again, keeping every activation and checking
        nothing; ``capturing`` only queues the walk, on this thread (a CUDA graph's
        capture, :mod:`.step_graph`, which packs and reads the results itself from a
        ``batch`` already on the device, checked before)."""
        num_cases = (len(batch[0]) if capturing else check_batch(self.net, self.plan, batch))
        plan = self.plan
        buffers = StepBuffers(batch=batch, bounds=shard_bounds(num_cases, plan.num_shards),
                              pieces=piece_bounds(num_cases, plan.num_shards,
                                                  plan.micro_batches),
                              ctx_base={"train": train, "seed": self.seed,
                                        "step": self.step_count},
                              progress=progress, case_offset=case_offset,
                              update_cases=update_cases,
                              results=None if diagnosing else StepResults(len(self.devices)),
                              diagnosing=diagnosing)
        actions, slowdown, step = self._actions, self.slowdown, self.step_count
        core_waits = self.core_waits if self.timings is not None else None
        t0 = time.perf_counter()
        timings = [] if self.timings is not None else None
        meter = self.memory
        frees = readers.countdown(buffers.acts) if readers is not None else None

        def run(task: Task, device: int | None) -> None:
            """Carry out ``task``; ``device`` is the calling worker's (None: all of the task's)."""
            waited = core_waits() if core_waits is not None else 0.0
            began = time.perf_counter()
            try:
                actions[task.action](task, buffers, device)
            except Exception as error:  # a CUDA failure says which operation was running
                on = device if device is not None else task.devices[0]
                note_running(error, op_text(task.op, on), on, self.devices[on].physical)
                raise
            if slowdown is not None:
                slowdown.sleep_after([device] if device is not None else task.devices,
                                     step, began)
            if timings is not None:
                ended = time.perf_counter()
                if core_waits is not None:
                    waited = core_waits() - waited
                for d in ([device] if device is not None else task.devices):
                    timings.append(OpTiming(d, task.kind, task.layer, began - t0,
                                            ended - t0, waited))
            if frees is not None:
                frees.task_done(task)
            if meter is not None:
                meter.sample(buffers)

        def finish(device: int) -> None:
            """The device's end of the step: its results fetched, its one wait."""
            if capturing:
                return
            if buffers.results is not None and self.cluster.is_local(device):
                buffers.results.fetch(device, self.devices[device], self.reads)
            else:
                self.devices[device].synchronize()

        if self.workers is None or capturing:
            for task in tasks:
                self.devices[task.devices[0]].activate()  # the task's GPU and stream (CUDA)
                run(task, None)
            for device in range(len(self.devices)):
                finish(device)
        else:
            self.workers.run(tasks, run, finish)
        self.transfers.finish_sends(buffers)
        if timings is not None:
            self.timings = timings
        if capturing:
            return buffers
        failed = buffers.results.first_failure() if buffers.results is not None else None
        if failed is not None and failed.key is not None \
                and self.precision.loss_scale is not None:
            buffers.overflow = failed  # scaled too far: the step is undone (step())
        elif failed is not None:
            raise self._failed_step(failed, batch, train, progress, case_offset)
        return buffers

    def _failed_step(self, failed: FailedCheck, batch, train: bool, progress: float,
                     case_offset: int) -> TrainingError:
        """The error for the step's first failed finite check (:mod:`.non_finite`).

        A gradient names its weight array.  A cost is traced back to the first layer, in
        net order, whose output for the shard is not finite: the step's activations are
        gone by now, so its forward tasks run again (the same cases, weights and dropout
        masks: the updates whose gradients the non-finite values reached were not applied)
        and their outputs are read.  Across processes that run would need every rank, so
        there the error names the cost layer."""
        if failed.key is not None:
            return non_finite_gradient_error(failed.op.layer, failed.key, failed.op.device,
                                             self.step_count)
        if self.cluster.size > 1:
            return non_finite_cost_error(self.net, self.devices, {}, failed.op,
                                         self.step_count, self.reads)
        rerun = self._run_tasks(batch, self._eval_tasks, train, progress, case_offset,
                                diagnosing=True)
        return non_finite_cost_error(self.net, self.devices, rerun.acts, failed.op,
                                     self.step_count, self.reads)
