"""The operations of one minibatch, in one global order, with their dependencies.

:class:`Scheduler` turns a placed :class:`~convnet.plan.ops.Plan` (its layers, shards,
passes and micro-batches, from :mod:`convnet.plan.planner`) into the operation list
of :mod:`convnet.plan.ops`: a load or copy wherever a layer reads an activation its
device lacks, a gradient copy wherever a gradient crosses devices, the all-reduce
and updates where each layer's update period ends, and before the forward and the
backward calls of a layer that normalises over all its replicas' cases (bnorm's
``stats=global``) the :class:`~convnet.plan.ops.BatchStats` that combines their
statistics.  Every operation lists the earlier operations that wrote what it reads.
"""

from __future__ import annotations

from collections import defaultdict

from convnet.config.model import LayerDef, NetConfig
from convnet.plan.ops import (FLOAT_BYTES, STATISTICS_BYTES, AllReduce, Backward, BatchStats,
                              Copy, Forward, GradCopy, LayerPlacement, Load, Op, Plan, Update)
from convnet.plan.schedules import item_ticks


def layer_stages(net: NetConfig, plan: Plan) -> dict[str, int]:
    """Each placed non-data layer's pipeline stage: the most device changes (a layer
    on another device list than its input) on a path from the data to it."""
    devices = {name: placement.devices for name, placement in plan.layers.items()}
    stages: dict[str, int] = {}
    for ldef in net:
        if ldef.is_data or ldef.name not in plan.layers:
            continue
        stages[ldef.name] = max((stages[i] + (devices[i] != devices[ldef.name])
                                 for i in ldef.inputs if i in stages), default=0)
    return stages


class Scheduler:
    """Emits the operations of one minibatch and the dependencies between them.

    Within each pass the operations follow the plan's pipeline schedule
    (:mod:`convnet.plan.schedules`) in clock ticks, where a layer's stage counts
    the device changes on the longest path from the data to it.  Under fill-drain
    (GPipe) a layer's forward of micro-batch m comes at tick m + its stage, all
    forwards first, then the backward passes, in ticks m + (last stage - stage);
    under 1F1B each stage alternates forwards and backwards after a warm-up.  A
    layer's update comes after its last micro-batch's backward.  Within a tick
    the forwards come first, in net order, then the backwards in reverse net
    order; the items of one tick never need each other, so the list stays a
    dependency order.  A device's worker runs its operations in list order, so a
    stage forwards micro-batch m + 1 while the next stage forwards m, also where
    the net comes back to an earlier device (docs/PIPELINE.md).  With one
    micro-batch nothing can overlap and every stage counts as 0: the plain
    forward-then-backward walk in net order.
    """

    def __init__(self, net: NetConfig, plan: Plan):
        self.net = net
        self.plan = plan
        self.ops: list[Op] = []
        self.writers: dict[tuple, list[int]] = defaultdict(list)
        self.present: dict[tuple, int] = {}  # (layer, shard, device) -> op that put it there

    def build(self) -> list[Op]:
        order = [l for l in self.net if not l.is_data and l.name in self.plan.layers]
        stages = layer_stages(self.net, self.plan) if self.plan.micro_batches > 1 else \
            {l.name: 0 for l in order}
        ticks = item_ticks(self.plan.schedule, max(stages.values(), default=0) + 1,
                           self.plan.micro_batches)
        position = {l.name: i for i, l in enumerate(order)}
        micros = range(self.plan.micro_batches)
        for p in range(self.plan.num_passes):
            forwards = [(ticks["F", stages[l.name], m], 0, position[l.name], m, l)
                        for m in micros for l in order
                        if p % self.plan.layers[l.name].period == 0]
            backwards = [(ticks["B", stages[l.name], m], 1, -position[l.name], m, l)
                         for m in micros for l in order
                         if self.plan.layers[l.name].needs_backward
                         and (p + 1) % self.plan.layers[l.name].period == 0]
            for _, kind, _, m, ldef in sorted(forwards + backwards, key=lambda o: o[:3]):
                (self._backward if kind else self._forward)(ldef, p, m)
        return self.ops

    def _shard_bytes(self, layer: str) -> int:
        """The bytes of one piece of ``layer``'s output (the largest, if they differ)."""
        return self.net[layer].outputs * self.plan.piece_size * FLOAT_BYTES

    def _emit(self, cls, reads, writes, **fields) -> int:
        deps = sorted({w for key in reads for w in self.writers.get(key, ())})
        index = len(self.ops)
        self.ops.append(cls(index=index, deps=tuple(deps), **fields))
        for key in writes:
            self.writers[key].append(index)
        return index

    def _bring(self, layer: str, shard: int, device: int, p: int) -> None:
        """Make ``layer``'s activation of ``shard`` present on ``device``."""
        if (layer, shard, device) in self.present:
            return
        key = ("act", layer, shard, device)
        if self.net[layer].is_data:
            index = self._emit(Load, (), (key,), pass_index=p, layer=layer, shard=shard,
                               device=device, nbytes=self._shard_bytes(layer))
        else:
            _, src = self.plan.producer_of(layer, shard)
            index = self._emit(Copy, (("act", layer, shard, src),), (key,), pass_index=p,
                               layer=layer, shard=shard, src=src, dst=device,
                               nbytes=self._shard_bytes(layer))
        self.present[(layer, shard, device)] = index

    def _pieces(self, placement: LayerPlacement, p: int, micro: int) -> list[int]:
        """The piece each replica of ``placement`` computes in the activation from pass
        ``p`` (its first pass), micro-batch ``micro``."""
        return [self.plan.piece(placement.shard(p, replica, self.plan.rmin), micro)
                for replica in range(placement.replicas)]

    def _statistics(self, ldef: LayerDef, placement: LayerPlacement, pieces: list[int],
                    p: int, phase: str, reads: list) -> list:
        """Emit the :class:`BatchStats` of ``phase`` when ``ldef`` normalises over its
        replicas' cases (after ``reads``, what each replica's statistics read); the keys
        its forward or backward calls then read too."""
        size = ldef.statistics_size
        if not size or placement.replicas < 2:
            return []  # one replica's own statistics are those of all
        keys = [("stats", ldef.name, phase, s, d) for s, d in zip(pieces, placement.devices)]
        self._emit(BatchStats, reads, keys, pass_index=p, layer=ldef.name,
                   replica_devices=placement.devices, pieces=tuple(pieces), phase=phase,
                   nbytes=size * STATISTICS_BYTES)
        return keys

    def _forward(self, ldef: LayerDef, p: int, micro: int) -> None:
        placement = self.plan.layers[ldef.name]
        pieces = self._pieces(placement, p, micro)
        if ldef.statistics_size and placement.replicas > 1:  # every input first: statistics
            for shard, device in zip(pieces, placement.devices):
                for inp in ldef.inputs:
                    self._bring(inp, shard, device, p)
        stats = self._statistics(
            ldef, placement, pieces, p, "forward",
            [("act", i, s, d) for s, d in zip(pieces, placement.devices) for i in ldef.inputs])
        for replica, (shard, device) in enumerate(zip(pieces, placement.devices)):
            for inp in ldef.inputs:
                self._bring(inp, shard, device, p)
            reads = [("act", i, shard, device) for i in ldef.inputs]
            reads.append(("w", ldef.name, replica))
            reads += stats[replica:replica + 1]
            self._emit(Forward, reads, [("act", ldef.name, shard, device)], pass_index=p,
                       layer=ldef.name, replica=replica, shard=shard, device=device)
            self.present[(ldef.name, shard, device)] = len(self.ops) - 1

    def _backward(self, ldef: LayerDef, p: int, micro: int) -> None:
        placement = self.plan.layers[ldef.name]
        start = p - placement.period + 1
        pieces = self._pieces(placement, start, micro)

        def own_reads(replica: int, shard: int, device: int) -> list:
            return [("grad", ldef.name, shard, device), ("act", ldef.name, shard, device),
                    ("w", ldef.name, replica)] + [("act", i, shard, device) for i in ldef.inputs]

        stats = self._statistics(ldef, placement, pieces, p, "backward", [
            key for r, (s, d) in enumerate(zip(pieces, placement.devices))
            for key in own_reads(r, s, d)])
        for replica, (shard, device) in enumerate(zip(pieces, placement.devices)):
            reads = own_reads(replica, shard, device) + stats[replica:replica + 1]
            writes = [("wgrad", ldef.name, replica)] if placement.learns else []
            pulls = []
            for inp, wanted in zip(ldef.inputs, placement.input_grads):
                if not wanted or any(inp == pulled for pulled, _ in pulls):
                    continue  # an input listed twice still gets one pulled gradient
                _, src_device = self.plan.producer_of(inp, shard)
                if src_device == device:
                    writes.append(("grad", inp, shard, device))
                else:
                    writes.append(("gout", ldef.name, inp, shard, device))
                    pulls.append((inp, src_device))
            self._emit(Backward, reads, writes, pass_index=p, layer=ldef.name, replica=replica,
                       shard=shard, device=device)
            for inp, dst in pulls:
                self._emit(GradCopy, [("gout", ldef.name, inp, shard, device)],
                           [("grad", inp, shard, dst)], pass_index=p, layer=inp,
                           consumer=ldef.name, shard=shard, src=device, dst=dst,
                           nbytes=self._shard_bytes(inp))
        last_micro = micro == self.plan.micro_batches - 1
        if placement.learns and last_micro and (p + 1) % placement.update_period == 0:
            self._update(ldef, placement, p)

    def _update(self, ldef: LayerDef, placement: LayerPlacement, p: int) -> None:
        wgrads = [("wgrad", ldef.name, r) for r in range(placement.replicas)]
        if placement.replicas > 1:
            self._emit(AllReduce, wgrads, wgrads, pass_index=p, layer=ldef.name,
                       replica_devices=placement.devices,
                       nbytes=self.net[ldef.name].learned_count * FLOAT_BYTES)
        scale = placement.update_period / self.plan.num_passes
        for replica, device in enumerate(placement.devices):
            self._emit(Update, [("wgrad", ldef.name, replica)],
                       [("w", ldef.name, replica), ("wgrad", ldef.name, replica)],
                       pass_index=p, layer=ldef.name, replica=replica, device=device,
                       num_cases_scale=scale)
