"""Does the plan fit in the machine's memory?  Asked before anything is allocated.

A net too big for the machine would otherwise start, load its data and die
at the first large allocation with a traceback.  The plan report already
estimates each logical device's parameter and activation memory
(:func:`convnet.plan.report.device_totals`); here those figures are summed
per physical memory of this process's machine (its CPU devices share the
host's RAM; the logical devices on one GPU share that GPU; in a multi-process
run only the process's own devices count) and compared with what is free now.
Training refuses a plan that does not fit; ``--print-plan`` only says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from convnet.app.option_values import async_staleness
from convnet.config.model import NetConfig
from convnet.config.values.typed import local_sgd_period
from convnet.errors import DeviceError
from convnet.plan.ops import Plan
from convnet.plan.report import device_totals, human_bytes
from convnet.runtime.step.tasks import local_periods
from convnet.runtime.step.weights import shared_weight_layers


@dataclass(frozen=True)
class MemoryPool:
    """One physical memory and what the plan puts in it."""

    name: str  # "host RAM" or "GPU 3"
    devices: tuple[int, ...]  # the logical devices that share it
    needed: int  # bytes: parameters (with gradients and momentum) and activations
    available: int | None  # bytes free now; None when the machine does not say

    @property
    def fits(self) -> bool:
        return self.available is None or self.needed <= self.available

    def shortfall_text(self) -> str:
        devices = ",".join(map(str, self.devices))
        return (f"the plan needs about {human_bytes(self.needed)} of {self.name} (parameters "
                f"and activations of logical device(s) {devices}), but only "
                f"{human_bytes(self.available)} is available")

    def as_json(self) -> dict:
        return {"memory": self.name, "devices": list(self.devices), "needed_bytes": self.needed,
                "available_bytes": self.available, "fits": self.fits}


def host_available() -> int | None:
    """Bytes of host RAM available to a new allocation without swapping."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def weight_sharing(plan: Plan, net: NetConfig, backend: str, sync: str,
                   processes: int) -> frozenset[str]:
    """The layers whose replicas a run on ``backend`` with ``--sync sync`` (a mode) and
    ``processes`` processes gives one shared copy of the weights
    (:func:`~convnet.runtime.step.weights.shared_weight_layers`), for the memory figures:
    the synchronous ones (by ``sync`` or by their own ``sync=`` key)."""
    # CPU replicas share the host's memory and sum by slices (the chunked collective)
    return shared_weight_layers(plan, net, sliced_in_one_memory=lambda devices: backend == "cpu",
                                synchronous=async_staleness(sync) is None, processes=processes,
                                own_updates=local_periods(plan, net, local_sgd_period(sync)))


def memory_pools(plan: Plan, net: NetConfig, backend: str, local=lambda device: True,
                 shared: frozenset[str] = frozenset()) -> list[MemoryPool]:
    """The plan's memory per physical memory, for ``backend`` 'cpu' or 'cuda', over
    the logical devices for which ``local`` is true (this process's); the replicas of
    the ``shared`` layers hold one copy of the weights (:func:`weight_sharing`)."""
    totals = [t for t in device_totals(plan, net, shared) if local(t.device)]
    if backend == "cpu":
        return [MemoryPool("host RAM", tuple(t.device for t in totals),
                           sum(t.param_bytes + t.activation_bytes for t in totals),
                           host_available())]
    from convnet.runtime.devices.cuda import free_memory

    pools = []
    for physical in sorted({t.physical for t in totals}):
        mine = [t for t in totals if t.physical == physical]
        pools.append(MemoryPool(f"GPU {physical}", tuple(t.device for t in mine),
                                sum(t.param_bytes + t.activation_bytes for t in mine),
                                free_memory(physical)))
    return pools


def check_memory(plan: Plan, net: NetConfig, backend: str, local=lambda device: True,
                 shared: frozenset[str] = frozenset()) -> None:
    """Refuse (exit 1) a plan whose ``local`` devices need more memory than the machine
    has free."""
    short = [pool for pool in memory_pools(plan, net, backend, local, shared)
             if not pool.fits]
    if short:
        raise DeviceError("not enough memory: " + "; ".join(p.shortfall_text() for p in short)
                          + "; use a smaller --mini or a smaller net")
