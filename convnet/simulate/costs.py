"""Seconds per plan operation: compute from a short profile, transfers from link figures.

Compute (load, forward, backward, update) is measured: a few training steps of
the net on the device at hand, run on one thread in plan order (so that the
times are the operations' own, not those of threads sharing cores), with the
executor's op timings switched on; each (kind, layer) keeps the median time
of its operations.  Another plan of the same net may cut minibatches into
other shards: load, forward and backward times are scaled linearly by the
shard's cases, update times (a function of the weights alone) are not.

Transfers are not measured: a copy takes ``latency + bytes / bandwidth`` of
its link, and an all-reduce of R replicas the ring's ``2(R-1)`` steps of
``latency`` plus ``2(R-1)/R * bytes / bandwidth`` (see
:mod:`convnet.simulate.hardware` for the figures and where they come from).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from convnet.plan.ops import AllReduce, Copy, GradCopy, Op, Plan, Update
from convnet.simulate.hardware import DeviceKind, Link, link_of

#: Op kinds whose time is measured rather than derived from a link.
COMPUTE_KINDS = ("load", "forward", "backward", "update")

#: Profiled steps after one warm-up step.
PROFILE_STEPS = 5


@dataclass
class ComputeProfile:
    """Median seconds per operation of each (kind, layer), at ``shard_size`` cases."""

    shard_size: int
    seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)  # the profiled steps, sequential

    @classmethod
    def from_timings(cls, shard_size: int, steps: list[tuple[float, list]]) -> ComputeProfile:
        """From (step seconds, [OpTiming ...]) of each profiled step."""
        samples: dict[tuple[str, str], list[float]] = {}
        for _, timings in steps:
            for t in timings:
                if t.kind in COMPUTE_KINDS:
                    samples.setdefault((t.kind, t.layer), []).append(t.end - t.start)
        return cls(shard_size, {key: statistics.median(v) for key, v in samples.items()},
                   [seconds for seconds, _ in steps])


@dataclass
class CostModel:
    """Seconds of any operation of a plan of the profiled net on devices of ``kind``."""

    profile: ComputeProfile
    kind: DeviceKind
    #: The profiled devices are worker threads of one host (the cpu backend): they
    #: share the cores the profile's operations already used, so their compute does
    #: not overlap.
    shared_host: bool = False

    def resources(self, plan: Plan) -> list[int]:
        """The compute resource each logical device runs on: one for all of them on a
        shared host, else one per physical device (--gpu 0,0 shares one)."""
        if self.shared_host and not self.kind.assumed:
            return [0] * plan.num_devices
        return list(plan.physical_devices)

    @property
    def link(self) -> Link:
        return link_of(self.kind)

    def seconds(self, op: Op, plan: Plan) -> float:
        if isinstance(op, (Copy, GradCopy)):
            return self.link.latency + op.nbytes / self.link.bandwidth
        if isinstance(op, AllReduce):
            r = len(op.replica_devices)
            if r < 2:
                return 0.0
            return (2 * (r - 1) * self.link.latency +
                    2 * (r - 1) / r * op.nbytes / self.link.bandwidth)
        measured = self.profile.seconds.get((op.kind, op.layer), 0.0)
        scale = 1.0 if isinstance(op, Update) else plan.shard_size / self.profile.shard_size
        return measured * scale / self.kind.speed

    def on(self, kind: DeviceKind) -> CostModel:
        """The same profile, predicted for devices of ``kind``."""
        return replace(self, kind=kind)


def profile_compute(executor, batch: list, shard_size: int,
                    steps: int = PROFILE_STEPS) -> ComputeProfile:
    """Run ``steps`` training steps (after one warm-up) of ``batch`` on ``executor`` and
    keep its compute times.  The executor should run its plan sequentially; its weights
    change, so use one made for the purpose."""
    return ComputeProfile.from_timings(shard_size, executor.timed_steps(batch, steps))
