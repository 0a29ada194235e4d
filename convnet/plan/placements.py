"""The placements ``--auto-place N`` chooses from: a small family of ``gpu=`` settings.

Each candidate gives every layer that takes ``gpu=`` (all but data layers) an
explicit device list, so the layer-def file written from it says where every
layer runs instead of relying on inheritance.  The family, for N devices:

* ``one device``: everything on device 0;
* ``data-parallel``: every layer replicated on all N devices;
* ``conv data-parallel, rest on 0``: the convolutional part (every layer up to
  and including the last conv, local, pool or norm layer in net order)
  replicated on all N devices, the layers after it on device 0;
* ``conv data-parallel, towers model-parallel``: as above, but where two or more
  layers after the convolutional part read only from it (parallel towers, as
  fca and fcb of the digits net), the towers go round-robin over the devices;
  a layer with one input continues its input's tower, any other on device 0.

Only candidates that differ from those before them are kept; whether the
planner accepts each is for the caller to check (``make_plan``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from convnet.config.model import NetConfig

#: Layer types that make up the convolutional part of a net.
CONV_PART_TYPES = ("conv", "local", "pool", "cmrnorm", "rnorm", "cnorm")


@dataclass(frozen=True)
class Candidate:
    name: str
    gpus: dict[str, tuple[int, ...]]  # layer name -> gpu= list, for every placed layer

    def apply(self, net: NetConfig) -> NetConfig:
        """A copy of ``net`` with this candidate's gpu= lists."""
        layers = {name: replace(ldef, gpu=self.gpus.get(name, ldef.gpu))
                  for name, ldef in net.layers.items()}
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


def candidates(net: NetConfig, devices: int) -> list[Candidate]:
    """The family of placements of ``net`` on ``devices`` logical devices (see above)."""
    names = placed_layers(net)
    everywhere = tuple(range(devices))
    found = [Candidate("one device", dict.fromkeys(names, (0,))),
             Candidate("data-parallel", dict.fromkeys(names, everywhere))]
    conv = conv_part(net)
    if conv and len(conv) < len(names):
        split = {name: everywhere if name in conv else (0,) for name in names}
        found.append(Candidate("conv data-parallel, rest on 0", split))
        model = towers(net, conv, devices)
        if model is not None:
            found.append(Candidate("conv data-parallel, towers model-parallel",
                                   {**split, **model}))
    unique: list[Candidate] = []
    for candidate in found:
        if all(candidate.gpus != kept.gpus for kept in unique):
            unique.append(candidate)
    return unique
