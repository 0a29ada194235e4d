"""Render the layer-type table of :mod:`convnet.config.layer_types.table` and the neuron
table as Markdown (docs/CONFIG.md).

Generated, not written by hand, so the reference cannot drift from what the
parser accepts: ``python -m convnet.config.keydoc > docs/CONFIG.md``, and a
test compares the file with this output.
"""

from __future__ import annotations

from convnet.config.layer_types.table import LAYER_TYPES, REQUIRED, TYPE_ALIASES, Key, LayerType
from convnet.kernels.neurons import NEURONS

INTRO = """# Config language reference

Generated from the parser's key table by `python -m convnet.config.keydoc`;
do not edit by hand. Every layer-def section takes `type` and, unless noted,
`inputs` (comma list of earlier layers), `gpu` (comma list of logical device
indices) and `neuron` (an activation applied to the layer's output). Keys
marked *per input* take one value per input (a single value is used for all).
Keys of the *params* column go in the layer-params file (they are also
accepted in the layer-def section; the params file wins). *Hints* tuned the
original CUDA kernels: they are checked and otherwise ignored.

## Dialects

Files written for these projects load as those projects read them:

- **cuda-convnet2** (2014): every key and type below.
- **cuda-convnet** (v1, 2011): the *v1 spellings* listed per type
  (`numFilters`, `numOutputs`, `sizeX` of `rnorm`/`cnorm`), `partialSum` as a
  hint, neuron `abstanh[a,b]`, and `filterChannels` (without `randSparse` it
  must equal `channels / groups`).  v1's `randSparse=1` on a conv or local
  input (per input): each of its `groups` filter groups reads `filterChannels`
  channels drawn at random (default `channels / groups`), with v1's rules:
  `groups` above 1, `filterChannels` dividing `channels`, and `groups x
  filterChannels` a multiple of `channels`. The table is that many random
  permutations of the channels cut into the groups' subsets (each group reads
  distinct channels, every channel is read by as many groups), drawn from the
  run's `--seed` and the layer's name, saved in checkpoints (a resumed run
  keeps its checkpoint's) and shown by `--print-plan`. v1's limits of its CUDA
  kernels (`filterChannels` a multiple of 4, filters per group a multiple of
  16) do not apply here, and its `initCFunc` (a table from a Python function)
  is not a key here.
- **the dropout fork** (`dnouri/cuda-convnet`): `dropout=p` in an `fc` or
  `conv` layer's params (drop each output with probability p at train time,
  unscaled, and multiply by 1 - p at test time).
- **both originals' ConfigParser**: key names in any case (`filterSize` =
  `filtersize`; layer names stay case-sensitive), and a key given twice in a
  section takes its last value, with a one-line warning naming both lines.
- **cuda-convnet2's params lookup**: a layer-params section that names no layer
  of the layer-def file is not read (one-line warning), as cuda-convnet2 read
  only the sections of the layers it defined.
- Older type names: see *also written* below (`cost.ce` = `cost.crossent`).

Beyond the originals (docs/BATCH-NORM.md):

- `bnorm`: batch normalisation per channel (an image's channels, a flat
  input's features): `y = W * (x - mean) / sqrt(var + epsilon) + b` with the
  minibatch's mean and biased variance in training, and in testing the running
  averages `r = decay * r + (1 - decay) * batch` (the batch variance unbiased).
  `W` (starts at 1) and `b` (starts at 0) learn with `epsW`, `momW`, `wc` and
  `epsB`, `momB`; the averages are saved with the weights (arrays `W0`, `b`,
  `mean`, `var`). `stats=global` normalises over every replica's cases (the
  plan combines the replicas' statistics before each forward and backward
  call), so a data-parallel net trains as on one device; `stats=replica` over
  each replica's shard. `stats=global` with `--micro-batches` above 1, on a
  layer with fewer replicas than the widest, or under `--sync async` of a
  data-parallel net is refused.
- `modulesX` on a `conv` or `local` layer: only the first `modulesX` output
  windows (at most the ceiling rule's `1 + ceil((2 padding + imgSize -
  filterSize) / stride)`; 0: all of those), like `outputsX` of `pool`. A
  stride-2 layer then gives the floor rule's size of other frameworks: 16 from
  32x32 images for a 3x3 filter with padding 1 and for a 1x1 filter, as a
  ResNet's downsampling block and its projection need.

`wball`: after every update each conv filter / fc output unit of that input's
weights is rescaled to norm `wball`, as cuda-convnet2 did (not for local layers,
whose per-module rescaling is not implemented: there only 0 is accepted).

`sync`: how the replicas of a data-parallel layer stay together, overriding the
run's `--sync` for this layer: `sync` (all-reduce the weight gradients every
step) or `local:K` (local SGD: each replica updates from its own shards, and
every K-th step the replicas' weights are replaced by their mean). Without the
key a layer follows `--sync`. `async` runs the replicas of the whole net apart,
so it is a mode of the run only: `sync=async` is an error, and so is any `sync=`
key under `--sync async`. On a layer with one replica (one device, or a
model-parallel layer) the key changes nothing; `--print-plan` says so.
"""


def _key_text(key: Key) -> str:
    expected = getattr(key.convert, "expected", "")
    if key.default is REQUIRED:
        default = "required"
    elif key.default is None:
        default = "optional"
    else:
        default = f"default {key.default!r}".replace("True", "true").replace("False", "false")
    extra = ", per input" if key.per_input else ""
    return f"`{key.name}` ({expected}; {default}{extra})"


def _inputs_text(t: LayerType) -> str:
    if t.max_inputs == t.min_inputs:
        return str(t.min_inputs)
    return f"{t.min_inputs}+" if t.max_inputs is None else f"{t.min_inputs}-{t.max_inputs}"


def render() -> str:
    lines = [INTRO, "## Layer types", ""]
    for t in LAYER_TYPES.values():
        lines.append(f"### `{t.name}`")
        lines.append("")
        lines.append(f"- inputs: {_inputs_text(t)}; neuron: {t.neuron}"
                     + ("" if t.takes_gpu else "; no `gpu=` (placed with its readers)"))
        for title, keys in (("layer-def keys", t.attrs), ("params keys", t.params),
                            ("hints", t.hints)):
            if keys:
                lines.append(f"- {title}: " + "; ".join(_key_text(k) for k in keys))
        old = [alias for alias, name in TYPE_ALIASES.items() if name == t.name]
        if old:
            lines.append("- also written: " + ", ".join(f"`type={a}`" for a in old))
        if t.aliases:
            lines.append("- v1 spellings: " + ", ".join(f"`{a}` = `{b}`"
                                                          for a, b in t.aliases.items()))
        lines.append("")
    lines += ["## Neurons", "", "Written `neuron=name` or `neuron=name[a,b]`; every listed "
              "parameter is required.", "", "| neuron | form |", "|---|---|"]
    for name, neuron in NEURONS.items():
        lines.append(f"| `{name}` | `{neuron.form}` |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
