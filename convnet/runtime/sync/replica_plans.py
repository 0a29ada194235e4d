"""Which plans can be trained by replicas that run apart (``--sync local:K`` and
``async``): each replica a one-device copy of the whole net, so every layer must be
replicated on the same devices, and no layer may need the other replicas at every step."""

from __future__ import annotations

from convnet.config.model import NetConfig
from convnet.plan.ops import Plan


def async_replica_devices(plan: Plan) -> tuple[int, ...] | None:
    """The devices of the replicas when every placed layer of ``plan`` is replicated on
    the same devices in the same order (a data-parallel net); None otherwise."""
    lists = {p.devices for p in plan.layers.values() if p.devices}
    return next(iter(lists)) if len(lists) == 1 and plan.num_passes == 1 else None


def replica_statistics_layers(plan: Plan, net: NetConfig) -> list[str]:
    """The layers of ``plan`` whose statistics are combined over several replicas at
    every step (bnorm's ``stats=global``): replicas that run apart cannot train them."""
    return [name for name, p in plan.layers.items()
            if p.replicas > 1 and net[name].statistics_size]
