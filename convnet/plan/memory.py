"""The plan's estimate of the memory each device holds at its peak during a step.

The executor keeps, per device: the weights and momentum of its replicas (always);
each replica's weight-gradient accumulator from its first backward call of the step
to its update; every activation (loaded, computed or copied in) until its last
reader in the step has run (the forwards and backward calls that read it, the copies
from it: :mod:`convnet.runtime.step.activation_frees`; one that nothing reads, such as a
cost layer's output, until the step ends);
what each layer's forward call leaves for its backward call (the layer type's
:mod:`memory rule <convnet.config.layer_types.memory_rules>`: im2col columns, padded inputs,
masks, norm denominators) until that backward call; the gradient of each activation
from the first backward call that adds to it until its layer's backward call
consumes it (or, for an input on another device, until that device pulls it); the
temporaries of each replica's statistics of a ``BatchStats`` operation (those of the
layer's forward or backward call); and during an all-reduce, the replica's summed slice of the weight gradient until its
update (counted with the weight gradients).  While a forward or backward call runs
it also holds its *temporaries* (the memory rule's ``forward_temp_per_case`` and
``backward_temp``: Winograd's tile products, column gradients, the neuron's gradient),
counted on top of what is held once the call has made its outputs and before it frees
its inputs' kept state.
A replicated layer's all-reduce and update wait for the other replicas, and the
device's worker goes on with the backward pass below meanwhile
(:mod:`convnet.runtime.step.workers`): so its gradient and summed slice are counted
until the device's next backward call of a layer with weights has run (when the
device is not behind the others they are freed sooner, and the estimate is high by
that layer's gradient).

:func:`memory_peaks` walks the plan's operations in order, adds and frees those
buffers as the executor does, and keeps each device's high-water mark with what it
held then.  It is the estimate ``--print-plan`` reports and ``--simulate`` predicts
peak memory from.  Its peak between operations (``between_ops_bytes``, without the
temporaries) is what the executor's own accounting (:mod:`convnet.runtime.step.memory`)
measures, and tests/plan/test_memory_estimate.py holds the two together; the whole
peak, temporaries included, is held to the process's measured peak by
tests/app/test_memory_measured.py.  What the process holds besides the devices (the
data batches in flight, the provider's own arrays) is estimated by
:mod:`convnet.data.memory`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from convnet.config.layer_types.memory_rules import CPU_KERNELS, KernelMemory, in_precision
from convnet.config.model import NetConfig
from convnet.plan.ops import (FLOAT_BYTES, AllReduce, Backward, BatchStats, Copy, Forward,
                              GradCopy, Load, Plan, Update)
from convnet.plan.precisions import element_bytes

#: What the estimate separates, in report order.
PARAMETERS = ("weights", "momentum", "weight_grads")
STEP = ("activations", "kept_for_backward", "gradients")
#: What exists only while one forward or backward call runs (see the module docstring).
TEMPORARIES = "temporaries"


@dataclass
class MemoryPeak:
    """One device's estimated high-water mark and what it held then (bytes)."""

    device: int
    peak_bytes: int = 0
    at_peak: dict = field(default_factory=dict)
    #: the peak between operations (no call running: no temporaries) and what was held then
    between_ops_bytes: int = 0
    between_ops_at_peak: dict = field(default_factory=dict)

    @property
    def activation_bytes(self) -> int:
        """What the step itself holds at the peak: activations, kept state, gradients,
        and the temporaries of the call running then."""
        return sum(self.at_peak.get(k, 0) for k in STEP + (TEMPORARIES,))


#: ``record(device, key, nbytes)`` when a buffer is made, ``record(device, key, -nbytes)``
#: when it is dropped: the walk's buffers in the order the executor makes and drops them
#: (what a model of an allocator replays: :mod:`convnet.runtime.devices.cuda_pool`).
Recorder = Callable[[int, object, int], None]


class _Device:
    """What one device holds, with running totals per category: the walk asks for the
    totals after every operation, and summing all held buffers each time made the
    estimate quadratic in the layer count."""

    def __init__(self, index: int = 0, record: Recorder | None = None):
        self.held: dict[str, dict] = {k: {} for k in PARAMETERS + STEP}
        self.bytes: dict[str, int] = {k: 0 for k in PARAMETERS + STEP}
        self.deferred: list = []  # (category, key) freed after the next backward call
        self.index, self.record = index, record

    def add(self, category: str, key, nbytes: int) -> None:
        if key not in self.held[category]:
            self.held[category][key] = nbytes
            self.bytes[category] += nbytes
            if self.record is not None:
                self.record(self.index, (category, key), nbytes)

    def free(self, category: str, key) -> None:
        nbytes = self.held[category].pop(key, 0)
        self.bytes[category] -= nbytes
        if self.record is not None and nbytes:
            self.record(self.index, (category, key), -nbytes)

    def step_ended(self) -> None:
        """Drop everything but the weights and momentum (the step's buffers go)."""
        for category in ("weight_grads",) + STEP:
            for key in list(self.held[category]):
                self.free(category, key)

    def totals(self) -> dict:
        return dict(self.bytes)


def memory_peaks(plan: Plan, net: NetConfig, shared: frozenset[str] = frozenset(),
                 kernels: KernelMemory = CPU_KERNELS, precision: str = "fp32",
                 record: Recorder | None = None) -> list[MemoryPeak]:
    """Each device's estimated peak during one training step (see the module docstring).

    The replicas of the layers in ``shared`` hold one copy of the weights and momentum,
    on the first replica's device (what the executor does for synchronous replicas on
    the CPU devices of one process, see :class:`convnet.runtime.step.weights.WeightStore`).
    ``kernels`` says what the backend's kernels allocate (the CPU's, or
    :data:`~convnet.config.layer_types.memory_rules.CUDA_KERNELS`); under a mixed
    ``precision`` (:mod:`convnet.plan.precisions`) the 16-bit layers' activations,
    gradients, kept state and temporaries take 2 bytes an element, each call also holds
    its weights cast (and a backward call its 16-bit weight gradients), and ``fp16``
    keeps a copy of the weights and momentum to undo a step that overflows.
    ``record``, if given, hears of every buffer as it is made and dropped, temporaries
    included, and at the end of the step of every one the step leaves."""
    devices = [_Device(d, record) for d in range(plan.num_devices)]
    peaks = [MemoryPeak(d) for d in range(plan.num_devices)]
    size = {name: element_bytes(net[name], precision) if not net[name].is_data else FLOAT_BYTES
            for name in plan.layers}
    shard_bytes = {name: net[name].outputs * plan.piece_size * size[name] for name in plan.layers}
    param_bytes = {name: p.param_count * FLOAT_BYTES for name, p in plan.layers.items()}
    cast_bytes = {name: p.param_count * size[name] if size[name] != FLOAT_BYTES else 0
                  for name, p in plan.layers.items()}
    memory = {name: in_precision(kernels.layer(net[name]), size[name]) for name in plan.layers}
    update_temp = {name: kernels.update_temp(net[name]) for name in plan.layers
                   if param_bytes[name]}
    copies = ("weights", "momentum") + (("weights", "momentum") if precision == "fp16" else ())
    for name, placement in plan.layers.items():
        for replica, d in enumerate(placement.devices):
            if param_bytes[name] and not (replica and name in shared):
                for i, category in enumerate(copies):  # fp16: the second pair, the backup
                    devices[d].add(category, (name, replica, i // 2), param_bytes[name])

    def note(d: int, temporaries: int | None = None) -> None:
        """Take device d's holdings now: between operations (``temporaries`` None) or
        while a call runs that holds ``temporaries`` bytes besides."""
        now = devices[d].totals()
        held = sum(now.values())
        if temporaries and record is not None:
            record(d, (TEMPORARIES,), temporaries)
            record(d, (TEMPORARIES,), -temporaries)
        if temporaries is None and held > peaks[d].between_ops_bytes:
            peaks[d].between_ops_bytes, peaks[d].between_ops_at_peak = held, dict(now)
        now[TEMPORARIES] = temporaries or 0
        if held + now[TEMPORARIES] > peaks[d].peak_bytes:
            peaks[d].peak_bytes, peaks[d].at_peak = held + now[TEMPORARIES], now

    last_reads = _last_readers(plan, net)

    def release(op) -> None:
        """Free the activations ``op`` was the last reader of (again: a no-op)."""
        for layer, shard, d in last_reads.get(op.index, ()):
            devices[d].free("activations", (layer, shard))

    for op in plan.ops:
        if isinstance(op, Load):
            devices[op.device].add("activations", (op.layer, op.shard), op.nbytes)
        elif isinstance(op, Copy):
            devices[op.dst].add("activations", (op.layer, op.shard), shard_bytes[op.layer])
        elif isinstance(op, Forward):
            dev, mem = devices[op.device], memory[op.layer]
            if mem.new_output:
                dev.add("activations", (op.layer, op.shard), shard_bytes[op.layer])
            if mem.kept_per_case or mem.kept_per_call:
                dev.add("kept_for_backward", (op.layer, op.shard),
                        mem.kept_per_case * plan.piece_size + mem.kept_per_call)
            note(op.device, mem.forward_temp_per_case * plan.piece_size + cast_bytes[op.layer])
        elif isinstance(op, Backward):
            dev = devices[op.device]
            ldef, placement = net[op.layer], plan.layers[op.layer]
            for inp, wanted in zip(ldef.inputs, placement.input_grads):
                if not wanted:
                    continue
                source = plan.producer_of(inp, op.shard)[1]
                key = (inp, op.shard) if source == op.device else (op.layer, inp, op.shard)
                dev.add("gradients", key, shard_bytes[inp])
            if param_bytes[op.layer]:
                dev.add("weight_grads", (op.layer, op.replica), param_bytes[op.layer])
            note(op.device, memory[op.layer].backward_temp(placement.input_grads)
                 * plan.piece_size + 2 * cast_bytes[op.layer])
            dev.free("kept_for_backward", (op.layer, op.shard))
            dev.free("gradients", (op.layer, op.shard))
            release(op)
            if param_bytes[op.layer]:
                note(op.device)
                for category, key in dev.deferred:
                    dev.free(category, key)
                dev.deferred = []
        elif isinstance(op, BatchStats):  # each replica's statistics: a forward's or a
            mem = memory[op.layer]  # backward's temporaries (the statistics are tiny)
            temp = (mem.forward_temp_per_case if op.phase == "forward"
                    else mem.backward_temp_per_case)
            for d in op.replica_devices:
                note(d, temp * plan.piece_size)
        elif isinstance(op, GradCopy):
            devices[op.src].free("gradients", (op.consumer, op.layer, op.shard))
            devices[op.dst].add("gradients", (op.layer, op.shard), shard_bytes[op.layer])
        elif isinstance(op, AllReduce):
            share = param_bytes[op.layer] // len(op.replica_devices)
            for d in op.replica_devices:
                devices[d].add("weight_grads", ("reduced", op.layer), share)
        elif isinstance(op, Update):
            if update_temp[op.layer]:
                note(op.device, update_temp[op.layer])
            done = [("weight_grads", (op.layer, op.replica)),
                    ("weight_grads", ("reduced", op.layer))]
            if len(plan.layers[op.layer].devices) > 1:  # may wait for the other replicas
                devices[op.device].deferred += done
            else:
                for category, key in done:
                    devices[op.device].free(category, key)
        release(op)
        for d in op.devices:
            note(d)
    for device in devices:
        device.step_ended()
    return peaks


def activation_reads(op, net: NetConfig) -> tuple[tuple[str, int, int], ...]:
    """The activations (layer, piece, device) an operation reads, once per read (an
    input listed twice is read twice): the estimate's and the executor's
    (:mod:`convnet.runtime.step.activation_frees`) rule for when one is freed."""
    if isinstance(op, Copy):
        return ((op.layer, op.shard, op.src),)
    if isinstance(op, Forward):
        return tuple((i, op.shard, op.device) for i in net[op.layer].inputs)
    if isinstance(op, Backward):
        return ((op.layer, op.shard, op.device),) + tuple(
            (i, op.shard, op.device) for i in net[op.layer].inputs)
    if isinstance(op, BatchStats):
        return tuple(key for replica in range(len(op.replica_devices))
                     for key in statistics_reads(op, replica, net))
    return ()


def statistics_reads(op: BatchStats, replica: int, net: NetConfig) -> tuple[tuple, ...]:
    """The activations replica ``replica``'s statistics of a BatchStats operation read: its
    piece's inputs, and before the backward call its output too."""
    piece, device = op.pieces[replica], op.replica_devices[replica]
    own = ((op.layer, piece, device),) if op.phase == "backward" else ()
    return own + tuple((i, piece, device) for i in net[op.layer].inputs)


def _last_readers(plan: Plan, net: NetConfig) -> dict[int, list[tuple[str, int, int]]]:
    """Operation index -> the activations it is the last reader of in plan order."""
    last: dict[tuple[str, int, int], int] = {}
    for op in plan.ops:
        for key in activation_reads(op, net):
            last[key] = op.index
    out: dict[int, list[tuple[str, int, int]]] = {}
    for key, index in last.items():
        out.setdefault(index, []).append(key)
    return out
