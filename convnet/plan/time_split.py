"""How one training step's time splits on each device: compute, copies, all-reduce, idle.

``--compare`` measures the split (from the executor's op timings) and
``--simulate`` predicts it; both count each operation kind in the same
category, so their figures can be set side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Operation kind (:attr:`convnet.plan.ops.Op.kind`, and the timing category of the
#: executor's tasks) -> the category its time counts in.
CATEGORY = {"load": "compute", "forward": "compute", "backward": "compute", "update": "compute",
            "forwardstats": "compute", "backwardstats": "compute",
            "copy": "copy", "gradcopy": "copy", "allreduce": "allreduce",
            "statsreduce": "allreduce"}
CATEGORIES = ("compute", "copy", "allreduce", "idle")


@dataclass
class DeviceTime:
    """Seconds per step that one device spends on each category."""

    device: int
    compute: float = 0.0
    copy: float = 0.0
    allreduce: float = 0.0
    idle: float = 0.0

    @property
    def busy(self) -> float:
        return self.compute + self.copy + self.allreduce
