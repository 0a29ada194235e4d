"""Run a plan: one training step or one evaluation of a minibatch.

:class:`Executor` owns the weights, momentum and gradient accumulators of
every replica, and the per-step activation buffers.  It runs the operations
of :mod:`convnet.plan.ops`, as the tasks of :mod:`convnet.runtime.tasks`, either in list
order on the calling thread (``parallel=False``, the reference walk) or on
one worker per logical device (``parallel=True``, :mod:`convnet.runtime.workers`).
Both call the same :meth:`Executor._run` for each task and every buffer is
written by the tasks of one device in list order, so the two walks give
bitwise-identical results.
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from convnet.runtime.collectives import make_all_reduce
from convnet.config.model import NetConfig
from convnet.errors import DataError, TrainingError
from convnet.plan.ops import (AllReduce, Backward, Copy, Forward, GradCopy, Load, Plan, Update,
                          shard_bounds)
from convnet.runtime.tasks import GATHER, REDUCE, UPDATE_SLICE, Task, make_tasks
from convnet.runtime.workers import DeviceWorkers
from layers import build_layer
from layers.base import Context


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
    acts: dict = field(default_factory=dict)
    states: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)
    gouts: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # (cost layer, shard) -> sums over the shard
    collectives: dict = field(default_factory=dict)
    reduced: dict = field(default_factory=dict)  # (layer, pass, rank) -> summed gradient slices
    contexts: dict = field(default_factory=dict)  # shard -> Context (immutable, shared)


FORWARD_KINDS = (Load, Copy, Forward)


class Executor:
    """Train or evaluate ``net`` on ``devices`` following ``plan``.

    Weights start identical on every replica (drawn once per layer from a
    generator seeded by ``seed`` and the layer name, then copied), and stay
    identical because every replica applies the same all-reduced gradient
    (or, with a sharded update, gathers the slices the others updated with it;
    the momentum of replica r is then current on its own slice only, and
    :meth:`state_arrays` assembles it from the owners).
    """

    def __init__(self, net: NetConfig, plan: Plan, devices: list, seed: int = 0,
                 parallel: bool = True, check_finite: bool = True):
        if len(devices) != plan.num_devices:
            raise ValueError("one device per logical index of the plan is needed")
        self.net = net
        self.plan = plan
        self.devices = devices
        self.seed = seed
        self.step_count = 0
        self.check_finite = check_finite
        self.layers = {name: build_layer(net[name]) for name, p in plan.layers.items()
                       if not net[name].is_data}
        self.weights: dict[str, list[dict]] = {}
        self.momentum: dict[str, list[dict]] = {}
        self.wgrads: dict[str, list[dict]] = {}
        self._init_weights()
        self.collectives = {op.replica_devices: make_all_reduce([devices[d] for d in
                                                                 op.replica_devices])
                            for op in plan.ops if isinstance(op, AllReduce)}
        self._train_tasks = make_tasks(plan.ops, self._sharded)
        self._eval_tasks = make_tasks([op for op in plan.ops if isinstance(op, FORWARD_KINDS)],
                                      self._sharded)
        self.workers = DeviceWorkers(devices) if parallel else None
        self.timings: list[OpTiming] | None = None

    # ----------------------------------------------------------------- weights
    def _init_weights(self) -> None:
        for name, layer in self.layers.items():
            rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
            host = layer.init_params(rng)
            devs = self.plan.layers[name].devices
            self.weights[name] = [{k: self.devices[d].to_device(v) for k, v in host.items()}
                                  for d in devs]
            self.momentum[name] = [{k: self.devices[d].xp.zeros_like(v) for k, v in w.items()}
                                   for d, w in zip(devs, self.weights[name])]
            self.wgrads[name] = [{} for _ in devs]

    def _sharded(self, op: AllReduce) -> bool:
        return self.collectives[op.replica_devices].sharded

    def _collective(self, layer: str):
        """The all-reduce of ``layer``'s replicas (one per replica set)."""
        return self.collectives[self.plan.layers[layer].devices]

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Weights and momentum of every layer (replica 0, on the host) for checkpoints."""
        out = {}
        for name in self.weights:
            dev = self.devices[self.plan.layers[name].devices[0]]
            for k, v in self.weights[name][0].items():
                out[f"weights/{name}/{k}"] = dev.to_host(v)
            for k in self.momentum[name][0]:
                out[f"momentum/{name}/{k}"] = self._momentum_on_host(name, k)
        return out

    def _momentum_on_host(self, name: str, key: str) -> np.ndarray:
        """The momentum of ``name``'s weights ``key``: replica 0's, or with a sharded
        update each slice from the replica that owns it."""
        devs = self.plan.layers[name].devices
        first = self.devices[devs[0]].to_host(self.momentum[name][0][key])
        collective = self.collectives.get(devs)
        if collective is None or not collective.sharded:
            return first
        whole = np.array(first)  # to_host may return a view of the device's array
        flat = whole.reshape(-1)
        for owner in range(1, len(devs)):
            lo, hi = collective.bounds(flat.size, owner)
            part = self.devices[devs[owner]].to_host(self.momentum[name][owner][key])
            flat[lo:hi] = part.reshape(-1)[lo:hi]
        return whole

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Put checkpointed weights and momentum onto every replica (shapes must match)."""
        for name in self.weights:
            for group, store in (("weights", self.weights), ("momentum", self.momentum)):
                for replica, d in enumerate(self.plan.layers[name].devices):
                    for k, v in store[name][replica].items():
                        key = f"{group}/{name}/{k}"
                        if key not in arrays:
                            raise DataError(f"checkpoint has no '{key}': it was saved from "
                                            f"another net")
                        if tuple(arrays[key].shape) != tuple(v.shape):
                            raise DataError(f"checkpoint '{key}' has shape "
                                            f"{tuple(arrays[key].shape)}, the net needs "
                                            f"{tuple(v.shape)}")
                        store[name][replica][k] = self.devices[d].to_device(arrays[key])

    # ------------------------------------------------------------------- steps
    def step(self, batch: list[np.ndarray], progress: float = 0.0) -> StepResult:
        """One training step on a minibatch: forward, backward and the updates due."""
        result = self._execute(batch, self._train_tasks, train=True, progress=progress)
        self.step_count += 1
        return result

    def evaluate(self, batch: list[np.ndarray]) -> StepResult:
        """Forward only, in test mode (no dropout), no update."""
        return self._execute(batch, self._eval_tasks, train=False, progress=0.0)

    def features(self, batch: list[np.ndarray], layer: str) -> np.ndarray:
        """The test-mode output of ``layer`` for every case of ``batch``, on the host."""
        buffers = self._run_tasks(batch, self._eval_tasks, train=False, progress=0.0)
        placement = self.plan.layers[layer]
        parts = []
        for shard in range(self.plan.num_shards):
            _, device = self.plan.producer_of(layer, shard)
            parts.append(self.devices[device].to_host(buffers.acts[(layer, shard, device)]))
        return np.concatenate(parts) if placement.devices else np.empty((0,))

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
            self.workers = None
        for collective in self.collectives.values():
            collective.close()
        self.collectives = {}

    def _execute(self, batch, tasks, train: bool, progress: float) -> StepResult:
        start = time.perf_counter()
        buffers = self._run_tasks(batch, tasks, train, progress)
        num_cases = buffers.bounds[-1][1]
        costs: dict[str, dict[str, float]] = {}
        for (layer, _), sums in sorted(buffers.metrics.items()):  # fixed order: shard order
            totals = costs.setdefault(layer, {})
            for k, v in sums.items():
                totals[k] = totals.get(k, 0.0) + v
        costs = {layer: {k: v / num_cases for k, v in sums.items()}
                 for layer, sums in costs.items()}
        return StepResult(num_cases, costs, time.perf_counter() - start)

    def _run_tasks(self, batch, tasks: list[Task], train: bool, progress: float) -> _StepBuffers:
        num_cases = self._check_batch(batch)
        buffers = _StepBuffers(batch=batch, bounds=shard_bounds(num_cases, self.plan.num_shards),
                               ctx_base={"train": train, "seed": self.seed,
                                         "step": self.step_count})
        self._progress = progress
        t0 = time.perf_counter()
        timings = [] if self.timings is not None else None

        def run(task: Task, device: int | None) -> None:
            began = time.perf_counter()
            self._run(task, buffers, device)
            if timings is not None:
                for d in ([device] if device is not None else task.devices):
                    timings.append(OpTiming(d, task.kind, task.layer, began - t0,
                                            time.perf_counter() - t0))

        if self.workers is None:
            for task in tasks:
                self.devices[task.devices[0]].activate()  # the task's GPU and stream (CUDA)
                run(task, None)
        else:
            self.workers.run(tasks, run)
        if timings is not None:
            self.timings = timings
        return buffers

    def _check_batch(self, batch) -> int:
        sizes = set()
        for ldef in self.net:
            if ldef.is_data and ldef.name in self.plan.layers and self.plan.layers[ldef.name].devices:
                idx = ldef.attrs["dataIdx"]
                if idx >= len(batch):
                    raise DataError(f"data layer '{ldef.name}' reads column {idx}, but the data "
                                    f"provider gives {len(batch)} column(s)")
                array = batch[idx]
                want = tuple(ldef.output_shape)
                if tuple(array.shape[1:]) != want and int(np.prod(array.shape[1:])) != math.prod(want):
                    raise DataError(f"data layer '{ldef.name}' expects cases of shape "
                                    f"{'x'.join(map(str, want))}, the data provider gives "
                                    f"{'x'.join(map(str, array.shape[1:]))}")
                sizes.add(array.shape[0])
        if len(sizes) != 1:
            raise DataError(f"data columns have different case counts: {sorted(sizes)}")
        num_cases = sizes.pop()
        if num_cases < self.plan.num_shards:
            raise DataError(f"a minibatch of {num_cases} case(s) cannot be split into "
                            f"{self.plan.num_shards} shards")
        return num_cases

    # -------------------------------------------------------------- operations
    def _ctx(self, buffers: _StepBuffers, shard: int) -> Context:
        ctx = buffers.contexts.get(shard)
        if ctx is None:
            ctx = buffers.contexts[shard] = Context(case_offset=buffers.bounds[shard][0],
                                                    **buffers.ctx_base)
        return ctx

    def _run(self, task: Task, buffers: _StepBuffers, device: int | None) -> None:
        """Carry out ``task``; ``device`` is the calling worker's (None: all of the task's)."""
        op = task.op
        if task.action == REDUCE:
            buffers.reduced[(op.layer, op.pass_index, task.rank)] = \
                self._collective(op.layer).reduce_slice(self.wgrads[op.layer], task.rank)
        elif task.action == UPDATE_SLICE:
            self._update(op, buffers, task.rank)
        elif task.action == GATHER:
            self._collective(op.layer).gather_slices(self.weights[op.layer], task.rank)
            self.wgrads[op.layer][task.rank].clear()  # every rank's reduce has read it
        elif isinstance(op, Load):
            ldef = self.net[op.layer]
            start, stop = buffers.bounds[op.shard]
            column = buffers.batch[ldef.attrs["dataIdx"]][start:stop]
            column = column.reshape((stop - start,) + tuple(ldef.output_shape))
            buffers.acts[(op.layer, op.shard, op.device)] = self.devices[op.device].to_device(column)
        elif isinstance(op, Copy):
            source = buffers.acts[(op.layer, op.shard, op.src)]
            buffers.acts[(op.layer, op.shard, op.dst)] = self.devices[op.dst].copy_from(source)
        elif isinstance(op, Forward):
            self._forward(op, buffers)
        elif isinstance(op, Backward):
            self._backward(op, buffers)
        elif isinstance(op, GradCopy):
            grad = buffers.gouts.pop((op.consumer, op.layer, op.shard, op.src))
            self._accumulate(buffers.grads, (op.layer, op.shard, op.dst),
                             self.devices[op.dst].copy_from(grad))
        elif isinstance(op, AllReduce):
            self._all_reduce(op, buffers, device)
        elif isinstance(op, Update):
            self._update(op, buffers)
        else:
            raise TypeError(f"unknown plan operation {op!r}")

    def _forward(self, op: Forward, buffers: _StepBuffers) -> None:
        ldef = self.net[op.layer]
        layer = self.layers[op.layer]
        inputs = [buffers.acts[(i, op.shard, op.device)] for i in ldef.inputs]
        ctx = self._ctx(buffers, op.shard)
        output, state = layer.forward(inputs, self.weights[op.layer][op.replica], ctx)
        buffers.acts[(op.layer, op.shard, op.device)] = output
        buffers.states[(op.layer, op.shard)] = state
        if ldef.is_cost:
            sums = {k: float(v) for k, v in layer.metrics(inputs, output).items()}
            buffers.metrics[(op.layer, op.shard)] = sums
            if self.check_finite and not (math.isfinite(sums["cost"]) and all(
                    bool(self.devices[op.device].xp.isfinite(x).all()) for x in inputs)):
                raise TrainingError(self._explain_nan(op, buffers))

    def _explain_nan(self, op: Forward, buffers: _StepBuffers) -> str:
        """Name the first layer (in net order) whose output for ``op.shard`` is not finite."""
        for ldef in self.net:
            for (name, shard, device), value in list(buffers.acts.items()):
                if name == ldef.name and shard == op.shard:
                    xp = self.devices[device].xp
                    if bool(xp.isfinite(value).all()):
                        continue
                    if ldef.is_data:
                        return (f"the minibatch holds NaN or inf values: data layer '{name}' "
                                f"(column {ldef.attrs['dataIdx']}, loaded on device {device}) "
                                f"at step {self.step_count}")
                    return (f"non-finite values (NaN or inf) in the output of layer "
                            f"'{name}' on device {device} at step {self.step_count}; "
                            f"cost layer '{op.layer}' cannot be computed")
        return (f"cost layer '{op.layer}' on device {op.device} is not finite at step "
                f"{self.step_count}")

    def _backward(self, op: Backward, buffers: _StepBuffers) -> None:
        ldef = self.net[op.layer]
        placement = self.plan.layers[op.layer]
        key = (op.layer, op.shard, op.device)
        grad_out = None if ldef.is_cost else buffers.grads.pop(key)
        inputs = [buffers.acts[(i, op.shard, op.device)] for i in ldef.inputs]
        input_grads, param_grads = self.layers[op.layer].backward(
            grad_out, inputs, buffers.acts[key], self.weights[op.layer][op.replica],
            buffers.states.pop((op.layer, op.shard)), self._ctx(buffers, op.shard),
            list(placement.input_grads))
        for inp, wanted, grad in zip(ldef.inputs, placement.input_grads, input_grads):
            if not wanted:
                continue
            _, src_device = self.plan.producer_of(inp, op.shard)
            if src_device == op.device:
                self._accumulate(buffers.grads, (inp, op.shard, op.device), grad)
            else:
                self._accumulate(buffers.gouts, (op.layer, inp, op.shard, op.device), grad)
        accum = self.wgrads[op.layer][op.replica]
        for k, g in param_grads.items():
            self._accumulate(accum, k, g)

    @staticmethod
    def _accumulate(store: dict, key, value) -> None:
        """Sum into ``store[key]`` without writing into ``value``, which a layer may
        have handed out as a view shared with another gradient."""
        store[key] = store[key] + value if key in store else value

    def _all_reduce(self, op: AllReduce, buffers: _StepBuffers, rank_device: int | None) -> None:
        """Sum the replicas' gradients with the collective chosen for these devices;
        the parallel walk does its own rank and meets the others at a barrier."""
        devs = op.replica_devices
        scratch = buffers.collectives.setdefault(op.index, {})
        if rank_device is None:
            self.collectives[devs](self.wgrads[op.layer], None, None, scratch)
        else:
            self.collectives[devs](self.wgrads[op.layer], [devs.index(rank_device)],
                                   lambda: self.workers.barrier(op.index, len(devs)), scratch)

    def _update(self, op: Update, buffers: _StepBuffers, rank: int | None = None) -> None:
        """SPEC 4: inc = mom * inc - eps * (grad / numCases + wc * W); W += inc.

        With ``rank`` (a sharded update) only that rank's slice of the weights and
        momentum, with the summed gradient slice its reduce task left."""
        ldef = self.net[op.layer]
        placement = self.plan.layers[op.layer]
        u = placement.update_period
        first = (op.pass_index - u + 1) * self.plan.rmin
        last = (op.pass_index + 1) * self.plan.rmin
        num_cases = buffers.bounds[last - 1][1] - buffers.bounds[first][0]
        weights = self.weights[op.layer][op.replica]
        momentum = self.momentum[op.layer][op.replica]
        if rank is None:
            grads = self.wgrads[op.layer][op.replica]
        else:
            grads = buffers.reduced.pop((op.layer, op.pass_index, rank))
            bounds = self._collective(op.layer).bounds
            weights, momentum = ({k: a.reshape(-1)[slice(*bounds(a.size, rank))]
                                  for k, a in arrays.items()} for arrays in (weights, momentum))
        params = ldef.params
        xp = self.devices[op.device].xp
        for k, grad in grads.items():
            if self.check_finite and not bool(xp.isfinite(grad.sum())):
                raise TrainingError(f"non-finite gradient for weights '{k}' of layer "
                                    f"'{op.layer}' on device {op.device} at step "
                                    f"{self.step_count}")
            if k == "b":
                eps, mom, wc = params["epsB"].value(self._progress), params["momB"], 0.0
            else:
                i = int(k[1:])
                eps, mom, wc = params["epsW"][i].value(self._progress), params["momW"][i], \
                    params["wc"][i]
            _momentum_step(xp, weights[k], momentum[k], grad, eps, mom, wc, num_cases)
        grads.clear()


UPDATE_BLOCK = 1 << 17  # elements per block of the CPU update (stays in the L2 cache)


def _momentum_step(xp, w, inc, grad, eps, mom, wc, num_cases) -> None:
    """``inc = mom * inc - eps * (grad / num_cases + wc * w); w += inc``, in place.

    On the CPU the passes run block by block over the flattened arrays, so each
    block stays in the cache instead of five trips through memory; every element
    goes through the same operations in the same order as the whole-array form,
    which the other cases use.
    """
    if w.size == 0:
        return
    same = grad.dtype == w.dtype == inc.dtype
    if xp is not np or not (same and w.flags.c_contiguous and inc.flags.c_contiguous):
        inc *= mom
        step = grad / num_cases
        if wc:
            step += wc * w
        inc -= eps * step
        w += inc
        return
    wf, incf, gf = w.reshape(-1), inc.reshape(-1), grad.reshape(-1)
    size = wf.size
    block = min(size, UPDATE_BLOCK)
    step = np.empty(block, dtype=w.dtype)
    decay = np.empty(block, dtype=w.dtype) if wc else None
    for lo in range(0, size, block):
        hi = min(size, lo + block)
        i, s = incf[lo:hi], step[:hi - lo]
        i *= mom
        np.divide(gf[lo:hi], num_cases, out=s)
        if wc:
            t = decay[:hi - lo]
            np.multiply(wf[lo:hi], wc, out=t)
            s += t
        np.multiply(s, eps, out=s)
        i -= s
        wf[lo:hi] += i

