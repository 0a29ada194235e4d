"""Device kinds and the links between them, for the simulator.

Two kinds of figure live here:

* **Measured** (:class:`HostFigures`, :func:`measure_host`): this machine's
  usable cores, its single-thread GEMM rate and its memory-copy bandwidth,
  taken when a net is profiled (in a tenth of a second), with one BLAS thread
  as each CPU device's worker runs.
* **Assumed** (:data:`LINKS`, :data:`DEVICE_KINDS`): published peak or
  typical figures of GPUs and interconnects, each with its source.  None of
  them was checked against hardware by this project.

A device kind's compute speed relative to the profiled host is either a fixed
factor (``speed``) or its sustained single-precision GEMM rate
(``gemm_flops``) divided by the host's measured one: convolutions and
fully-connected layers are GEMM-bound, so that ratio is the simplest defensible
guess for how much faster the same layers run there.

Links: ``bandwidth`` in bytes per second one way, ``latency`` in seconds per
transfer.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import numpy as np

from convnet.errors import UsageError
from convnet.simulate.run_queue import Shares

GB = 1e9
TFLOPS = 1e12

#: Engine overhead of one copy task on the host (Python dispatch and a fresh
#: array), seconds: an estimate, small next to any copy the reference nets make.
HOST_COPY_LATENCY = 30e-6


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float  # bytes/s, one direction
    latency: float  # seconds per transfer
    source: str  # where the figure comes from


@dataclass(frozen=True)
class DeviceKind:
    name: str
    speed: float  # compute speed relative to the profiled device (when gemm_flops is None)
    link: str  # name in LINKS: how two devices of this kind exchange data
    source: str
    gemm_flops: float | None = None  # sustained SGEMM rate: speed = this / the host's
    #: False for worker threads sharing the host's cores (the profiled cpu backend):
    #: logical devices beyond the core count then share cores.
    own_hardware: bool = True

    @property
    def assumed(self) -> bool:
        """Whether the compute speed is an assumption rather than the profile's."""
        return self.name != "measured"

    def speed_over(self, host: HostFigures) -> float:
        """Compute speed relative to the profiled ``host``."""
        return self.gemm_flops / host.gemm_flops if self.gemm_flops else self.speed


@dataclass(frozen=True)
class HostFigures:
    """What :func:`measure_host` measured on this machine."""

    cores: int  # usable cores (os.sched_getaffinity)
    gemm_flops: float  # single-thread SGEMM, flop/s
    copy_bandwidth: float  # bytes/s of one thread copying 16 MB into a new array

    def link(self) -> Link:
        return Link("host-memory", self.copy_bandwidth, HOST_COPY_LATENCY,
                    f"measured: one thread's memcpy, {self.copy_bandwidth / GB:.1f} GB/s; "
                    f"{HOST_COPY_LATENCY * 1e6:g} us per copy of engine overhead (estimated)")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_host(repeats: int = 5) -> HostFigures:
    """Measure this machine's figures (one BLAS thread per caller, as CPU devices run),
    with the time other processes took from the calling thread taken out
    (:mod:`convnet.simulate.run_queue`)."""
    from threadpoolctl import threadpool_limits

    n = 384
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    src = np.ones(16 * 2 ** 20 // 4, dtype=np.float32)  # an activation-sized copy
    cores = usable_cores()
    with threadpool_limits(limits=1, user_api="blas"):
        a @ a  # warm-up
        with Shares([None]) as block:  # read at the machine's own speed, load taken out
            gemm = _median_seconds(lambda: a @ a, repeats)
            copy = _median_seconds(lambda: np.array(src, copy=True), repeats)  # as copy_from
    share = block.shares[0]
    return HostFigures(cores, 2 * n ** 3 / (gemm * share), src.nbytes / (copy * share))


LINKS = {link.name: link for link in (
    Link("pcie2-x16", 6 * GB, 10e-6,
         "published: PCIe 2.0 x16, 8 GB/s peak, ~6 effective between GPUs"),
    Link("pcie3-x16", 12 * GB, 10e-6, "published: PCIe 3.0 x16, 15.75 GB/s peak, ~12 effective"),
    Link("pcie4-x16", 24 * GB, 10e-6, "published: PCIe 4.0 x16, 31.5 GB/s peak, ~24 effective"),
    Link("nvlink3", 250 * GB, 5e-6, "published: NVLink 3 (A100), 300 GB/s per direction peak"),
    Link("eth-10g", 1.1 * GB, 50e-6, "published: 10 Gb/s Ethernet, ~1.1 GB/s with TCP"),
    Link("eth-100g", 11 * GB, 20e-6, "published: 100 Gb/s Ethernet, ~11 GB/s with RDMA"),
)}

DEVICE_KINDS = {kind.name: kind for kind in (
    DeviceKind("measured", 1.0, "host-memory",
               "the device the net was profiled on; its compute times as measured",
               own_hardware=False),
    DeviceKind("cluster-10g", 1.0, "eth-10g",
               "assumed: hosts like the profiled one, one device per host, 10 Gb Ethernet"),
    DeviceKind("cluster-100g", 1.0, "eth-100g",
               "assumed: hosts like the profiled one, one device per host, 100 Gb Ethernet"),
    DeviceKind("gpu-pcie3", 20.0, "pcie3-x16",
               "assumed: a GPU 20x the profiled device, GPUs talking over PCIe 3.0 x16"),
    DeviceKind("gpu-pcie4", 20.0, "pcie4-x16",
               "assumed: a GPU 20x the profiled device, GPUs talking over PCIe 4.0 x16"),
    DeviceKind("gpu-nvlink", 20.0, "nvlink3",
               "assumed: a GPU 20x the profiled device, GPUs talking over NVLink 3"),
    DeviceKind("k20-pcie2", 0.0, "pcie2-x16",
               "assumed: NVIDIA Tesla K20 (published 3.52 TFLOPS single-precision peak; "
               "~2.6 TFLOPS sustained SGEMM, 74% of peak, as cuBLAS reached on Kepler), "
               "GPUs on one PCIe 2.0 host",
               gemm_flops=2.6 * TFLOPS),
    DeviceKind("k40-pcie3", 0.0, "pcie3-x16",
               "assumed: NVIDIA Tesla K40 (published 4.29 TFLOPS single-precision peak; "
               "~3.2 TFLOPS sustained SGEMM), GPUs on one PCIe 3.0 host",
               gemm_flops=3.2 * TFLOPS),
)}


def device_kind(name: str) -> DeviceKind:
    """The kind called ``name``; a usage error naming the known ones otherwise."""
    try:
        return DEVICE_KINDS[name]
    except KeyError:
        raise UsageError(f"--simulate-devices: unknown device kind '{name}'; known: "
                         f"{', '.join(DEVICE_KINDS)}") from None


def link_of(kind: DeviceKind, host: HostFigures) -> Link:
    """The link between two devices of ``kind`` (the measured one for the host)."""
    return host.link() if kind.link == "host-memory" else LINKS[kind.link]
