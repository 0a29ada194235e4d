"""Shared helpers for the config-language tests: reference files and tiny config builders."""

from __future__ import annotations

from pathlib import Path

import pytest

from convnet.config import load_net
from convnet.errors import ConfigError
from tests.support import ROOT

# The twelve cuda-convnet2 originals, shipped with the project.
REFERENCE_DIR = ROOT / "examples" / "cuda-convnet2"
REFERENCE_NAMES = ["cifar10-11pct", "imagenet-1gpu", "imagenet-2gpu-data", "imagenet-2gpu-model",
                   "imagenet-4gpu-data", "imagenet-4gpu-data-model"]
IMAGENET_DIMS = {0: (3, 224, 224), 1: (1,)}
CIFAR_DIMS = {0: (3, 24, 24), 1: (1,)}

def reference_pair(name: str) -> tuple[Path, Path]:
    """The (layer-def, layer-params) paths of one reference net."""
    return REFERENCE_DIR / f"layers-{name}.cfg", REFERENCE_DIR / f"layer-params-{name}.cfg"


def reference_dims(name: str) -> dict[int, tuple[int, ...]]:
    return CIFAR_DIMS if name.startswith("cifar") else IMAGENET_DIMS


DATA_LAYERS = "[data]\ntype=data\ndataIdx=0\n\n[labels]\ntype=data\ndataIdx=1\n\n"


def logreg_head(source: str, outputs: int = 5) -> str:
    """Layer-def text of a classifier on ``source``: fc (``outputs`` wide), softmax
    ``probs`` and a ``cost.logreg`` on ``labels``."""
    return (f"\n[fc]\ntype=fc\ninputs={source}\noutputs={outputs}\n\n"
            "[probs]\ntype=softmax\ninputs=fc\n\n[cost]\ntype=cost.logreg\ninputs=labels,probs\n")
WEIGHT_PARAMS = "epsW=0.01\nepsB=0.02\nmomW=0.9\nmomB=0.9\n"


def write_pair(tmp_path: Path, layer_def: str | bytes,
               layer_params: str | bytes = "") -> tuple[Path, Path]:
    """Write a layer-def and a layer-params file under ``tmp_path``; return their paths."""
    paths = tmp_path / "layers.cfg", tmp_path / "params.cfg"
    for path, text in zip(paths, (layer_def, layer_params)):
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return paths


def load_text(tmp_path: Path, layer_def: str, layer_params: str = "",
              data_dims=None, num_classes=None):
    """load_net on texts written to ``tmp_path``; data dims default to 3x8x8 images + labels."""
    dims = {0: (3, 8, 8), 1: (1,)} if data_dims is None else data_dims
    return load_net(*write_pair(tmp_path, layer_def, layer_params), dims, num_classes)


def config_error(tmp_path: Path, layer_def: str, layer_params: str = "", **kwargs) -> ConfigError:
    """The ConfigError that loading these texts raises (fails the test if none)."""
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, layer_def, layer_params, **kwargs)
    return info.value


def long_chain(depth: int) -> tuple[str, str]:
    """Layer-def and layer-params texts of a chain ``depth`` layers deep: data, then
    fc and neuron layers in turn, a softmax and a logreg cost.  For tests of how the
    work from config text to plan grows with the layer count."""
    sections = [DATA_LAYERS.rstrip("\n")]
    params = []
    previous = "data"
    for k in range(depth):
        name = f"l{k}"
        if k % 2:
            sections.append(f"[{name}]\ntype=neuron\ninputs={previous}\nneuron=relu")
        else:
            sections.append(f"[{name}]\ntype=fc\ninputs={previous}\noutputs=4")
            params.append(f"[{name}]\n{WEIGHT_PARAMS}")
        previous = name
    sections.append(f"[probs]\ntype=softmax\ninputs={previous}")
    sections.append("[cost]\ntype=cost.logreg\ninputs=labels,probs")
    return "\n\n".join(sections) + "\n", "\n".join(params) + "\n[cost]\ncoeff=1\n"


def residual_pair(gpu: str = "0,1", stats: str = "global") -> tuple[str, str]:
    """(layer-def, layer-params) text of a small residual net with batch normalisation
    on 3x67x67 images (the scaled configs' size) and 10 classes: a stride-4 conv, bnorm
    and relu; a block of a stride-2 conv and bnorm beside a stride-2 1x1 projection and
    bnorm, added (eltsum, relu); an average pool over the whole map; fc, a bnorm of its
    flat features, fc10.  Every layer on ``gpu`` (data-parallel with several devices),
    every bnorm with ``stats``."""
    layers = f"""{DATA_LAYERS}[conv1]
type=conv
inputs=data
channels=3
filters=6
filterSize=5
stride=4
initW=0.1
gpu={gpu}

[bn1]
type=bnorm
inputs=conv1
neuron=relu
stats={stats}

[conv2]
type=conv
inputs=bn1
channels=6
filters=8
filterSize=3
padding=1
stride=2
initW=0.1

[bn2]
type=bnorm
inputs=conv2
stats={stats}

[proj]
type=conv
inputs=bn1
channels=6
filters=8
filterSize=1
stride=2
initW=0.2

[bnp]
type=bnorm
inputs=proj
stats={stats}
decay=0.5

[sum]
type=eltsum
inputs=bn2,bnp
neuron=relu

[pool]
type=pool
pool=avg
inputs=sum
channels=8
sizeX=9
stride=9

[fc1]
type=fc
inputs=pool
outputs=12
initW=0.2

[bnf]
type=bnorm
inputs=fc1
neuron=relu
stats={stats}

[fc2]
type=fc
inputs=bnf
outputs=10
initW=0.2

[probs]
type=softmax
inputs=fc2

[logprob]
type=cost.logreg
inputs=labels,probs
gpu={gpu}
"""
    conv = "epsW=0.05\nepsB=0\nmomW=0.9\nmomB=0\nwc=0.0005\n"
    other = "epsW=0.05\nepsB=0.05\nmomW=0.9\nmomB=0.9\n"
    # the layers before a bnorm learn no bias (its gradient is 0 up to rounding)
    params = "".join(f"[{name}]\n{conv if name in ('conv1', 'conv2', 'proj', 'fc1') else other}\n"
                     for name in ("conv1", "bn1", "conv2", "bn2", "proj", "bnp", "fc1", "bnf",
                                  "fc2"))
    return layers, params
