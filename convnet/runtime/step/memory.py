"""How many bytes of arrays each logical device holds during training: the executor's
own memory accounting (``Executor.memory``), and the process's peak resident size.

A :class:`MemoryMeter` set as ``executor.memory`` is sampled after every task of a
step: it walks the weight store (weights, momentum, weight-gradient accumulators)
and what the step keeps (activations, the state each layer keeps for its backward
pass (im2col columns, padded inputs, masks, norm denominators), the gradients of
activations in flight, and the all-reduce's summed gradient slices, counted with
the weight gradients), attributes each array to the device that holds it, and
keeps each device's high-water mark with what it held at that moment, per
category.  An array and its views count once (by the array that owns the memory);
weights and momentum that the replicas of a layer share
(:class:`~convnet.runtime.step.weights.WeightStore`) count on the first replica's device.

What it does not see: temporaries that live only inside one task (a kernel's
scratch and GEMM outputs before they become the layer's output) and the kernels'
per-thread reusable scratch buffers; they are part of the process's resident size
(:func:`peak_rss_bytes`), which is why both are reported.  The sampling walks a few
hundred arrays per task: it is for measurements (the benchmarks, the test of the
plan's memory estimate), not for every training run, and is off unless set.
"""

from __future__ import annotations

import resource
import sys
import threading
from dataclasses import dataclass, field

from convnet.plan.memory import PARAMETERS, STEP
from convnet.plan.ops import AllReduce

#: The categories, in report order: the same as the plan's estimate.
CATEGORIES = PARAMETERS + STEP


def _owner(a):
    """The array that owns ``a``'s memory (``a`` itself unless it is a view)."""
    base = getattr(a, "base", None)
    while base is not None and hasattr(base, "nbytes") and hasattr(base, "shape"):
        a, base = base, getattr(base, "base", None)
    return a


def _arrays(obj):
    """Every array in a nest of tuples, lists and dicts (a layer's backward state)."""
    if obj is None:
        return
    if hasattr(obj, "nbytes") and hasattr(obj, "shape"):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _arrays(item)
    elif isinstance(obj, dict):
        for item in list(obj.values()):
            yield from _arrays(item)


@dataclass
class DevicePeak:
    """One device's high-water mark and what it held then (bytes per category)."""

    device: int
    peak_bytes: int = 0
    at_peak: dict = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))

    @property
    def activation_bytes(self) -> int:
        """What the step itself held at the peak: activations, kept state, gradients."""
        return sum(self.at_peak[k] for k in STEP)


class MemoryMeter:
    """Per-device high-water marks of the arrays the executor holds (see the module
    docstring).  ``peaks[d]`` is device d's; ``process_peak_bytes`` the most the
    devices held together at one sampling (arrays shared by devices counted once)."""

    def __init__(self, executor):
        self.plan = executor.plan
        self.store = executor.store
        self.is_local = executor.cluster.is_local
        self._reducers = {op.index: op.replica_devices for op in self.plan.ops
                          if isinstance(op, AllReduce)}
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.peaks = [DevicePeak(d) for d in range(self.plan.num_devices)]
        self.process_peak_bytes = 0

    def _device_of_state(self, layer: str, shard: int) -> int:
        return self.plan.producer_of(layer, shard)[1]

    def _holdings(self, buffers):
        """(device, category, array) of everything held now."""
        layers = self.plan.layers
        for group, category in ((self.store.weights, "weights"),
                                (self.store.momentum, "momentum"),
                                (self.store.grads, "weight_grads")):
            for layer, replicas in list(group.items()):
                devices = layers[layer].devices
                for replica, arrays in enumerate(list(replicas)):
                    if replica and arrays is replicas[0]:
                        continue  # one copy shared by the replicas: the first one's device
                    for a in _arrays(dict(arrays)):
                        yield devices[replica], category, a
        if buffers is None:
            return
        for (_, _, device), a in dict(buffers.acts).items():
            yield device, "activations", a
        for (layer, shard), state in dict(buffers.states).items():
            device = self._device_of_state(layer, shard)
            for a in _arrays(state):
                yield device, "kept_for_backward", a
        for (_, _, device), a in dict(buffers.grads).items():
            yield device, "gradients", a
        for (_, _, _, device), a in dict(buffers.gouts).items():
            yield device, "gradients", a
        for (layer, _, rank), reduced in dict(buffers.reduced).items():
            for a in _arrays(reduced):
                yield layers[layer].devices[rank], "weight_grads", a
        for index, scratch in dict(buffers.collectives).items():
            devices = self._reducers[index]
            for rank, chunk in dict(scratch.get("chunks", {})).items():
                for a in _arrays(chunk):
                    yield devices[rank], "weight_grads", a

    def sample(self, buffers=None) -> None:
        """Take the current holdings into the high-water marks (thread-safe)."""
        with self._lock:
            per_device = [dict.fromkeys(CATEGORIES, 0) for _ in self.peaks]
            seen: list[set] = [set() for _ in self.peaks]
            everywhere: set = set()
            total = 0
            for device, category, a in self._holdings(buffers):
                owner = _owner(a)
                key = id(owner)
                if key not in everywhere:
                    everywhere.add(key)
                    total += int(owner.nbytes)
                if not self.is_local(device) or key in seen[device]:
                    continue
                seen[device].add(key)
                per_device[device][category] += int(owner.nbytes)
            for peak, held in zip(self.peaks, per_device):
                now = sum(held.values())
                if now > peak.peak_bytes:
                    peak.peak_bytes, peak.at_peak = now, held
            self.process_peak_bytes = max(self.process_peak_bytes, total)

    def summary(self) -> dict:
        """JSON-able: per device its peak and the categories at the peak."""
        return {"devices": [{"device": p.device, "peak_bytes": p.peak_bytes,
                             "activation_bytes": p.activation_bytes, **p.at_peak}
                            for p in self.peaks],
                "process_peak_bytes": self.process_peak_bytes}


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (``getrusage``; Linux reports KiB,
    macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024
