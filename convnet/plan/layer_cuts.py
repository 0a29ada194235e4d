"""Layer-wise splits of a net into pipeline stages, cut where the work balances.

A layer-wise split puts consecutive layers (in net order) on one device each,
stage after stage: the placement micro-batches pay for (docs/PIPELINE.md).
Where to cut is chosen from the config alone: each layer's multiply-adds per
case (the GEMMs of conv, local and fc layers; one per output value for the
others), and the cuts that make the busiest stage's share the smallest.  A net
whose largest layer holds most of the work cannot be balanced (the CIFAR-10
net's conv2 holds about three quarters), which :func:`stage_shares` shows.
"""

from __future__ import annotations

import math

from convnet.config.model import LayerDef, NetConfig
from convnet.plan.placements import Candidate

#: The micro-batch counts ``--auto-place`` tries a layer-wise split with.
PIPELINE_MICRO_BATCHES = (1, 2, 4, 8)


def layer_work(ldef: LayerDef) -> int:
    """Multiply-adds of one case's forward pass through ``ldef`` (its backward pass
    costs about twice as much, in the same proportion across layers)."""
    a = ldef.attrs
    if ldef.type in ("conv", "local"):
        outputs = a["modulesX"] ** 2 * a["filters"]
        return sum(outputs * a["channels"][i] // a["groups"][i] * a["filterSize"][i] ** 2
                   for i in range(len(ldef.inputs)))
    if ldef.type == "fc":
        return sum(math.prod(shape) * a["outputs"] for shape in ldef.input_shapes)
    return ldef.outputs


def placed_order(net: NetConfig) -> list[str]:
    return [ldef.name for ldef in net if not ldef.is_data]


def net_work(net: NetConfig) -> int:
    """Multiply-adds of one case's forward pass through the whole net."""
    return sum(layer_work(net[name]) for name in placed_order(net))


def balanced_cuts(net: NetConfig, stages: int) -> list[str]:
    """The first layer of each stage after the first, for ``stages`` stages of
    consecutive layers, so that the busiest stage has the least work."""
    names = placed_order(net)
    if not 1 <= stages <= len(names):
        raise ValueError(f"{stages} stages of {len(names)} layers")
    prefix = [0]
    for name in names:
        prefix.append(prefix[-1] + layer_work(net[name]))
    # best[k][i]: the least busiest-stage work of the first i layers in k stages
    best = [[math.inf] * (len(names) + 1) for _ in range(stages + 1)]
    start = [[0] * (len(names) + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(k, len(names) + 1):
            for j in range(k - 1, i):
                busiest = max(best[k - 1][j], prefix[i] - prefix[j])
                if busiest < best[k][i]:
                    best[k][i], start[k][i] = busiest, j
    cuts, i = [], len(names)
    for k in range(stages, 1, -1):
        i = start[k][i]
        cuts.append(names[i])
    return cuts[::-1]


def layer_wise_gpus(net: NetConfig, cuts: list[str]) -> dict[str, tuple[int, ...]]:
    """Every placed layer's one device: the number of ``cuts`` at or before it."""
    out, device = {}, 0
    for name in placed_order(net):
        device += name in cuts
        out[name] = (device,)
    return out


def stage_shares(net: NetConfig, cuts: list[str]) -> list[float]:
    """Each stage's share of the net's work."""
    gpus = layer_wise_gpus(net, cuts)
    work = [0] * (len(cuts) + 1)
    for name, (device,) in gpus.items():
        work[device] += layer_work(net[name])
    total = sum(work) or 1
    return [w / total for w in work]


def pipeline_candidates(net: NetConfig, devices: int) -> list[Candidate]:
    """``--auto-place``'s layer-wise splits: the balanced cut into ``devices`` stages
    (a stage per device), with each of :data:`PIPELINE_MICRO_BATCHES`."""
    if devices < 2 or devices > len(placed_order(net)):
        return []
    cuts = balanced_cuts(net, devices)
    gpus = layer_wise_gpus(net, cuts)
    weights = {name: 1 for name in gpus if net[name].has_weights}
    where = ", ".join(cuts)
    return [Candidate(f"layer-wise split at {where}, --micro-batches {m}", gpus, weights, m)
            for m in PIPELINE_MICRO_BATCHES]
