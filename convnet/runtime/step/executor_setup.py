"""The executor's set-up: everything it builds once from the net, the plan and the devices.

:class:`ExecutorSetup` is the part of :class:`~convnet.runtime.step.executor.Executor`
that runs before any step: it checks the run's modes, builds the layers, one
collective per replica set (NCCL communicators must be made by one thread,
before the workers use them), the :class:`~convnet.runtime.step.weights.WeightStore`
(with the layers whose replicas share one copy), the asynchronous exchange of
increments, the transfers to other processes, the task lists (this process's
share of them, :mod:`convnet.runtime.step.rank_tasks`), the task action table
and the device workers.  It also answers which tasks the next training step
runs (local SGD's averaging steps change them).  Keeping it apart from the
running of tasks (:mod:`convnet.runtime.step.executor`,
:mod:`convnet.runtime.step.task_actions`) leaves each side readable alone: what
the executor holds, and what a step does with it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from convnet.config.model import NetConfig
from convnet.errors import DeviceError
from convnet.plan.ops import AllReduce, Copy, Forward, Load, Plan, Update
from convnet.runtime.processes.cluster import Cluster, single_process
from convnet.runtime.devices.collectives import ChunkedAllReduce, make_all_reduce
from convnet.runtime.processes.increment_exchange import IncrementExchange
from convnet.runtime.step.activation_frees import ActivationReaders
from convnet.runtime.step.batch_check import labels_checked_on_host
from convnet.runtime.step.host_reads import HostReads
from convnet.runtime.step.learning_rules import scale_rates
from convnet.runtime.step.optimizer import MomentumSGD
from convnet.plan.precisions import GPU_ONLY
from convnet.runtime.step.precision import Precision
from convnet.runtime.step.rank_tasks import tasks_for_rank
from convnet.runtime.devices.slowdown import Slowdown
from convnet.runtime.step.records import OpTiming
from convnet.runtime.step.step_graph import StepGraph, capture_blockers
from convnet.runtime.step.step_graph import requested as step_graph_requested
from convnet.runtime.step.tasks import ReplicaSync, Task, local_periods, make_tasks
from convnet.runtime.step.transfers import Transfers
from convnet.runtime.step.uploads import Uploads
from convnet.runtime.step.weights import WeightStore, shared_weight_layers
from convnet.runtime.step.workers import DeviceWorkers
from convnet.layers import build_layer

FORWARD_OPS = (Load, Copy, Forward)


class ExecutorSetup:
    """What an :class:`~convnet.runtime.step.executor.Executor` holds across steps
    (its arguments are the executor's); the table of task actions comes from
    :meth:`convnet.runtime.step.task_actions.TaskActions.action_methods`."""

    def __init__(self, net: NetConfig, plan: Plan, devices: list, seed: int = 0,
                 parallel: bool = True, check_finite: bool = True,
                 cluster: Cluster | None = None, local_sgd: int | None = None,
                 slowdown: Slowdown | None = None,
                 async_staleness: int | None = None, exchange_delay=None,
                 precision: str = "fp32"):
        if len(devices) != plan.num_devices:
            raise ValueError("one device per logical index of the plan is needed")
        if local_sgd is not None and local_sgd < 1:
            raise ValueError(f"local SGD averages every K >= 1 steps, not {local_sgd}")
        if local_sgd is not None and async_staleness is not None:
            raise ValueError("local SGD and the asynchronous exchange exclude each other")
        if async_staleness is not None and any(l.params.get("sync") for l in net):
            raise ValueError("the asynchronous exchange runs every replicated layer apart: "
                             "no layer may set its own sync= mode")
        self.precision = Precision(precision)
        if precision in GPU_ONLY and any(d.kind == "cpu" for d in devices):
            raise ValueError(f"--precision {precision} computes on GPU tensor cores; CPU "
                             f"devices have none")
        if self.precision.loss_scale is not None and (async_staleness is not None
                                                      or local_sgd is not None):
            raise ValueError(f"--precision {precision} skips the steps whose gradients "
                             f"overflow, which replicas that update apart cannot agree on")
        if any(d.kind == "cuda" for d in devices):
            from convnet.kernels.cuda import cudnn_conv
            from convnet.kernels.cuda.precision import use_tf32

            use_tf32(precision == "tf32")  # process-wide: cuBLAS's compute type
            if cudnn_conv.requested():
                try:
                    cudnn_conv.frontend()
                except ImportError as error:
                    raise DeviceError(f"{cudnn_conv.ENV}=1 computes the conv layers with "
                                      f"NVIDIA's cuDNN frontend, which does not import "
                                      f"(pip install -e '.[gpu]'): {error}") from None
        self.net = net
        self.plan = plan
        self.devices = devices
        self.uploads = Uploads(devices)  # the minibatch's columns onto the devices
        self.cluster = cluster if cluster is not None else single_process(len(devices))
        self.slowdown = slowdown
        self.seed = seed
        self.step_count = 0
        self._backup = None  # --precision fp16: the weights before each step (StepBackup)
        self.check_finite = check_finite
        self.layers = {name: build_layer(net[name]) for name, p in plan.layers.items()
                       if not net[name].is_data}
        for name in labels_checked_on_host(net):  # batch_check.py, before the upload
            self.layers[name].labels_checked = True
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
        self.optimizer = MomentumSGD()
        self.reads = HostReads()  # every read of a device value, counted
        self.transfers = Transfers(self.cluster.comm, net, devices, self.store, self._collective,
                                   self.reads)
        # Training steps' task lists by what they do with each replicated layer (made
        # when a step first needs one: local layers with different K average at
        # different steps).
        self._tasks_by_sync: dict[tuple, list[Task]] = {}
        # ... and who reads each activation in them (convnet.runtime.step.activation_frees)
        self._readers_by_sync: dict[tuple, ActivationReaders] = {}
        self.train_tasks()  # the first step's, so that a plan it cannot run fails here
        self._eval_tasks = self._rank_tasks(make_tasks(
            [op for op in plan.ops if isinstance(op, FORWARD_OPS)], self._sharded))
        self._actions = self.action_methods()
        # With several processes a failed worker ends the run (the caller aborts every
        # process), so the others, maybe blocked in a receive, are not waited for.
        self.workers = (DeviceWorkers(devices, wait_after_error=self.cluster.size == 1)
                        if parallel else None)
        self.timings: list[OpTiming] | None = None
        #: Where set, a function giving the seconds the calling thread has waited for a
        #: core, runnable, so far: each timing then says how long its task waited so
        #: (--simulate's profile takes that out: convnet.simulate.run_queue).
        self.core_waits: Callable[[], float] | None = None
        self.memory = None  # a runtime.step.memory.MemoryMeter, sampled after every task when set
        # CONVNET_CUDA_GRAPH=1: training steps replayed as one captured CUDA graph
        self.step_graph = (StepGraph(self) if step_graph_requested()
                           and not capture_blockers(self) else None)

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

    def _sync_key(self) -> tuple:
        return tuple(sorted((layer, sync.value) for layer, sync in self.replica_syncs().items()))

    def train_tasks(self) -> list[Task]:
        """The tasks of the next training step (this process's share)."""
        key = self._sync_key()
        tasks = self._tasks_by_sync.get(key)
        if tasks is None:
            tasks = self._tasks_by_sync[key] = self._rank_tasks(
                make_tasks(self.plan.ops, self._sharded, self._constrained,
                           self.replica_syncs()))
        return tasks

    def train_readers(self) -> ActivationReaders:
        """Who reads each activation in the next training step's tasks (what the step
        frees its activations by)."""
        key = self._sync_key()
        readers = self._readers_by_sync.get(key)
        if readers is None:
            readers = self._readers_by_sync[key] = ActivationReaders(self.train_tasks(), self.net)
        return readers
