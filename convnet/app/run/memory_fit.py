"""Does the plan fit in the memory this process may use?  Asked before anything is
allocated.

A net too big for the machine would otherwise start, load its data and die
at the first large allocation.  The plan's estimate (:mod:`convnet.plan.memory`:
each logical device's peak during a step, its kernels' temporaries included) is
summed per physical memory of this process's machine (its CPU devices share the
host's RAM; the logical devices on one GPU share that GPU, where the estimate is what
CuPy's memory pool will hold for them, :mod:`convnet.runtime.devices.cuda_pool`; in a
multi-process run only the process's own devices count); host RAM also holds the data pipeline's
batches and arrays (:mod:`convnet.data.memory`), during a training step and, with the
test's batches besides, during a test (whose devices hold only their weights,
momentum and one forward pass's activations), and every CPU device's worker thread
its own working memory (:data:`CPU_THREAD_BYTES`).  Host RAM is compared with the
tightest of what the machine has free and the limits on the process
(:mod:`convnet.app.run.memory_limits`: ``ulimit -v``, ``ulimit -d``, the cgroup's
limit), which the refusal names.  Training refuses a plan that does not fit;
``--print-plan`` only says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from convnet.app.option_values import async_staleness
from convnet.app.run.memory_limits import HostLimit, host_limit
from convnet.config.model import NetConfig
from convnet.config.values.typed import local_sgd_period
from convnet.errors import DeviceError
from convnet.config.layer_types.memory_rules import BACKEND_KERNELS
from convnet.plan.memory import memory_peaks
from convnet.plan.ops import Plan
from convnet.plan.report import human_bytes
from convnet.runtime.step.tasks import local_periods
from convnet.runtime.step.weights import shared_weight_layers

#: What a test's forward pass holds on a device at most (see the module docstring).
EVALUATION = ("weights", "momentum", "activations")
#: Bytes of host memory each CPU device's worker thread uses beyond the plan's arrays:
#: the BLAS library's per-thread GEMM buffers (OpenBLAS packs its operands in a buffer
#: of its own per thread: 20 MiB more resident memory after one thread's first large
#: sgemm here), the kernels' per-thread scratch buffers
#: (:mod:`convnet.kernels.scratch`) and the thread's share of the heap; measured as
#: the reference nets' peak less the rest of the estimate, 25-40 MiB per device
#: (docs/BENCHMARKS.md, "Memory").
CPU_THREAD_BYTES = 32 << 20


@dataclass(frozen=True)
class MemoryPool:
    """One physical memory and what the plan puts in it."""

    name: str  # "host RAM" or "GPU 3"
    devices: tuple[int, ...]  # the logical devices that share it
    needed: int  # bytes: the devices' peaks and, in host RAM, the data pipeline's
    available: int | None  # bytes free now; None when the machine does not say
    limit: str = "the available memory"  # which limit ``available`` is
    parts: tuple[tuple[str, int], ...] = ()  # what ``needed`` is made of, for --print-plan

    @property
    def fits(self) -> bool:
        return self.available is None or self.needed <= self.available

    def shortfall_text(self) -> str:
        devices = ",".join(map(str, self.devices)) or "none"
        what = (f"what CuPy's memory pool will hold for logical device(s) {devices}"
                if self.name.startswith("GPU") else
                f"the peak of logical device(s) {devices} during a step, and the data in "
                "host memory")
        return (f"the plan needs about {human_bytes(self.needed)} of {self.name} ({what}), "
                f"but {self.limit} leaves only {human_bytes(self.available)}")

    def text(self) -> str:
        """One line for ``--print-plan``: what is needed, of what, and what is free."""
        parts = ", ".join(f"{name} {human_bytes(n)}" for name, n in self.parts)
        free = ("unknown" if self.available is None else
                f"{human_bytes(self.available)} ({self.limit})")
        return (f"{self.name} needed (est.): {human_bytes(self.needed)}"
                + (f" ({parts})" if parts else "") + f"; free: {free}")

    def as_json(self) -> dict:
        return {"memory": self.name, "devices": list(self.devices), "needed_bytes": self.needed,
                "available_bytes": self.available, "limit": self.limit, "fits": self.fits,
                "parts": dict(self.parts)}


def host_available() -> int | None:
    """Bytes of host RAM this process may still allocate: the tightest of the machine's
    available memory and the process's limits (:func:`host_limit`)."""
    limit = host_limit()
    return None if limit is None else limit.available


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
                 shared: frozenset[str] = frozenset(), data=None,
                 precision: str = "fp32") -> list[MemoryPool]:
    """The plan's memory per physical memory, for ``backend`` 'cpu' or 'cuda', over
    the logical devices for which ``local`` is true (this process's); the replicas of
    the ``shared`` layers hold one copy of the weights (:func:`weight_sharing`);
    ``data`` (a :class:`convnet.data.memory.DataMemory`) adds the data pipeline to
    host RAM; ``precision``: the run's ``--precision``."""
    peaks = [p for p in memory_peaks(plan, net, shared, BACKEND_KERNELS[backend], precision) if local(p.device)]
    limit = host_limit()
    if backend == "cpu":
        return [_host_pool(tuple(p.device for p in peaks), sum(p.peak_bytes for p in peaks),
                           sum(sum(p.between_ops_at_peak.get(k, 0) for k in EVALUATION)
                               for p in peaks), data, limit, threads=len(peaks))]
    from convnet.runtime.devices.cuda import free_memory
    from convnet.runtime.devices.cuda_failures import remember_estimate
    from convnet.runtime.devices.cuda_pool import OUTSIDE_POOL_BYTES, pool_bytes

    held = pool_bytes(plan, net, shared, precision)  # what CuPy's pool holds per logical device
    pools = []
    for physical in sorted({plan.physical_devices[p.device] for p in peaks}):
        mine = [p.device for p in peaks if plan.physical_devices[p.device] == physical]
        parts = (("CuPy's memory pool", sum(held[d] for d in mine)),
                 ("beside it", len(mine) * OUTSIDE_POOL_BYTES))
        pool = MemoryPool(f"GPU {physical}", tuple(mine), sum(n for _, n in parts),
                          free_memory(physical), f"GPU {physical}'s free memory", parts)
        remember_estimate(physical, pool.needed, pool.available)  # for an out-of-memory error
        pools.append(pool)
    if data is not None:
        pools.append(_host_pool((), 0, 0, data, limit))
    return pools


def _host_pool(devices: tuple[int, ...], training: int, testing: int, data,
               limit: HostLimit | None, threads: int = 0) -> MemoryPool:
    """Host RAM: the devices' peak during a step (``training``) or a test (``testing``)
    with the data pipeline's holdings then, and ``threads`` CPU worker threads'
    working memory."""
    during_step, during_test = training, testing
    if data is not None:
        during_step, during_test = training + data.training_bytes, testing + data.testing_bytes
    parts = []
    if devices:
        parts.append(("devices' peak during a step" if during_step >= during_test else
                      "devices during a test", training if during_step >= during_test
                      else testing))
    if threads:
        parts.append((f"{threads} worker thread(s)", threads * CPU_THREAD_BYTES))
    if data is not None:
        parts.append(("data", data.training_bytes if during_step >= during_test
                      else data.testing_bytes))
    return MemoryPool("host RAM", devices, max(during_step, during_test)
                      + threads * CPU_THREAD_BYTES, None if limit is None else limit.available,
                      "the available memory" if limit is None else limit.name, tuple(parts))


def check_memory(plan: Plan, net: NetConfig, backend: str, local=lambda device: True,
                 shared: frozenset[str] = frozenset(), data=None,
                 precision: str = "fp32") -> None:
    """Refuse (exit 1) a plan whose ``local`` devices (and ``data``, as for
    :func:`memory_pools`) need more memory than the process may use."""
    short = [pool for pool in memory_pools(plan, net, backend, local, shared, data, precision)
             if not pool.fits]
    if short:
        raise DeviceError("not enough memory: " + "; ".join(p.shortfall_text() for p in short)
                          + "; use a smaller --mini or a smaller net")
