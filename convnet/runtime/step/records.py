"""What one step of the executor creates and gives back.

:class:`StepBuffers` is everything a minibatch creates while its tasks run
(activations, gradients, the cost sums and finite flags left on the devices, the
slices moving between processes); the
task walk (:mod:`convnet.runtime.step.executor`) makes one per step and the
task actions (:mod:`convnet.runtime.step.task_actions`) fill and empty it, so it
lives apart from both.  :class:`StepResult` (the costs) and :class:`OpTiming`
(when each task ran) are what a step returns to the training loop and the
profiles.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from convnet.runtime.step.device_results import StepResults


@dataclass
class StepResult:
    """Costs of one minibatch: per cost layer, means over its cases."""

    num_cases: int
    costs: dict[str, dict[str, float]]
    seconds: float = 0.0
    host_waits: int = 0  # points where the host waited for a device (host_reads.py)
    skipped: bool = False  # --precision fp16: its gradients overflowed, nothing applied


@dataclass
class OpTiming:
    """When one operation ran on one device (seconds since the step began)."""

    device: int
    kind: str
    layer: str
    start: float
    end: float
    waited: float = 0.0  # of it, runnable without a core (where the executor counts that)


@dataclass
class StepBuffers:
    """Everything one minibatch creates; dropped when the step ends (a training step
    drops each activation sooner, after its last reader:
    :mod:`convnet.runtime.step.activation_frees`)."""

    batch: list
    bounds: list[tuple[int, int]]  # of each shard: what an update's numCases counts
    pieces: list[tuple[int, int]]  # of each piece (a shard's micro-batch): what a task reads
    ctx_base: dict
    progress: float  # of training, in [0, 1]: what the learning-rate schedules read
    case_offset: int = 0  # of the first case, where the batch is a shard of a larger one
    update_cases: float | None = None  # what updates divide by, if not their own cases
    acts: dict = field(default_factory=dict)
    states: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)
    gouts: dict = field(default_factory=dict)
    # the cost sums and finite flags left on the devices (None: a diagnosis, which has none)
    results: StepResults | None = None
    diagnosing: bool = False  # a failed step's forward run again to find the culprit
    overflow: object = None  # under loss scaling, the first gradient check that failed
    collectives: dict = field(default_factory=dict)
    reduced: dict = field(default_factory=dict)  # (layer, pass, rank) -> summed gradient slices
    received: dict = field(default_factory=dict)  # slices from other processes (transfers.py)
    sends: list = field(default_factory=list)  # this step's pending sends to other processes
    contexts: dict = field(default_factory=dict)  # shard -> Context (immutable, shared)
    # BatchStats: (op index, replica) -> that replica's own statistics and what they
    # carry for its call, and (layer, phase, piece) -> the ReducedStatistics its forward
    # or backward call reads
    own_statistics: dict = field(default_factory=dict)
    statistics_carry: dict = field(default_factory=dict)
    statistics: dict = field(default_factory=dict)
