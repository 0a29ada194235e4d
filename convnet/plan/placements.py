"""The placements ``--auto-place N`` chooses from: ``gpu=`` settings and update periods.

Each candidate gives every layer that takes ``gpu=`` (all but data layers) an
explicit device list, so the layer-def file written from it says where every
layer runs instead of relying on inheritance.  The placements, for N devices:

* ``one device``: everything on device 0;
* ``data-parallel``: every layer replicated on all N devices;
* ``conv data-parallel, rest on 0``: the convolutional part (every layer up to
  and including the last conv, local, pool or norm layer in net order)
  replicated on all N devices, the layers after it on device 0;
* ``conv data-parallel, rest data-parallel on K``: the same with the rest
  replicated on devices 0..K-1, for every K that divides N, 1 < K < N;
* ``conv data-parallel, towers model-parallel``: as ``rest on 0``, but where two
  or more layers after the convolutional part read only from it (parallel
  towers, as fca and fcb of the digits net), the towers go round-robin over the
  devices; a layer with one input continues its input's tower, any other on
  device 0.

In each, ``pass`` layers that read the same inputs (the concatenations of a
hybrid net's towers, which must sit on disjoint devices) and would share one
device go round-robin over the devices instead.  One more candidate,
``as written``, is the config's own placement (inherited lists made explicit)
where it differs from the others and names no device past N: a hybrid config
written for N devices is then ranked against the family.

Every placement whose replica counts differ (P = Rmax / Rmin passes, SPEC
section 3) comes in one variant per update period: for each u that divides P,
every weight layer updates every lcm(T, u) passes (its activation period T),
so u = 1 updates as often as the SPEC allows and u = P once per minibatch, the
same update as one device (SPEC 5.3); the name gives u (the update period of
the layers with the fewest replicas).  Each candidate sets the update period
of every weight layer explicitly.  Only candidates that differ from those
before them are kept; whether the planner accepts each is for the caller to
check (``make_plan``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from convnet.config.model import NetConfig
from convnet.errors import PlanError
from convnet.plan.planner import written_devices

#: Layer types that make up the convolutional part of a net.
CONV_PART_TYPES = ("conv", "local", "pool", "cmrnorm", "rnorm", "cnorm")


@dataclass(frozen=True)
class Candidate:
    name: str
    gpus: dict[str, tuple[int, ...]]  # layer name -> gpu= list, for every placed layer
    update_periods: dict[str, int] = field(default_factory=dict)  # weight layer -> U
    micro_batches: int = 1  # --micro-batches the placement trains with (docs/PIPELINE.md)

    def apply(self, net: NetConfig) -> NetConfig:
        """A copy of ``net`` with this candidate's gpu= lists and update periods."""
        layers = {}
        for name, ldef in net.layers.items():
            ldef = replace(ldef, gpu=self.gpus.get(name, ldef.gpu))
            if name in self.update_periods:
                ldef = replace(ldef, params={**ldef.params,
                                             "updatePeriod": self.update_periods[name]})
            layers[name] = ldef
        return replace(net, layers=layers)


def placed_layers(net: NetConfig) -> list[str]:
    """The layers that take a gpu= list, in net order (data layers take none)."""
    return [ldef.name for ldef in net if not ldef.is_data]


def conv_part(net: NetConfig) -> list[str]:
    """The placed layers up to and including the last conv/local/pool/norm layer."""
    names = placed_layers(net)
    last = max((i for i, name in enumerate(names) if net.layers[name].type in CONV_PART_TYPES),
               default=-1)
    return names[:last + 1]


def towers(net: NetConfig, conv: list[str], devices: int) -> dict[str, tuple[int, ...]] | None:
    """Devices of the layers after ``conv`` with parallel towers round-robin, or None
    when fewer than two layers read only from the convolutional part."""
    rest = [name for name in placed_layers(net) if name not in conv]
    heads = [name for name in rest
             if all(i in conv or net.layers[i].is_data for i in net.layers[name].inputs)]
    if len(heads) < 2:
        return None
    out = {head: (i % devices,) for i, head in enumerate(heads)}
    for name in rest:
        if name in out:
            continue
        placed = [i for i in net.layers[name].inputs if not net.layers[i].is_data]
        out[name] = out.get(placed[0], (0,)) if len(placed) == 1 else (0,)
    return out


def update_period_variants(net: NetConfig, gpus: dict[str, tuple[int, ...]]
                           ) -> list[tuple[str, dict[str, int]]]:
    """(name suffix, weight layer -> U) for each update period the placement allows."""
    weights = [name for name in gpus if net.layers[name].has_weights]
    counts = [len(d) for d in gpus.values()]
    rmin, passes = min(counts), max(counts) // min(counts)
    periods = {name: len(gpus[name]) // rmin for name in weights}
    if passes == 1:
        return [("", dict.fromkeys(weights, 1))]
    variants = []
    for u in (d for d in range(1, passes + 1) if passes % d == 0):
        chosen = {}
        for name, t in periods.items():
            every = math.lcm(t, u)
            chosen[name] = every if passes % every == 0 else passes
        label = (" (one update per minibatch)" if u == passes else
                 " (an update every pass)" if u == 1 else "")
        variants.append((f", updatePeriod={u}{label}", chosen))
    return variants


def candidates(net: NetConfig, devices: int) -> list[Candidate]:
    """The family of placements of ``net`` on ``devices`` logical devices (see above)."""
    names = placed_layers(net)
    everywhere = tuple(range(devices))
    found = [("one device", dict.fromkeys(names, (0,))),
             ("data-parallel", dict.fromkeys(names, everywhere))]
    conv = conv_part(net)
    if conv and len(conv) < len(names):
        split = {name: everywhere if name in conv else (0,) for name in names}
        found.append(("conv data-parallel, rest on 0", split))
        for k in range(2, devices):
            if devices % k == 0:
                found.append((f"conv data-parallel, rest data-parallel on {k}",
                              {**split, **{n: tuple(range(k)) for n in names if n not in conv}}))
        model = towers(net, conv, devices)
        if model is not None:
            found.append(("conv data-parallel, towers model-parallel", {**split, **model}))
    found = [_with_passes_spread(net, name, gpus, devices) for name, gpus in found]
    unique: list[Candidate] = []
    written = as_written(net, devices)
    if written is not None and all(written != gpus for _, gpus in found):
        unique.append(Candidate("as written", written))
    for name, gpus in found:
        for suffix, periods in update_period_variants(net, gpus):
            candidate = Candidate(name + suffix, gpus, periods)
            if all((candidate.gpus, candidate.update_periods) !=
                   (kept.gpus, kept.update_periods) for kept in unique):
                unique.append(candidate)
    return unique


def spread_pass_groups(net: NetConfig, gpus: dict[str, tuple[int, ...]],
                       devices: int) -> dict[str, tuple[int, ...]]:
    """``gpus`` with the one-device ``pass`` layers that read the same inputs on devices
    0, 1, ... in net order (mod ``devices``): two such layers may not share a device."""
    out, taken = dict(gpus), {}
    for ldef in net:
        if ldef.type == "pass" and len(out.get(ldef.name, ())) == 1:
            turn = taken.get(ldef.inputs, 0)
            taken[ldef.inputs] = turn + 1
            out[ldef.name] = (turn % devices,)
    return out


def _with_passes_spread(net: NetConfig, name: str, gpus: dict[str, tuple[int, ...]],
                        devices: int) -> tuple[str, dict[str, tuple[int, ...]]]:
    spread = spread_pass_groups(net, gpus, devices)
    return (name if spread == gpus else f"{name}, pass layers spread"), spread


def as_written(net: NetConfig, devices: int) -> dict[str, tuple[int, ...]] | None:
    """The config's own device list of every placed layer, or None where it names a
    device past ``devices``."""
    try:
        written = written_devices(net, devices)
    except PlanError:
        return None
    return {name: written[name] for name in placed_layers(net)}
