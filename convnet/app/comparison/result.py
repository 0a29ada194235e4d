"""What a ``--compare`` run knows of one config, and every figure the table and picture show.

Each figure is a property of :class:`ConfigResult`, computed from what was
gathered about the run, so the table (:mod:`convnet.app.comparison.table`), the
picture (:mod:`convnet.app.comparison.plot`) and the verdict
(:mod:`convnet.app.comparison.verdict`) read one source:

* scheme, passes, parameter memory, activation memory (an estimate), bytes
  copied and all-reduced per minibatch: the planner
  (:func:`convnet.plan.report.device_totals` on the run's own plan);
* final train/test cost and error, wall time and training images/s: the run's
  CSV log (:data:`convnet.app.run.log.CSV_COLUMNS`), read back from disk;
* the step time that ranks the configs: the median over the interleaved rounds
  after training (:mod:`convnet.app.comparison.rounds`), with its spread;
* the time split per device and the per-device timeline: the profiled steps
  after training (:mod:`convnet.app.comparison.measure`); under a data-parallel
  ``--sync async:S`` run, the shards each replica trained instead;
* the simulator's predicted step (:mod:`convnet.app.comparison.prediction`).

A config whose training failed (:attr:`ConfigResult.failure`) has only the
planner's figures; :func:`trained` picks the others, which every measured
figure, the ranking and the picture use.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from convnet.app.comparison.noise import spread
from convnet.app.option_values import async_staleness
from convnet.plan.ops import AllReduce, Copy, GradCopy, Plan
from convnet.plan.report import DeviceTotals
from convnet.plan.time_split import DeviceTime
from convnet.runtime.sync.replica_plans import async_replica_devices


def trained(results: list["ConfigResult"]) -> list["ConfigResult"]:
    """The configs whose training finished: the ones timed, profiled, ranked and drawn."""
    return [r for r in results if r.failure is None]


@dataclass
class ConfigResult:
    """Everything the table and the picture show about one config's run."""

    name: str
    layer_def: Path
    layer_params: Path
    plan: Plan
    totals: list[DeviceTotals]
    log_path: Path
    sync: str = "sync"  # the run's --sync mode
    # layer -> K of the replicated layers under local SGD (--sync local:K or their sync= key)
    local_periods: dict[str, int] = field(default_factory=dict)
    log_rows: list[dict] = field(default_factory=list)
    profile_cases: int = 0
    step_seconds: list[float] = field(default_factory=list)
    times: list[DeviceTime] = field(default_factory=list)
    timeline: list = field(default_factory=list)  # OpTiming of one step (the median one)
    timeline_seconds: float = 0.0
    # An async run's measured traffic: shards each replica trained, over this many steps.
    replica_shards: list[int] = field(default_factory=list)
    trained_steps: int = 0
    # Seconds per step in each interleaved round (the ranking's figure).
    round_seconds: list[float] = field(default_factory=list)
    paired_step: float | None = None  # its step read from the rounds paired, once timed
    predicted_seconds: float | None = None  # the simulator's step; None: not predicted
    # Why its training stopped (the TrainingError's summary, "diverged at epoch 2, batch
    # 3"); such a config keeps its planner figures and is left out of everything measured.
    failure: str | None = None

    # ------------------------------------------------------------- rounds
    @property
    def median_step_seconds(self) -> float:
        """The step time that ranks the configs: read from the rounds paired with the
        other configs' (:func:`convnet.app.comparison.noise.paired_steps`, set in
        :attr:`paired_step`), else the median over its own rounds."""
        if self.paired_step is not None:
            return self.paired_step
        return statistics.median(self.round_seconds) if self.round_seconds else math.nan

    @property
    def step_spread(self) -> float:
        """Half the rounds' interquartile range, as a share of the median."""
        return spread(self.round_seconds)

    @property
    def images_per_sec(self) -> float:
        """Cases of the timed minibatch per median step."""
        step = self.median_step_seconds
        return self.profile_cases / step if step and math.isfinite(step) else 0.0

    @property
    def used_devices(self) -> list[int]:
        """The logical devices the plan puts any layer on, in order."""
        return list(self.plan.used_devices)

    # ------------------------------------------------------------- planner
    @property
    def lockstep(self) -> bool:
        """Whether the run trains in lockstep steps, so that a step can be profiled per
        operation: all but a data-parallel net under --sync async (a hybrid net keeps its
        lockstep steps; only its replicated layers' increments move apart)."""
        return async_staleness(self.sync) is None or async_replica_devices(self.plan) is None

    @property
    def scheme(self) -> str:
        return self.plan.scheme

    @property
    def num_passes(self) -> int:
        return self.plan.num_passes

    @property
    def devices_used(self) -> int:
        return len(self.used_devices)

    @property
    def copy_bytes(self) -> int:
        """Bytes of activation and gradient copies between devices per minibatch."""
        return sum(op.nbytes for op in self.plan.ops if isinstance(op, (Copy, GradCopy)))

    @property
    def is_async(self) -> bool:
        return async_staleness(self.sync) is not None

    @property
    def allreduce_bytes(self) -> int:
        """Bytes each device sends in ring all-reduces, summed over devices, per minibatch
        (the planner's figure: 2(R-1)/R of the gradient per device); for a layer under
        ``local:K`` the weight average every K-th step moves as much, so 1/K of it per
        minibatch; under ``async`` none (its replicas send increments:
        :attr:`increment_bytes`)."""
        if self.is_async:
            return 0
        total = 0
        for op in self.plan.ops:
            if isinstance(op, AllReduce):
                r = len(op.replica_devices)
                total += r * (2 * (r - 1) * op.nbytes // r) // self.local_periods.get(op.layer, 1)
        return total

    @property
    def weight_bytes(self) -> int:
        """Bytes of one replica's replicated weights (float32): the size of one increment
        an async replica sends after each shard."""
        return sum(op.nbytes for op in self.plan.ops if isinstance(op, AllReduce))

    @property
    def increment_sends(self) -> list[tuple[float, float]]:
        """An async run's (sent, received) increment bytes per minibatch of every device.
        A data-parallel net's replica sends the increment of each shard it trains to each
        other replica (measured: the shards each replica trained); in a lockstep (hybrid)
        net every replica of a replicated layer sends each of its updates to the others
        (the plan's updates)."""
        traffic = [[0.0, 0.0] for _ in range(self.plan.num_devices)]
        replicas = async_replica_devices(self.plan)
        if replicas is not None:
            count, total = len(replicas), sum(self.replica_shards)
            steps = max(self.trained_steps, 1)
            for device, shards in zip(replicas, self.replica_shards):
                traffic[device] = [shards * (count - 1) * self.weight_bytes / steps,
                                   (total - shards) * self.weight_bytes / steps]
        else:
            for op in self.plan.ops:
                if isinstance(op, AllReduce):
                    for device in op.replica_devices:
                        traffic[device][0] += (len(op.replica_devices) - 1) * op.nbytes
                        traffic[device][1] += (len(op.replica_devices) - 1) * op.nbytes
        return [tuple(t) for t in traffic]

    @property
    def increment_bytes(self) -> float:
        """All increment bytes an async run's replicas sent per minibatch."""
        return sum(sent for sent, _ in self.increment_sends)

    @property
    def device_traffic(self) -> list[tuple[float, float]]:
        """(sent, received) bytes per minibatch of every device: the planner's, or under
        async the plan's copies plus the increments instead of the all-reduces."""
        if not self.is_async:
            return [(t.sent_bytes, t.received_bytes) for t in self.totals]
        traffic = [list(t) for t in self.increment_sends]
        for op in self.plan.ops:
            if isinstance(op, (Copy, GradCopy)):
                traffic[op.src][0] += op.nbytes
                traffic[op.dst][1] += op.nbytes
        return [tuple(t) for t in traffic]

    @property
    def moved_bytes(self) -> int:
        """All bytes sent between devices per minibatch (= sum of the planner's sent_bytes)."""
        return sum(t.sent_bytes for t in self.totals)

    # ----------------------------------------------------------------- log
    @property
    def final(self) -> dict:
        """The last row of the run's CSV log (numbers as floats)."""
        return self.log_rows[-1]

    @property
    def train_images_per_sec(self) -> float:
        """The median over the log's test intervals of inputs_per_sec (training cases per
        second of training-step time; the median leaves out a slow first interval)."""
        return statistics.median(row["inputs_per_sec"] for row in self.log_rows)

    @property
    def wall_seconds(self) -> float:
        return self.final["cumulative_time"]

    # ------------------------------------------------------------- profile
    @property
    def mean_step_seconds(self) -> float:
        return statistics.fmean(self.step_seconds) if self.step_seconds else math.nan

    @property
    def profiled_images_per_sec(self) -> float:
        step = self.mean_step_seconds
        return self.profile_cases / step if step and math.isfinite(step) else 0.0
