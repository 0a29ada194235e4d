"""The executor's task actions: the method that carries out each kind of task.

A task (:mod:`convnet.runtime.step.tasks`) names its :class:`TaskAction`; the
step's walk (:meth:`convnet.runtime.step.executor.Executor.step`, sequential or on
the workers of :mod:`convnet.runtime.step.workers`) looks the action up in the
table :meth:`TaskActions.action_methods` gives and calls the method with the
task, the step's :class:`~convnet.runtime.step.records.StepBuffers` and the
calling worker's device.  The methods are the arithmetic of a step: load a
shard, copy, forward (with the cost sums and their finite check), backward,
pull a gradient, the statistics a layer combines over its replicas (bnorm's
``stats=global``), the all-reduce and the parts of a sharded one, the update
(:class:`~convnet.runtime.step.optimizer.MomentumSGD`, gated by the gradients'
finite check), ``wball``, local SGD's averaging, the increments of the
asynchronous exchange, and the transfers to and from other processes.  They
live apart from the executor's set-up (:mod:`convnet.runtime.step.executor_setup`),
which builds what they read, and from the walk that orders them, so that each
can be read by itself (tests reach the table as ``Executor._actions``).

No action reads a device value on the host: the cost sums and the finite checks
stay on the device in the step's :class:`~convnet.runtime.step.device_results.StepResults`,
which each device's worker fetches once, after its last task.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from convnet.plan.ops import Update
from convnet.runtime.step.device_results import FailedCheck
from convnet.runtime.step.records import StepBuffers
from convnet.runtime.step.tasks import Task, TaskAction
from convnet.runtime.step.transfers import accumulate
from convnet.kernels.constraints import ball_projection
from convnet.layers.base import Context, ReducedStatistics

#: The method of :class:`TaskActions` that carries out each task action.
ACTION_METHODS = {
    TaskAction.LOAD: "_load",
    TaskAction.COPY: "_copy",
    TaskAction.FORWARD: "_forward",
    TaskAction.BACKWARD: "_backward",
    TaskAction.GRAD_COPY: "_grad_copy",
    TaskAction.ALL_REDUCE: "_all_reduce",
    TaskAction.UPDATE: "_update",
    TaskAction.REDUCE_SLICE: "_reduce_slice",
    TaskAction.UPDATE_SLICE: "_update_slice",
    TaskAction.GATHER: "_gather",
    TaskAction.CONSTRAIN: "_constrain_task",
    TaskAction.AVERAGE_SLICE: "_average_slice",
    TaskAction.SEND: "_send",
    TaskAction.RECV: "_recv",
    TaskAction.SEND_SLICE: "_send",
    TaskAction.RECV_SLICE: "_recv",
    TaskAction.FORWARD_STATS: "_own_statistics",
    TaskAction.BACKWARD_STATS: "_own_statistics",
    TaskAction.STATS_REDUCE: "_combine_statistics",
}


class TaskActions:
    """The :class:`~convnet.runtime.step.executor.Executor`'s part that runs single tasks.

    It reads what :class:`~convnet.runtime.step.executor_setup.ExecutorSetup` builds
    (``net``, ``plan``, ``devices``, ``layers``, ``store``, ``collectives``,
    ``workers``, ``exchange``, ``transfers``, ``optimizer``, ``cluster``,
    ``own_updates``, ``_sliced``, ``precision``, ``uploads``) and the step's count and
    ``check_finite``.
    Each method runs one task: (task, the step's buffers, the calling worker's
    device or None for all of the task's devices).
    """

    def action_methods(self) -> dict[TaskAction, Callable[[Task, StepBuffers, int | None], None]]:
        """Task action -> the bound method that carries it out."""
        return {action: getattr(self, name) for action, name in ACTION_METHODS.items()}

    def _ctx(self, buffers: StepBuffers, shard: int, layer: str | None = None,
             phase: str | None = None) -> Context:
        """The context of a call on piece ``shard``; for ``layer``'s ``phase``, with the
        statistics its replicas combined for it (a BatchStats operation) if any."""
        ctx = buffers.contexts.get(shard)
        if ctx is None:
            ctx = buffers.contexts[shard] = Context(
                case_offset=buffers.case_offset + buffers.pieces[shard][0], **buffers.ctx_base)
        statistics = buffers.statistics.pop((layer, phase, shard), None)
        return ctx if statistics is None else replace(ctx, statistics=statistics)

    def _load(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        op = task.op
        ldef = self.net[op.layer]
        start, stop = buffers.pieces[op.shard]
        column = self.uploads.to_device(op.device, buffers.batch[ldef.attrs["dataIdx"]],
                                        start, stop)  # stored images made float there
        buffers.acts[(op.layer, op.shard, op.device)] = column.reshape(
            (stop - start,) + tuple(ldef.output_shape))


    def _copy(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        op = task.op
        source = buffers.acts[(op.layer, op.shard, op.src)]
        buffers.acts[(op.layer, op.shard, op.dst)] = self.devices[op.dst].copy_from(source)

    def _forward(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        op = task.op
        ldef = self.net[op.layer]
        layer = self.layers[op.layer]
        if self.exchange is not None and buffers.ctx_base["train"] and not buffers.diagnosing:
            self._add_increments(op.layer, op.replica, self.step_count)
        inputs = [buffers.acts[(i, op.shard, op.device)] for i in ldef.inputs]
        weights = self.store.weights[op.layer][op.replica]
        if self.precision.mixed:
            inputs = self.precision.layer_inputs(ldef, inputs)
            weights = self.precision.layer_weights(ldef, weights)
        ctx = self._ctx(buffers, op.shard, op.layer, "forward")
        output, state = layer.forward(inputs, weights, ctx)
        if self.precision.mixed:  # stored in the layer's dtype (numpy's bfloat16 GEMM widens)
            output = self.precision.stored_output(ldef, output)
        buffers.acts[(op.layer, op.shard, op.device)] = output
        buffers.states[(op.layer, op.shard)] = state
        if ldef.is_cost and buffers.results is not None:
            sums = layer.metrics(inputs, output)
            buffers.results.add_metrics(op.device, op.layer, op.shard, sums)
            if self.check_finite:
                xp = self.devices[op.device].xp
                finite = xp.isfinite(sums["cost"])
                for x in inputs:
                    finite = finite & xp.isfinite(x).all()
                buffers.results.add_check(op.device, FailedCheck(op.index, op), finite)

    def _backward(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        op = task.op
        ldef = self.net[op.layer]
        placement = self.plan.layers[op.layer]
        key = (op.layer, op.shard, op.device)
        grad_out = None if ldef.is_cost else buffers.grads.pop(key)
        inputs = [buffers.acts[(i, op.shard, op.device)] for i in ldef.inputs]
        weights = self.store.weights[op.layer][op.replica]
        precision = self.precision
        if precision.mixed:
            stored, inputs = inputs, precision.layer_inputs(ldef, inputs)
            weights = precision.layer_weights(ldef, weights)
            grad_out = precision.like(grad_out, buffers.acts[key])
        input_grads, param_grads = self.layers[op.layer].backward(
            grad_out, inputs, buffers.acts[key], weights,
            buffers.states.pop((op.layer, op.shard)),
            self._ctx(buffers, op.shard, op.layer, "backward"), list(placement.input_grads))
        if ldef.is_cost and precision.loss_scale is not None:
            scale = precision.loss_scale.scale
            input_grads = [None if g is None else g * scale for g in input_grads]
        if precision.mixed:
            input_grads = [precision.like(g, x) for g, x in zip(input_grads, stored)]
        for inp, wanted, grad in zip(ldef.inputs, placement.input_grads, input_grads):
            if not wanted:
                continue
            _, src_device = self.plan.producer_of(inp, op.shard)
            if src_device == op.device:
                accumulate(buffers.grads, (inp, op.shard, op.device), grad)
            else:
                accumulate(buffers.gouts, (op.layer, inp, op.shard, op.device), grad)
        if not placement.learns:
            return  # frozen: no update will read its weight gradients
        if precision.mixed:
            param_grads = precision.master_gradients(param_grads)
        accum = self.store.grads[op.layer][op.replica]
        for k, g in param_grads.items():
            accumulate(accum, k, g)

    def _own_statistics(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        """One replica's statistics of its piece, for a BatchStats operation: of its inputs
        before the forward call, of its output's gradient before the backward call."""
        op, rank = task.op, task.rank
        piece, on = op.pieces[rank], op.replica_devices[rank]
        ldef, layer = self.net[op.layer], self.layers[op.layer]
        inputs = [buffers.acts[(i, piece, on)] for i in ldef.inputs]
        if self.precision.mixed:
            inputs = self.precision.layer_inputs(ldef, inputs)
        weights = self.store.weights[op.layer][rank]
        if op.phase == "forward":
            stats = layer.shard_statistics("forward", inputs, weights)
        else:
            key = (op.layer, piece, on)
            grad = buffers.grads[key]
            if self.precision.mixed:  # as the backward call reads it (the carry is its)
                grad = self.precision.like(grad, buffers.acts[key])
            stats = layer.shard_statistics("backward", inputs, weights, grad,
                                           buffers.acts[key], buffers.states[(op.layer, piece)])
        buffers.own_statistics[(op.index, rank)] = stats.values
        if stats.carry is not None:
            buffers.statistics_carry[(op.index, rank)] = stats.carry

    def _combine_statistics(self, task: Task, buffers: StepBuffers,
                            device: int | None) -> None:
        """Every replica's statistics combined in replica order, on this replica's device
        (copied from the others', or received from other processes), for its call."""
        op, rank = task.op, task.rank
        target = self.devices[op.replica_devices[rank]]
        parts = []
        for q, d in enumerate(op.replica_devices):
            if (op.index, q) in buffers.own_statistics:  # this process's
                part = buffers.own_statistics[(op.index, q)]
                parts.append(part if q == rank else target.copy_from(part))
            else:
                parts.append(buffers.received.pop(("stats", op.index, rank, q)))
        layer = self.layers[op.layer]
        counts = [layer.statistics_count(buffers.pieces[p][1] - buffers.pieces[p][0])
                  for p in op.pieces]
        with target.scope():
            combined = layer.combine_statistics(op.phase, parts, counts)
        buffers.statistics[(op.layer, op.phase, op.pieces[rank])] = ReducedStatistics(
            combined, sum(counts), parts[rank],
            buffers.statistics_carry.pop((op.index, rank), None))

    def _grad_copy(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        op = task.op
        grad = buffers.gouts.pop((op.consumer, op.layer, op.shard, op.src))
        accumulate(buffers.grads, (op.layer, op.shard, op.dst),
                   self.devices[op.dst].copy_from(grad))

    def _all_reduce(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
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

    def _update(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
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
        before a forward in ``step`` (then redo ``wball``): before every forward, since
        a layer that updates twice in a step reads the other replicas' first update in
        its second pass, as synchronous SGD does."""
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

    def _reduce_slice(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        op = task.op
        buffers.reduced[(op.layer, op.pass_index, task.rank)] = \
            self._sliced(op.layer).reduce_slice(self.store.grads[op.layer], task.rank,
                                                self._received(task, "grad-slice", buffers),
                                                in_place=op.layer in self.store.shared)

    def _update_slice(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        """The update of rank ``task.rank``'s slice of the weights and momentum only,
        with the summed gradient slice its reduce task left."""
        op, rank = task.op, task.rank
        bounds = self._sliced(op.layer).bounds
        weights, momentum = ({k: a.reshape(-1)[slice(*bounds(a.size, rank))]
                              for k, a in arrays[op.layer][op.replica].items()}
                             for arrays in (self.store.weights, self.store.momentum))
        self._apply_update(op, buffers, weights, momentum,
                           buffers.reduced.pop((op.layer, op.pass_index, rank)))

    def _gather(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        """Copy the slices the other ranks updated into this rank's weights (nothing to
        copy where the replicas share one copy; only the arrays that learn, since an
        update changes nothing else), and release this rank's gradients."""
        op = task.op
        if op.layer not in self.store.shared:
            self._sliced(op.layer).gather_slices(self.store.weights[op.layer], task.rank,
                                                 self._received(task, "weight-slice", buffers),
                                                 keys=self.store.learned[op.layer])
        self.store.grads[op.layer][task.rank].clear()  # every rank's reduce has read it

    def _average_slice(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        """Local SGD's averaging of slice ``task.rank`` of the layer's weights over the
        replicas (:meth:`~convnet.runtime.devices.collectives.ChunkedAllReduce.average_slice`)."""
        op = task.op
        self._sliced(op.layer).average_slice(self.store.weights[op.layer], task.rank,
                                             self._received(task, "avg-slice", buffers))

    def _constrain_task(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
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

    def _received(self, task: Task, what: str, buffers: StepBuffers) -> dict:
        """replica -> the slices other processes sent for this reduce or gather task
        (one from every replica on another rank, filed by
        :func:`convnet.runtime.step.transfers.received_key`)."""
        op, rank_of = task.op, self.cluster.rank_of
        return {q: buffers.received.pop((what, op.layer, op.pass_index, task.rank, q))
                for q, d in enumerate(self.plan.layers[op.layer].devices)
                if rank_of(d) != rank_of(task.device)}

    def _send(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        self.transfers.send(task, buffers)

    def _recv(self, task: Task, buffers: StepBuffers, device: int | None) -> None:
        self.transfers.recv(task, buffers)

    def _apply_update(self, op: Update, buffers: StepBuffers, weights: dict, momentum: dict,
                      grads: dict) -> None:
        """Update ``weights`` and ``momentum`` (arrays or slices of them) of ``op``'s
        layer from ``grads``, summed over the cases of the passes since the last update
        (under local SGD: of the shards of ``op``'s replica in those passes; under the
        asynchronous exchange each replica's part of the minibatch's update)."""
        placement = self.plan.layers[op.layer]
        u = placement.update_period
        first = (op.pass_index - u + 1) * self.plan.rmin
        last = (op.pass_index + 1) * self.plan.rmin
        if buffers.update_cases is not None:
            num_cases = buffers.update_cases
        elif op.layer not in self.own_updates:
            num_cases = buffers.bounds[last - 1][1] - buffers.bounds[first][0]
        elif self.exchange is not None:
            # The R replicas' updates add up to sync's, whose gradient sums the whole
            # window: with rates divided by R, each divides its own sum by 1/R of the
            # window's cases (not by its own shards', which differ in an uneven tail).
            num_cases = ((buffers.bounds[last - 1][1] - buffers.bounds[first][0])
                         / len(placement.devices))
        else:
            num_cases = sum(buffers.bounds[s][1] - buffers.bounds[s][0]
                            for s in range(first, last)
                            if self.plan.producer_of(op.layer, s)[0] == op.replica)
        if self.precision.loss_scale is not None:  # the gradients are S times the loss's
            num_cases = num_cases * self.precision.loss_scale.scale
        rules = self.store.rules[op.layer]
        xp = self.devices[op.device].xp
        learning = {k: grad for k, grad in grads.items() if not rules[k].frozen}
        ok = (self._gradients_finite(op, learning, buffers)
              if self.check_finite or self.precision.loss_scale is not None else None)
        for k, grad in learning.items():
            self.optimizer.update(xp, weights[k], momentum[k], grad, rules[k],
                                  buffers.progress, num_cases, ok=ok)
        grads.clear()

    def _gradients_finite(self, op: Update, grads: dict, buffers: StepBuffers):
        """The update's finite check, on the device: one flag per weight array for the
        step's results (which name the array of a failure), and their conjunction, which
        gates the update of the whole layer (:mod:`convnet.kernels.update`)."""
        xp = self.devices[op.device].xp
        ok = None
        for k, grad in grads.items():
            finite = xp.isfinite(grad.sum())
            buffers.results.add_check(op.device, FailedCheck(op.index, op, k), finite)
            ok = finite if ok is None else ok & finite
        return ok

