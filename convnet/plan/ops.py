"""The execution plan: a plain data structure the executor walks.

A :class:`Plan` is a flat list of operations in one valid global order.  Each
operation runs on one logical device (an :class:`AllReduce` runs on all of its
devices together) and lists the indices of the earlier operations it needs.

That makes both walks of a plan short:

* the sequential walk runs ``plan.ops`` in order;
* the parallel walk gives each device's worker the operations on that
  device (a subsequence of the global order, hence deadlock-free;
  :mod:`convnet.runtime.step.tasks` splits some of them further) and has it wait
  for each one's cross-device ``deps`` before running it.

Buffer ownership keeps results deterministic: every write into a device's
buffers is made by that device's own worker (copies are *pulled* by the
destination), so the order of accumulations is the list order, whatever the
thread timing.

Shards and passes follow cuda-convnet2's multi-GPU semantics: with Rmax and
Rmin the largest and smallest replica counts of the net, a minibatch is cut
into ``num_shards`` (= Rmax) contiguous shards and runs in ``num_passes``
(= Rmax / Rmin) passes.  A layer with R replicas is active every
``period`` = R / Rmin passes; in the activation starting at pass p its replica
i processes shard ``p * Rmin + i`` (cuda-convnet2 writes ``p + i``, which is
the same whenever Rmin = 1, as in every reference config; ``p * Rmin + i``
keeps "every shard exactly once" true when Rmin > 1; see docs/DESIGN.md).  Forward runs in the first pass of
an activation, backward in its last, so consumers that run more often have
sent back every shard's gradient by then.

Micro-batches (``--micro-batches M``, docs/PIPELINE.md) cut every shard into M
contiguous *pieces* (:func:`piece_bounds`), and the operations work on pieces:
the ``shard`` field of an operation is the piece's index, ``m * num_shards + s``
for micro-batch m of shard s (:meth:`Plan.piece`).  With M = 1 a piece is its
shard, and since a layer's replica count divides ``num_shards``, the replica
that computes a piece is the one that computes its shard
(:meth:`Plan.producer_of` reads either).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from convnet.plan.schedules import DEFAULT_SCHEDULE

FLOAT_BYTES = 4  # activations, gradients and weights are float32
STATISTICS_BYTES = 8  # batch statistics (BatchStats) are float64


@dataclass(frozen=True)
class Op:
    """Base of all plan operations."""

    index: int
    pass_index: int
    layer: str
    deps: tuple[int, ...]

    @property
    def devices(self) -> tuple[int, ...]:
        raise NotImplementedError

    @property
    def kind(self) -> str:
        return type(self).__name__.lower()


@dataclass(frozen=True)
class _OnDevice(Op):
    """An operation that one device runs on its own buffers."""

    device: int

    @property
    def devices(self):
        return (self.device,)


@dataclass(frozen=True)
class _Pull(Op):
    """A transfer from ``src`` to ``dst``, run by the destination (it pulls)."""

    shard: int
    src: int
    dst: int
    nbytes: int

    @property
    def devices(self):
        return (self.dst,)


@dataclass(frozen=True)
class Load(_OnDevice):
    """Put a data layer's shard (images or labels) onto ``device``."""

    shard: int
    nbytes: int


@dataclass(frozen=True)
class Forward(_OnDevice):
    """Replica ``replica`` of ``layer`` computes ``shard`` on ``device``."""

    replica: int
    shard: int


@dataclass(frozen=True)
class Copy(_Pull):
    """Pull ``layer``'s activation of ``shard`` from ``src`` to ``dst``."""


@dataclass(frozen=True)
class Backward(_OnDevice):
    """Replica ``replica`` of ``layer`` back-propagates ``shard`` on ``device``.

    Input gradients for inputs on the same device are added into the input's
    gradient buffer; those for inputs on other devices are left for a
    :class:`GradCopy` to pull.
    """

    replica: int
    shard: int


@dataclass(frozen=True)
class GradCopy(_Pull):
    """Pull the gradient that ``consumer`` computed for ``layer``'s ``shard``
    from ``src`` and add it into ``layer``'s gradient on ``dst``."""

    consumer: str


@dataclass(frozen=True)
class AllReduce(Op):
    """Sum ``layer``'s weight gradients over its replicas' devices (a collective)."""

    replica_devices: tuple[int, ...]
    nbytes: int

    @property
    def devices(self):
        return self.replica_devices


@dataclass(frozen=True)
class BatchStats(Op):
    """Combine the per-channel statistics of ``layer``'s replicas before its ``phase``
    ('forward' or 'backward'): every replica computes its piece's (``pieces``, in replica
    order), then combines all of them in replica order, so that every replica normalises
    over the cases of all (bnorm's ``stats=global``).  ``nbytes``: one replica's
    statistics (float64)."""

    replica_devices: tuple[int, ...]
    pieces: tuple[int, ...]
    phase: str
    nbytes: int

    @property
    def devices(self):
        return self.replica_devices


@dataclass(frozen=True)
class Update(_OnDevice):
    """Apply the accumulated gradient to replica ``replica``'s weights."""

    replica: int
    num_cases_scale: float  # numCases = num_cases_scale * M for a minibatch of M


@dataclass(frozen=True)
class LayerPlacement:
    """Where and how often one layer runs."""

    name: str
    type: str
    devices: tuple[int, ...]
    period: int
    scheme: str  # 'data', 'model' or 'single'
    gpu_source: str  # 'config', 'inherited from X', 'default 0 (first input is data)', ...
    output_shape: tuple[int, ...]
    param_count: int
    update_period: int = 0  # effective U for weight layers, else 0
    needs_backward: bool = False
    input_grads: tuple[bool, ...] = ()
    learns: bool = False  # a weight layer whose weights change (not frozen by epsW=epsB=0)

    @property
    def frozen(self) -> bool:
        """A weight layer that does not learn (its rates are all 0)."""
        return self.param_count > 0 and not self.learns

    @property
    def replicas(self) -> int:
        return len(self.devices)

    def shard(self, pass_index: int, replica: int, rmin: int) -> int:
        return pass_index * rmin + replica

    def active_passes(self, num_passes: int) -> range:
        if not self.devices:  # a data layer that no layer reads
            return range(0)
        return range(0, num_passes, self.period)


@dataclass
class Plan:
    """Placement of every layer and the operations of one minibatch."""

    layers: dict[str, LayerPlacement]
    ops: list[Op]
    num_devices: int
    physical_devices: tuple[int, ...]
    num_shards: int
    num_passes: int
    rmin: int
    scheme: str  # 'single', 'data', 'model' or 'hybrid'
    minibatch: int
    notes: list[str] = field(default_factory=list)
    micro_batches: int = 1  # M: pieces per shard (docs/PIPELINE.md)
    schedule: str = DEFAULT_SCHEDULE  # how the micro-batches flow (convnet.plan.schedules)

    @property
    def shard_size(self) -> int:
        return self.minibatch // self.num_shards

    @property
    def num_pieces(self) -> int:
        """How many pieces a minibatch is cut into: every shard's micro-batches."""
        return self.num_shards * self.micro_batches

    @property
    def piece_size(self) -> int:
        """Cases in the largest piece of a full minibatch (what a copy of one moves)."""
        return -(-self.shard_size // self.micro_batches)

    def piece(self, shard: int, micro: int) -> int:
        """The index of micro-batch ``micro`` of ``shard`` (an operation's ``shard``)."""
        return micro * self.num_shards + shard

    def micro_of(self, piece: int) -> int:
        return piece // self.num_shards

    @property
    def used_devices(self) -> tuple[int, ...]:
        """The logical devices that run an operation, in order; a ``--gpu`` entry that no
        ``gpu=`` list names stays idle."""
        return tuple(sorted({d for op in self.ops for d in op.devices}))

    def ops_for_device(self, device: int) -> list[Op]:
        """The operations that run on ``device``, in plan order."""
        return [op for op in self.ops if device in op.devices]

    def producer_of(self, layer: str, shard: int) -> tuple[int, int]:
        """(replica, device) of the replica of ``layer`` that computes ``shard``."""
        placement = self.layers[layer]
        replica = shard % placement.replicas
        return replica, placement.devices[replica]


def shard_bounds(num_cases: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) of each shard: equal when ``num_shards`` divides
    ``num_cases``, else as even as possible with the larger shards first (a short
    final minibatch)."""
    base, extra = divmod(num_cases, num_shards)
    bounds, start = [], 0
    for s in range(num_shards):
        stop = start + base + (1 if s < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def piece_bounds(num_cases: int, num_shards: int, micro_batches: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) of every piece, indexed like :meth:`Plan.piece`: each
    shard of :func:`shard_bounds` cut into ``micro_batches`` pieces the same way
    (equal when M divides the shard, else the larger pieces first, as
    ``numpy.array_split`` cuts)."""
    shards = shard_bounds(num_cases, num_shards)
    cuts = [[(start + a, start + b) for a, b in shard_bounds(stop - start, micro_batches)]
            for start, stop in shards]
    return [cuts[s][m] for m in range(micro_batches) for s in range(num_shards)]
