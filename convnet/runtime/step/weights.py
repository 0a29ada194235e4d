"""The weight state of every replica: weights, momentum and summed weight gradients.

Weights start identical on every replica (drawn once per layer from a
generator seeded by the run's seed and the layer name, then copied), and stay
identical because every replica applies the same all-reduced gradient (or,
with a sharded update, gathers the slices the others updated with it; the
momentum of replica r is then current on its own slice only, and
:meth:`WeightStore.state_arrays` assembles it from the owners).  Under local
SGD the replicas drift apart between averaging steps and each keeps whole
momentum of its own (the ``own_updates`` layers); a checkpoint then holds
replica 0's weights and momentum, which resuming puts onto every replica.

Replicas in one address space (CPU logical devices of one process) can share
one copy instead (``shared`` layers): every replica's entry is then the same
dict of weights and the same dict of momentum.  The executor asks for it
where the replicas would hold equal weights anyway, under synchronous SGD
with a sharded update: each rank updates its own slice of the one copy, and
the gather of the others' slices has nothing left to copy.  The update work
is the same element by element, so the weights are bitwise those of separate
copies; the memory of the layer's weights and momentum is that of one replica.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from convnet.config.layer_types.weight_shapes import RUNNING_KEYS, is_learned_key
from convnet.config.model import NetConfig
from convnet.errors import DataError
from convnet.plan.ops import AllReduce, Plan
from convnet.runtime.step.learning_rules import LearningRule, learning_rules
from convnet.layers.connectivity import layer_rng


def shared_weight_layers(plan: Plan, net: NetConfig, *, sliced_in_one_memory,
                         synchronous: bool, processes: int,
                         own_updates: Collection[str] = ()) -> frozenset[str]:
    """The replicated layers whose replicas share one copy of the weights and momentum.

    Those whose replicas would hold the same weights anyway (``synchronous``
    SGD, and not one of the ``own_updates`` layers: local SGD, of the run or of
    the layer, and async give each replica its own update; no ``wball``
    projection, which needs whole arrays on every rank; no running averages, which each
    replica's forward call moves in place) and can share it:
    ``sliced_in_one_memory(replica_devices)`` says that the replicas read one
    another's memory (CPU devices of a run of one process) and that their
    collective updates by slices (each rank its own slice of the one copy; a
    whole update on every rank would apply it once per replica).
    The executor builds its :class:`WeightStore` with it, and the memory figures
    of ``--print-plan``, ``--simulate`` and the memory check count one copy for
    these layers, so that all of them describe the run that would happen.
    """
    if not synchronous or processes > 1:
        return frozenset()
    return frozenset(
        op.layer for op in plan.ops if isinstance(op, AllReduce)
        and op.layer not in own_updates and sliced_in_one_memory(op.replica_devices)
        and not any(rule.ball for rule in learning_rules(net[op.layer]).values())
        and not set(RUNNING_KEYS) & set(net[op.layer].param_shapes()))


class WeightStore:
    """Per layer and replica (in the order of the layer's devices): ``weights``,
    ``momentum`` (the optimizer's state, one array per weight array) and
    ``grads`` (the weight gradients summed since the last update); ``rules``
    per layer: the learning rule of each weight array.

    ``collectives`` maps a replica set's devices to its all-reduce; the store
    reads it to assemble momentum that a sharded update spread over the replicas
    (except in the ``own_updates`` layers, whose replicas each update their whole
    weights and momentum from their own gradients: local SGD or async).

    In a multi-process run ``local(device)`` says which devices are this
    process's: the replicas on the others are ``None`` here, and the state
    for a checkpoint is put together from every process's
    :meth:`local_state` by :func:`assemble_state`.

    The replicas of each layer in ``shared`` (all on this process's CPU devices)
    share one weights dict and one momentum dict, made on the first replica's
    device (see the module docstring); their momentum is whole.
    """

    def __init__(self, net: NetConfig, plan: Plan, devices: list, layers: dict, seed: int,
                 collectives: dict, local=lambda device: True,
                 own_updates: frozenset[str] = frozenset(),
                 shared: frozenset[str] = frozenset()):
        self.plan = plan
        self.own_updates = frozenset(own_updates)
        self.shared = frozenset(shared)
        self.devices = devices
        self.collectives = collectives
        self.local = local
        self.weights: dict[str, list[dict]] = {}
        self.momentum: dict[str, list[dict]] = {}
        self.grads: dict[str, list[dict]] = {}
        self.rules: dict[str, dict[str, LearningRule]] = {}
        #: per layer, the names of the arrays that learn (what an update changes)
        self.learned: dict[str, list[str]] = {}
        for name, layer in layers.items():
            host = layer.init_params(layer_rng(seed, name))
            self.rules[name] = learning_rules(net[name])
            self.learned[name] = sorted(k for k in host if is_learned_key(k))
            if host.keys() != self.rules[name].keys():
                raise ValueError(f"layer '{name}' has weight arrays {sorted(host)}, but "
                                 f"learning rules for {sorted(self.rules[name])}")
            devs = plan.layers[name].devices
            if name in self.shared:
                weights = {k: devices[devs[0]].to_device(v) for k, v in host.items()}
                momentum = {k: devices[devs[0]].xp.zeros_like(v) for k, v in weights.items()}
                self.weights[name] = [weights] * len(devs)
                self.momentum[name] = [momentum] * len(devs)
            else:
                self.weights[name] = [{k: devices[d].to_device(v) for k, v in host.items()}
                                      if local(d) else None for d in devs]
                self.momentum[name] = [{k: devices[d].xp.zeros_like(v) for k, v in w.items()}
                                       if w is not None else None
                                       for d, w in zip(devs, self.weights[name])]
            self.grads[name] = [{} if local(d) else None for d in devs]

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Weights and momentum of every layer (replica 0, on the host) for checkpoints
        (of a one-process run; see :func:`assemble_state` for several)."""
        return assemble_state([self.local_state()])

    def local_state(self) -> tuple[dict[str, np.ndarray], list[tuple[str, int, int, np.ndarray]]]:
        """This process's share of the state: whole arrays (weights and momentum of the
        layers whose replica 0 is here) and ``(key, lo, hi, values)`` momentum slices
        (of the replicas here that own a slice in a sharded update)."""
        whole, slices = {}, []
        for name in self.weights:
            devs = self.plan.layers[name].devices
            collective = self.collectives.get(devs)
            sharded = (name not in self.own_updates and name not in self.shared
                       and collective is not None and collective.sharded)
            for replica, d in enumerate(devs):
                if not self.local(d):
                    continue
                host = self.devices[d].to_host
                if replica == 0:
                    for k, v in self.weights[name][0].items():
                        whole[f"weights/{name}/{k}"] = np.array(host(v))
                    for k, v in self.momentum[name][0].items():
                        whole[f"momentum/{name}/{k}"] = np.array(host(v))
                elif sharded:
                    for k, v in self.momentum[name][replica].items():
                        lo, hi = collective.bounds(v.size, replica)
                        slices.append((f"momentum/{name}/{k}", lo, hi,
                                       np.array(host(v.reshape(-1)[lo:hi]))))
        return whole, slices

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Put checkpointed weights and momentum onto every replica of this process
        (shapes must match); arrays not in ``arrays`` keep their values (a run started
        from another's weights loads only the layers that fit).  The momentum of a
        frozen array (learning rate 0) is zeroed whatever was saved: it never moves."""
        for name in self.weights:
            for group, store in (("weights", self.weights), ("momentum", self.momentum)):
                for replica, d in enumerate(self.plan.layers[name].devices):
                    if store[name][replica] is None or (
                            replica and store[name][replica] is store[name][0]):
                        continue  # another process's replica, or the shared copy, done
                    for k, v in store[name][replica].items():
                        key = f"{group}/{name}/{k}"
                        if key not in arrays:
                            continue
                        if tuple(arrays[key].shape) != tuple(v.shape):
                            raise DataError(f"checkpoint '{key}' has shape "
                                            f"{tuple(arrays[key].shape)}, the net needs "
                                            f"{tuple(v.shape)}")
                        value = arrays[key]
                        if group == "momentum" and self.rules[name][k].frozen:
                            value = np.zeros_like(value)
                        store[name][replica][k] = self.devices[d].to_device(value)


def assemble_state(shares) -> dict[str, np.ndarray]:
    """The whole state from every process's :meth:`WeightStore.local_state`: replica 0's
    arrays, with the momentum of a sharded update taken slice by slice from its owners."""
    out = {}
    for whole, _ in shares:
        out.update(whole)
    for _, slices in shares:
        for key, lo, hi, values in slices:
            out[key].reshape(-1)[lo:hi] = values
    return out
