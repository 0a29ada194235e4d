"""The simulated training step: a list schedule of the plan's operations.

Each device runs its operations in plan order, one at a time; an operation
starts once the operations it depends on have ended and every device it runs
on is free (an all-reduce occupies all of its replicas' devices).  Logical
devices on one compute resource (one physical GPU listed twice, or the worker
threads of the cpu backend, which share the host's cores) run one operation at
a time between them.  Because the plan's list is one valid global order,
walking it once gives every start time.

The executor's workers may run a layer's all-reduce and update later than
plan order, behind backward passes of layers below it; the simulation does
not, so it may overestimate the step of data-parallel plans with large
all-reduces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from convnet.plan.ops import Plan
from convnet.plan.time_split import CATEGORY, DeviceTime

@dataclass
class Simulation:
    step_seconds: float
    minibatch: int
    devices: list[DeviceTime] = field(default_factory=list)
    timeline: list[tuple[int, str, str, float, float]] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        return self.minibatch / self.step_seconds if self.step_seconds > 0 else 0.0


def simulate(plan: Plan, seconds, resources: list[int] | None = None) -> Simulation:
    """Simulate one training step of ``plan``; ``seconds(op, plan)`` is an op's duration,
    ``resources[d]`` the compute resource of logical device ``d`` (default: its own)."""
    resources = list(range(plan.num_devices)) if resources is None else resources
    free = dict.fromkeys(resources, 0.0)
    end: dict[int, float] = {}
    splits = [DeviceTime(d) for d in range(plan.num_devices)]
    timeline = []
    for op in plan.ops:
        start = max([end[d] for d in op.deps] + [free[resources[d]] for d in op.devices],
                    default=0.0)
        duration = seconds(op, plan)
        end[op.index] = start + duration
        for d in op.devices:
            free[resources[d]] = end[op.index]
            category = CATEGORY[op.kind]
            setattr(splits[d], category, getattr(splits[d], category) + duration)
            timeline.append((d, op.kind, op.layer, start, end[op.index]))
    step = max(end.values(), default=0.0)
    for split in splits:
        split.idle = max(step - split.compute - split.copy - split.allreduce, 0.0)
    return Simulation(step, plan.minibatch, splits, timeline)
