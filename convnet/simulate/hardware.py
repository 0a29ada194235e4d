"""Device kinds and the links between them, for the simulator.

The compute speed of the device the net is profiled on is *measured* (see
:mod:`convnet.simulate.costs`); every other figure here is an assumption:
published peak or typical figures, not measurements of this engine.  A kind's
``speed`` divides the profiled compute times, so a prediction for a kind other
than ``measured`` is only as good as that factor.

Links: ``bandwidth`` in bytes per second one way, ``latency`` in seconds per
transfer (including this engine's per-operation overhead for ``host-shm``).
"""

from __future__ import annotations

from dataclasses import dataclass

from convnet.errors import UsageError

GB = 1e9


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float  # bytes/s, one direction
    latency: float  # seconds per transfer
    source: str  # where the figure comes from


@dataclass(frozen=True)
class DeviceKind:
    name: str
    speed: float  # compute speed relative to the profiled device
    link: str  # name in LINKS: how two devices of this kind exchange data
    source: str

    @property
    def assumed(self) -> bool:
        """Whether the compute speed is an assumption rather than the profile's."""
        return self.name != "measured"


LINKS = {link.name: link for link in (
    Link("host-shm", 5 * GB, 30e-6,
         "assumed: memcpy between worker threads of one host, ~5 GB/s with numpy; "
         "30 us per copy op of engine overhead"),
    Link("pcie3-x16", 12 * GB, 10e-6, "published: PCIe 3.0 x16, 15.75 GB/s peak, ~12 effective"),
    Link("pcie4-x16", 24 * GB, 10e-6, "published: PCIe 4.0 x16, 31.5 GB/s peak, ~24 effective"),
    Link("nvlink3", 250 * GB, 5e-6, "published: NVLink 3 (A100), 300 GB/s per direction peak"),
    Link("eth-10g", 1.1 * GB, 50e-6, "published: 10 Gb/s Ethernet, ~1.1 GB/s with TCP"),
    Link("eth-100g", 11 * GB, 20e-6, "published: 100 Gb/s Ethernet, ~11 GB/s with RDMA"),
)}

DEVICE_KINDS = {kind.name: kind for kind in (
    DeviceKind("measured", 1.0, "host-shm",
               "the device the net was profiled on; its compute times as measured"),
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
)}


def device_kind(name: str) -> DeviceKind:
    """The kind called ``name``; a usage error naming the known ones otherwise."""
    try:
        return DEVICE_KINDS[name]
    except KeyError:
        raise UsageError(f"--simulate-devices: unknown device kind '{name}'; known: "
                         f"{', '.join(DEVICE_KINDS)}") from None


def link_of(kind: DeviceKind) -> Link:
    return LINKS[kind.link]
