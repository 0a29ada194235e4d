"""The weight state of every replica: weights, momentum and summed weight gradients.

Weights start identical on every replica (drawn once per layer from a
generator seeded by the run's seed and the layer name, then copied), and stay
identical because every replica applies the same all-reduced gradient (or,
with a sharded update, gathers the slices the others updated with it; the
momentum of replica r is then current on its own slice only, and
:meth:`WeightStore.state_arrays` assembles it from the owners).
"""

from __future__ import annotations

import zlib

import numpy as np

from convnet.config.model import NetConfig
from convnet.errors import DataError
from convnet.plan.ops import Plan
from convnet.runtime.learning_rules import LearningRule, learning_rules


class WeightStore:
    """Per layer and replica (in the order of the layer's devices): ``weights``,
    ``momentum`` (the optimizer's state, one array per weight array) and
    ``grads`` (the weight gradients summed since the last update); ``rules``
    per layer: the learning rule of each weight array.

    ``collectives`` maps a replica set's devices to its all-reduce; the store
    reads it to assemble momentum that a sharded update spread over the replicas.
    """

    def __init__(self, net: NetConfig, plan: Plan, devices: list, layers: dict, seed: int,
                 collectives: dict):
        self.plan = plan
        self.devices = devices
        self.collectives = collectives
        self.weights: dict[str, list[dict]] = {}
        self.momentum: dict[str, list[dict]] = {}
        self.grads: dict[str, list[dict]] = {}
        self.rules: dict[str, dict[str, LearningRule]] = {}
        for name, layer in layers.items():
            rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
            host = layer.init_params(rng)
            self.rules[name] = learning_rules(net[name])
            if host.keys() != self.rules[name].keys():
                raise ValueError(f"layer '{name}' has weight arrays {sorted(host)}, but "
                                 f"learning rules for {sorted(self.rules[name])}")
            devs = plan.layers[name].devices
            self.weights[name] = [{k: devices[d].to_device(v) for k, v in host.items()}
                                  for d in devs]
            self.momentum[name] = [{k: devices[d].xp.zeros_like(v) for k, v in w.items()}
                                   for d, w in zip(devs, self.weights[name])]
            self.grads[name] = [{} for _ in devs]

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Weights and momentum of every layer (replica 0, on the host) for checkpoints."""
        out = {}
        for name in self.weights:
            dev = self.devices[self.plan.layers[name].devices[0]]
            for k, v in self.weights[name][0].items():
                out[f"weights/{name}/{k}"] = dev.to_host(v)
            for k in self.momentum[name][0]:
                out[f"momentum/{name}/{k}"] = self._momentum_on_host(name, k)
        return out

    def _momentum_on_host(self, name: str, key: str) -> np.ndarray:
        """The momentum of ``name``'s weights ``key``: replica 0's, or with a sharded
        update each slice from the replica that owns it."""
        devs = self.plan.layers[name].devices
        first = self.devices[devs[0]].to_host(self.momentum[name][0][key])
        collective = self.collectives.get(devs)
        if collective is None or not collective.sharded:
            return first
        whole = np.array(first)  # to_host may return a view of the device's array
        flat = whole.reshape(-1)
        for owner in range(1, len(devs)):
            lo, hi = collective.bounds(flat.size, owner)
            part = self.devices[devs[owner]].to_host(self.momentum[name][owner][key])
            flat[lo:hi] = part.reshape(-1)[lo:hi]
        return whole

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Put checkpointed weights and momentum onto every replica (shapes must match)."""
        for name in self.weights:
            for group, store in (("weights", self.weights), ("momentum", self.momentum)):
                for replica, d in enumerate(self.plan.layers[name].devices):
                    for k, v in store[name][replica].items():
                        key = f"{group}/{name}/{k}"
                        if key not in arrays:
                            raise DataError(f"checkpoint has no '{key}': it was saved from "
                                            f"another net")
                        if tuple(arrays[key].shape) != tuple(v.shape):
                            raise DataError(f"checkpoint '{key}' has shape "
                                            f"{tuple(arrays[key].shape)}, the net needs "
                                            f"{tuple(v.shape)}")
                        store[name][replica][k] = self.devices[d].to_device(arrays[key])
