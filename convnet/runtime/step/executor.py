"""Run a plan: one training step or one evaluation of a minibatch.

:class:`Executor` runs the operations of :mod:`convnet.plan.ops`, as the tasks
of :mod:`convnet.runtime.step.tasks`, either in list order on the calling thread
(``parallel=False``, the reference walk) or on one worker per logical device
(``parallel=True``, :mod:`convnet.runtime.step.workers`).  Both run each task
through the same table from its :class:`~convnet.runtime.step.tasks.TaskAction`
to the method that carries it out, and every buffer is written by the tasks
of one device in list order, so the two walks give bitwise-identical results.

The executor owns the per-step buffers (activations, gradients, costs); the
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
the ones that arrived before its first forward of the layer in a later step,
never more than S steps late.  Momentum is each replica's own.  In a
multi-process run the increments also go to the replicas on other ranks
(:mod:`convnet.runtime.processes.increment_link`), and each rank's exchange learns
from :meth:`Executor.step` which steps have ended everywhere.
"""

from __future__ import annotations

import collections
import math
import time
from dataclasses import dataclass, field

import numpy as np

from convnet.config.model import NetConfig
from convnet.plan.ops import AllReduce, Copy, Forward, Load, Plan, Update, shard_bounds
from convnet.runtime.step.batch_check import check_batch
from convnet.runtime.processes.cluster import Cluster, single_process
from convnet.runtime.devices.collectives import ChunkedAllReduce, make_all_reduce
from convnet.runtime.processes.increment_exchange import IncrementExchange
from convnet.runtime.step.learning_rules import scale_rates
from convnet.runtime.step.non_finite import non_finite_cost_error, non_finite_gradient_error
from convnet.runtime.step.optimizer import MomentumSGD
from convnet.runtime.step.rank_tasks import tasks_for_rank
from convnet.runtime.devices.slowdown import Slowdown
from convnet.runtime.step.tasks import ReplicaSync, Task, TaskAction, local_periods, make_tasks
from convnet.runtime.step.transfers import Transfers, accumulate
from convnet.runtime.step.weights import WeightStore, assemble_state, shared_weight_layers
from convnet.runtime.step.workers import DeviceWorkers
from convnet.kernels.constraints import ball_projection
from convnet.layers import build_layer
from convnet.layers.base import Context


@dataclass
class StepResult:
    """Costs of one minibatch: per cost layer, means over its cases."""

    num_cases: int
    costs: dict[str, dict[str, float]]
    seconds: float = 0.0


@dataclass
class OpTiming:
    """When one operation ran on one device (seconds since the step began)."""

    device: int
    kind: str
    layer: str
    start: float
    end: float


@dataclass
class _StepBuffers:
    """Everything one minibatch creates; dropped when the step ends."""

    batch: list
    bounds: list[tuple[int, int]]
    ctx_base: dict
    progress: float  # of training, in [0, 1]: what the learning-rate schedules read
    case_offset: int = 0  # of the first case, where the batch is a shard of a larger one
    acts: dict = field(default_factory=dict)
    states: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)
    gouts: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # (cost layer, shard) -> sums over the shard
    collectives: dict = field(default_factory=dict)
    reduced: dict = field(default_factory=dict)  # (layer, pass, rank) -> summed gradient slices
    received: dict = field(default_factory=dict)  # slices from other processes (transfers.py)
    sends: list = field(default_factory=list)  # this step's pending sends to other processes
    contexts: dict = field(default_factory=dict)  # shard -> Context (immutable, shared)


FORWARD_OPS = (Load, Copy, Forward)


class Executor:
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
    docs/DESIGN.md).
    """

    def __init__(self, net: NetConfig, plan: Plan, devices: list, seed: int = 0,
                 parallel: bool = True, check_finite: bool = True,
                 cluster: Cluster | None = None, local_sgd: int | None = None,
                 slowdown: Slowdown | None = None,
                 async_staleness: int | None = None, exchange_delay=None):
        if len(devices) != plan.num_devices:
            raise ValueError("one device per logical index of the plan is needed")
        if local_sgd is not None and local_sgd < 1:
            raise ValueError(f"local SGD averages every K >= 1 steps, not {local_sgd}")
        if local_sgd is not None and async_staleness is not None:
            raise ValueError("local SGD and the asynchronous exchange exclude each other")
        if async_staleness is not None and any(l.params.get("sync") for l in net):
            raise ValueError("the asynchronous exchange runs every replicated layer apart: "
                             "no layer may set its own sync= mode")
        self.net = net
        self.plan = plan
        self.devices = devices
        self.cluster = cluster if cluster is not None else single_process(len(devices))
        self.slowdown = slowdown
        self.seed = seed
        self.step_count = 0
        self.check_finite = check_finite
        self.layers = {name: build_layer(net[name]) for name, p in plan.layers.items()
                       if not net[name].is_data}
        self.collectives = {op.replica_devices: make_all_reduce([devices[d] for d in
                                                                 op.replica_devices])
                            for op in plan.ops if isinstance(op, AllReduce)}
        # Slices of the weights move by a chunked collective even where the gradients are
        # summed whole (NCCL): the averaging of local SGD and the gathers use the same
        # bounds.
        self._chunked = {devs: c if c.sharded else ChunkedAllReduce(c.devices)
                         for devs, c in self.collectives.items()}
        # layer -> K of the replicated layers that train by local SGD
        self.local_periods = local_periods(plan, net, local_sgd) if async_staleness is None \
            else {}
        # The replicated layers whose replicas update from their own gradients.
        self.own_updates = frozenset(op.layer for op in plan.ops if isinstance(op, AllReduce)
                                     and (async_staleness is not None
                                          or op.layer in self.local_periods))
        self.store = WeightStore(net, plan, devices, self.layers, seed, self.collectives,
                                 self.cluster.is_local, own_updates=self.own_updates,
                                 shared=shared_weight_layers(
                                     plan, net, sliced_in_one_memory=lambda devs: (
                                         all(devices[d].kind == "cpu" for d in devs)
                                         and self.collectives[devs].sharded),
                                     synchronous=async_staleness is None,
                                     processes=self.cluster.size,
                                     own_updates=self.own_updates))
        self.exchange = None
        if async_staleness is not None:
            replicated = {op.layer: op.replica_devices for op in plan.ops
                          if isinstance(op, AllReduce)}
            for layer, replica_devices in replicated.items():
                scale_rates(self.store.rules, layer, 1.0 / len(replica_devices))
            local_replica = {layer: self.store.momentum[layer][q] for layer, devs in
                             replicated.items() for q, d in enumerate(devs)
                             if self.cluster.is_local(d)}
            self.exchange = IncrementExchange(
                replicated, devices, async_staleness, delay=exchange_delay,
                cluster=self.cluster,
                shapes={layer: {k: v.shape for k, v in momentum.items()}
                        for layer, momentum in local_replica.items()},
                posts=collections.Counter((op.layer, op.replica) for op in plan.ops
                                          if isinstance(op, Update)))
            self._added: dict[tuple[str, int], int] = {}  # (layer, replica) -> step added
        self.optimizer = MomentumSGD()
        self.transfers = Transfers(self.cluster.comm, net, devices, self.store, self._collective)
        # Training steps' task lists by what they do with each replicated layer (made
        # when a step first needs one: local layers with different K average at
        # different steps).
        self._tasks_by_sync: dict[tuple, list[Task]] = {}
        self.train_tasks()  # the first step's, so that a plan it cannot run fails here
        self._eval_tasks = self._rank_tasks(make_tasks(
            [op for op in plan.ops if isinstance(op, FORWARD_OPS)], self._sharded))
        self._actions = {  # the method that carries out each task action
            TaskAction.LOAD: self._load,
            TaskAction.COPY: self._copy,
            TaskAction.FORWARD: self._forward,
            TaskAction.BACKWARD: self._backward,
            TaskAction.GRAD_COPY: self._grad_copy,
            TaskAction.ALL_REDUCE: self._all_reduce,
            TaskAction.UPDATE: self._update,
            TaskAction.REDUCE_SLICE: self._reduce_slice,
            TaskAction.UPDATE_SLICE: self._update_slice,
            TaskAction.GATHER: self._gather,
            TaskAction.CONSTRAIN: self._constrain_task,
            TaskAction.AVERAGE_SLICE: self._average_slice,
            TaskAction.SEND: self._send,
            TaskAction.RECV: self._recv,
            TaskAction.SEND_SLICE: self._send,
            TaskAction.RECV_SLICE: self._recv,
        }
        # With several processes a failed worker ends the run (the caller aborts every
        # process), so the others, maybe blocked in a receive, are not waited for.
        self.workers = (DeviceWorkers(devices, wait_after_error=self.cluster.size == 1)
                        if parallel else None)
        self.timings: list[OpTiming] | None = None
        self.memory = None  # a runtime.memory.MemoryMeter, sampled after every task when set

    def _constrained(self, layer: str) -> bool:
        """Whether ``layer``'s weights are rescaled after each update (``wball``)."""
        return any(rule.ball for rule in self.store.rules.get(layer, {}).values())

    def _sharded(self, op: AllReduce) -> bool:
        return self.collectives[op.replica_devices].sharded

    def _rank_tasks(self, tasks: list[Task]) -> list[Task]:
        """This process's share of ``tasks``: all of them when it runs alone."""
        cluster = self.cluster
        if cluster.size == 1:
            return tasks
        return tasks_for_rank(tasks, cluster.rank_of, cluster.rank,
                              lambda layer: self.plan.layers[layer].devices,
                              cluster.comm.tag_limit)

    def _collective(self, layer: str):
        """The all-reduce of ``layer``'s replicas (one per replica set)."""
        return self.collectives[self.plan.layers[layer].devices]

    def _sliced(self, layer: str) -> ChunkedAllReduce:
        """The collective that moves slices of ``layer``'s weight state."""
        return self._chunked[self.plan.layers[layer].devices]

    def replica_syncs(self) -> dict[str, ReplicaSync]:
        """What the next training step does with each replicated layer's weights (the
        layers left out all-reduce their gradients)."""
        if self.exchange is not None:
            return dict.fromkeys(self.own_updates, ReplicaSync.ASYNC)
        return {layer: ReplicaSync.AVERAGE if (self.step_count + 1) % period == 0
                else ReplicaSync.LOCAL for layer, period in self.local_periods.items()}

    def train_tasks(self) -> list[Task]:
        """The tasks of the next training step (this process's share)."""
        syncs = self.replica_syncs()
        key = tuple(sorted((layer, sync.value) for layer, sync in syncs.items()))
        tasks = self._tasks_by_sync.get(key)
        if tasks is None:
            tasks = self._tasks_by_sync[key] = self._rank_tasks(
                make_tasks(self.plan.ops, self._sharded, self._constrained, syncs))
        return tasks

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Weights and momentum of every layer, on the host, for checkpoints.

        With several processes every rank must call it: each sends its share to
        rank 0, which returns the whole state; the others return an empty dict."""
        self.drain()
        if self.cluster.size == 1:
            return self.store.state_arrays()
        shares = self.cluster.comm.gather(self.store.local_state(), root=0)
        return assemble_state(shares) if shares is not None else {}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Put checkpointed weights and momentum onto every replica."""
        self.drain()  # no increment of the old weights may be added to the loaded ones
        self.store.load_state_arrays(arrays)

    # ------------------------------------------------------------------- steps
    def step(self, batch: list[np.ndarray], progress: float = 0.0,
             case_offset: int = 0) -> StepResult:
        """One training step on a minibatch: forward, backward and the updates due.
        ``case_offset`` is the index of the batch's first case in a larger minibatch
        that it is a shard of (what the dropout masks of its cases are drawn by)."""
        result = self._execute(batch, self.train_tasks(), train=True, progress=progress,
                               case_offset=case_offset)
        if self.exchange is not None:
            self.exchange.step_ended(self.step_count)
        self.step_count += 1
        return result

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
        for shard in range(self.plan.num_shards):
            _, device = self.plan.producer_of(layer, shard)
            if self.cluster.is_local(device):
                parts[shard] = self.devices[device].to_host(buffers.acts[(layer, shard, device)])
        if self.cluster.size > 1:
            parts = {s: a for share in self.cluster.comm.allgather(parts) for s, a in share.items()}
        return (np.concatenate([parts[s] for s in range(self.plan.num_shards)])
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
                 case_offset: int = 0) -> StepResult:
        start = time.perf_counter()
        buffers = self._run_tasks(batch, tasks, train, progress, case_offset)
        num_cases = buffers.bounds[-1][1]
        metrics = buffers.metrics
        if self.cluster.size > 1:  # each rank has the shards of its own cost layer replicas
            metrics = {k: v for share in self.cluster.comm.allgather(metrics)
                       for k, v in share.items()}
        costs: dict[str, dict[str, float]] = {}
        for (layer, _), sums in sorted(metrics.items()):  # fixed order: shard order
            totals = costs.setdefault(layer, {})
            for k, v in sums.items():
                totals[k] = totals.get(k, 0.0) + v
        costs = {layer: {k: v / num_cases for k, v in sums.items()}
                 for layer, sums in costs.items()}
        return StepResult(num_cases, costs, time.perf_counter() - start)

    def _run_tasks(self, batch, tasks: list[Task], train: bool, progress: float,
                   case_offset: int = 0) -> _StepBuffers:
        num_cases = check_batch(self.net, self.plan, batch)
        buffers = _StepBuffers(batch=batch, bounds=shard_bounds(num_cases, self.plan.num_shards),
                               ctx_base={"train": train, "seed": self.seed,
                                         "step": self.step_count},
                               progress=progress, case_offset=case_offset)
        actions, slowdown, step = self._actions, self.slowdown, self.step_count
        t0 = time.perf_counter()
        timings = [] if self.timings is not None else None
        meter = self.memory

        def run(task: Task, device: int | None) -> None:
            """Carry out ``task``; ``device`` is the calling worker's (None: all of the task's)."""
            began = time.perf_counter()
            actions[task.action](task, buffers, device)
            if slowdown is not None:
                slowdown.sleep_after([device] if device is not None else task.devices,
                                     step, began)
            if timings is not None:
                for d in ([device] if device is not None else task.devices):
                    timings.append(OpTiming(d, task.kind, task.layer, began - t0,
                                            time.perf_counter() - t0))
            if meter is not None:
                meter.sample(buffers)

        if self.workers is None:
            for task in tasks:
                self.devices[task.devices[0]].activate()  # the task's GPU and stream (CUDA)
                run(task, None)
        else:
            self.workers.run(tasks, run)
        self.transfers.finish_sends(buffers)
        if timings is not None:
            self.timings = timings
        return buffers

    # ---------------------------------------------------------------- actions
    # Each runs one task: (task, the step's buffers, the calling worker's device
    # or None for all of the task's devices).

    def _ctx(self, buffers: _StepBuffers, shard: int) -> Context:
        ctx = buffers.contexts.get(shard)
        if ctx is None:
            ctx = buffers.contexts[shard] = Context(
                case_offset=buffers.case_offset + buffers.bounds[shard][0], **buffers.ctx_base)
        return ctx

    def _load(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        op = task.op
        ldef = self.net[op.layer]
        start, stop = buffers.bounds[op.shard]
        column = buffers.batch[ldef.attrs["dataIdx"]][start:stop]
        column = column.reshape((stop - start,) + tuple(ldef.output_shape))
        buffers.acts[(op.layer, op.shard, op.device)] = self.devices[op.device].to_device(column)

    def _copy(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        op = task.op
        source = buffers.acts[(op.layer, op.shard, op.src)]
        buffers.acts[(op.layer, op.shard, op.dst)] = self.devices[op.dst].copy_from(source)

    def _forward(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        op = task.op
        ldef = self.net[op.layer]
        layer = self.layers[op.layer]
        if self.exchange is not None and buffers.ctx_base["train"] and \
                self._added.get((op.layer, op.replica)) != self.step_count:
            self._add_increments(op.layer, op.replica, self.step_count)
        inputs = [buffers.acts[(i, op.shard, op.device)] for i in ldef.inputs]
        ctx = self._ctx(buffers, op.shard)
        output, state = layer.forward(inputs, self.store.weights[op.layer][op.replica], ctx)
        buffers.acts[(op.layer, op.shard, op.device)] = output
        buffers.states[(op.layer, op.shard)] = state
        if ldef.is_cost:
            sums = {k: float(v) for k, v in layer.metrics(inputs, output).items()}
            buffers.metrics[(op.layer, op.shard)] = sums
            if self.check_finite and not (math.isfinite(sums["cost"]) and all(
                    bool(self.devices[op.device].xp.isfinite(x).all()) for x in inputs)):
                raise non_finite_cost_error(self.net, self.devices, buffers.acts, op,
                                            self.step_count)

    def _backward(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        op = task.op
        ldef = self.net[op.layer]
        placement = self.plan.layers[op.layer]
        key = (op.layer, op.shard, op.device)
        grad_out = None if ldef.is_cost else buffers.grads.pop(key)
        inputs = [buffers.acts[(i, op.shard, op.device)] for i in ldef.inputs]
        input_grads, param_grads = self.layers[op.layer].backward(
            grad_out, inputs, buffers.acts[key], self.store.weights[op.layer][op.replica],
            buffers.states.pop((op.layer, op.shard)), self._ctx(buffers, op.shard),
            list(placement.input_grads))
        for inp, wanted, grad in zip(ldef.inputs, placement.input_grads, input_grads):
            if not wanted:
                continue
            _, src_device = self.plan.producer_of(inp, op.shard)
            if src_device == op.device:
                accumulate(buffers.grads, (inp, op.shard, op.device), grad)
            else:
                accumulate(buffers.gouts, (op.layer, inp, op.shard, op.device), grad)
        accum = self.store.grads[op.layer][op.replica]
        for k, g in param_grads.items():
            accumulate(accum, k, g)

    def _grad_copy(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        op = task.op
        grad = buffers.gouts.pop((op.consumer, op.layer, op.shard, op.src))
        accumulate(buffers.grads, (op.layer, op.shard, op.dst),
                   self.devices[op.dst].copy_from(grad))

    def _all_reduce(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        """Sum the replicas' gradients with the collective chosen for these devices;
        the parallel walk does its own rank and meets the others at a barrier."""
        op = task.op
        devs = op.replica_devices
        scratch = buffers.collectives.setdefault(op.index, {})
        if device is None:
            self.collectives[devs](self.store.grads[op.layer], None, None, scratch)
        else:
            self.collectives[devs](self.store.grads[op.layer], [devs.index(device)],
                                   lambda: self.workers.barrier(op.index, len(devs)), scratch)

    def _update(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        """The update of one replica's whole weights, with its all-reduced gradients."""
        op = task.op
        self._apply_update(op, buffers, self.store.weights[op.layer][op.replica],
                           self.store.momentum[op.layer][op.replica],
                           self.store.grads[op.layer][op.replica])
        self.constrain(op.layer, op.replica)
        if self.exchange is not None and op.layer in self.exchange.replicas:
            self.exchange.post(op.layer, op.replica, self.step_count,
                               self.store.momentum[op.layer][op.replica])

    def _add_increments(self, layer: str, replica: int, step: int) -> None:
        """Add the other replicas' increments that replica ``replica`` of ``layer`` takes
        before its forward in ``step`` (then redo ``wball``); once per step."""
        self._added[(layer, replica)] = step
        if layer not in self.exchange.replicas:
            return
        received = self.exchange.take(layer, replica, step)
        if not received:
            return
        weights = self.store.weights[layer][replica]
        for increments in received:
            for k, inc in increments.items():
                weights[k] += inc
        self.constrain(layer, replica)

    def _reduce_slice(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        op = task.op
        buffers.reduced[(op.layer, op.pass_index, task.rank)] = \
            self._sliced(op.layer).reduce_slice(self.store.grads[op.layer], task.rank,
                                                self._received(task, "grad-slice", buffers),
                                                in_place=op.layer in self.store.shared)

    def _update_slice(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        """The update of rank ``task.rank``'s slice of the weights and momentum only,
        with the summed gradient slice its reduce task left."""
        op, rank = task.op, task.rank
        bounds = self._sliced(op.layer).bounds
        weights, momentum = ({k: a.reshape(-1)[slice(*bounds(a.size, rank))]
                              for k, a in arrays[op.layer][op.replica].items()}
                             for arrays in (self.store.weights, self.store.momentum))
        self._apply_update(op, buffers, weights, momentum,
                           buffers.reduced.pop((op.layer, op.pass_index, rank)))

    def _gather(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        """Copy the slices the other ranks updated into this rank's weights (nothing to
        copy where the replicas share one copy), and release this rank's gradients."""
        op = task.op
        if op.layer not in self.store.shared:
            self._sliced(op.layer).gather_slices(self.store.weights[op.layer], task.rank,
                                                 self._received(task, "weight-slice", buffers))
        self.store.grads[op.layer][task.rank].clear()  # every rank's reduce has read it

    def _average_slice(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        """Local SGD's averaging of slice ``task.rank`` of the layer's weights over the
        replicas (:meth:`~convnet.runtime.devices.collectives.ChunkedAllReduce.average_slice`)."""
        op = task.op
        self._sliced(op.layer).average_slice(self.store.weights[op.layer], task.rank,
                                             self._received(task, "avg-slice", buffers))

    def _constrain_task(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        self.constrain(task.op.layer, task.op.replica)

    def constrain(self, layer: str, replica: int) -> None:
        """cuda-convnet2's ``wball``: after an update, every filter or output unit of
        one replica's weights back to norm ``rule.ball``.  Every replica projects the
        same weights (after all gathers, with a sharded update) and so stays bitwise
        equal to the others.  The projection is a new array, so a slice of the old one
        still being sent to another process is not changed under it."""
        weights = self.store.weights[layer][replica]
        for key, rule in self.store.rules[layer].items():
            if rule.ball:
                weights[key] = ball_projection(weights[key], rule.ball, rule.unit_axis)

    def _received(self, task: Task, what: str, buffers: _StepBuffers) -> dict:
        """replica -> the slices other processes sent for this reduce or gather task
        (one from every replica on another rank, filed by
        :func:`convnet.runtime.step.transfers.received_key`)."""
        op, rank_of = task.op, self.cluster.rank_of
        return {q: buffers.received.pop((what, op.layer, op.pass_index, task.rank, q))
                for q, d in enumerate(self.plan.layers[op.layer].devices)
                if rank_of(d) != rank_of(task.device)}

    def _send(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        self.transfers.send(task, buffers)

    def _recv(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        self.transfers.recv(task, buffers)

    def _apply_update(self, op: Update, buffers: _StepBuffers, weights: dict, momentum: dict,
                      grads: dict) -> None:
        """Update ``weights`` and ``momentum`` (arrays or slices of them) of ``op``'s
        layer from ``grads``, summed over the cases of the passes since the last update
        (under local SGD: of the shards of ``op``'s replica in those passes)."""
        placement = self.plan.layers[op.layer]
        u = placement.update_period
        first = (op.pass_index - u + 1) * self.plan.rmin
        last = (op.pass_index + 1) * self.plan.rmin
        if op.layer not in self.own_updates:
            num_cases = buffers.bounds[last - 1][1] - buffers.bounds[first][0]
        else:
            num_cases = sum(buffers.bounds[s][1] - buffers.bounds[s][0]
                            for s in range(first, last)
                            if self.plan.producer_of(op.layer, s)[0] == op.replica)
        rules = self.store.rules[op.layer]
        xp = self.devices[op.device].xp
        for k, grad in grads.items():
            if self.check_finite and not bool(xp.isfinite(grad.sum())):
                raise non_finite_gradient_error(op.layer, k, op.device, self.step_count)
            self.optimizer.update(xp, weights[k], momentum[k], grad, rules[k],
                                  buffers.progress, num_cases)
        grads.clear()

