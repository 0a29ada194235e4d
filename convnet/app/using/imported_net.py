"""An imported net as the engine keeps a run: ``layers.cfg``, ``layer-params.cfg`` and
``checkpoint.npz`` in one folder.

The layers (:class:`ImportedLayer`, made by :mod:`convnet.app.using.onnx_import`) get a
data layer for the labels, a softmax ``probs`` (unless the model ends in one) and a
``cost.logreg`` ``logprob``, so that the net trains and predicts as any other.  Every
weight layer learns at ``epsW`` :data:`EPS_W` (a fine-tuning rate; set 0 to freeze
it) with momentum 0.9 and weight decay 0.0005 (a ``bnorm`` layer's scale and shift
without decay), and starts from ``initW`` 0.01 where a
user makes it new.  The checkpoint is a step-0 one, as a run saves it: the weights,
zero momentum, and the options that make ``--load-file DIR`` run it (the two files, and
``--data-provider dummy`` with the model's image size and class count until the
command line names real data).

The files are written only once the net they describe has been read back by the
config parser and every weight and output shape checked against it, so a model the
engine would compute differently writes nothing.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convnet.app.checkpoint import CHECKPOINT_NAME, save_checkpoint
from convnet.app.saved_options import RESUMABLE
from convnet.config import load_net
from convnet.errors import CheckpointError, ConfigError, DataError
from convnet.outputs import refuse_existing, write_output

LAYER_DEF, LAYER_PARAMS = "layers.cfg", "layer-params.cfg"
#: Initial weights of the layers a user adds or retrains (``initW``).
INIT_W = 0.01
#: The learning rates the imported layers get: small, as fine-tuning wants.
EPS_W, EPS_B = 0.001, 0.002
RATES = {"momW": 0.9, "momB": 0.9, "wc": 0.0005}


@dataclass
class ImportedLayer:
    """One layer of the imported net: config keys, weights, output shape per case."""

    name: str
    type: str
    inputs: list[str]
    shape: tuple[int, ...]
    attrs: dict = field(default_factory=dict)  # layer-def keys
    params: dict = field(default_factory=dict)  # layer-params keys; over the default rates
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    neuron: str | None = None


def with_cost(layers: list[ImportedLayer], output: str) -> tuple[list[ImportedLayer], int]:
    """The layers with the labels, the softmax ``probs`` over ``output`` (the model's
    output layer, unless it is one) and the cost; the class count."""
    last = next(layer for layer in layers if layer.name == output)
    classes = int(np.prod(last.shape))
    added = [ImportedLayer("labels", "data", [], (1,), {"dataIdx": 1})]
    if last.type == "softmax":  # the model's own, named as the engine names it
        for layer in layers:
            layer.inputs = ["probs" if i == output else i for i in layer.inputs]
        last.name = "probs"
    else:
        added.append(ImportedLayer("probs", "softmax", [output], (classes,)))
    added.append(ImportedLayer("logprob", "cost.logreg", ["labels", "probs"], (1,),
                               params={"coeff": 1}))
    return layers + added, classes


def _value(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_value(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def config_texts(layers: list[ImportedLayer], source: str) -> tuple[str, str]:
    """(layer-def text, layer-params text)."""
    header = (f"# Imported from {source} by python -m convnet.import_onnx.\n"
              "# The layer names are the model's; --init-from loads layers by name.\n")
    net, params = [header], [header + "# Rates for fine-tuning: epsW=0 and epsB=0 freeze a "
                                      "layer.\n"]
    for layer in layers:
        keys = {"type": layer.type}
        if layer.inputs:
            keys["inputs"] = layer.inputs
        keys.update(layer.attrs)
        if layer.neuron is not None:
            keys["neuron"] = layer.neuron
        net.append(f"[{layer.name}]\n" + "".join(f"{k}={_value(v)}\n" for k, v in keys.items()))
        rates = {}
        if layer.weights:
            n = len(layer.inputs)
            rates.update({"epsW": [EPS_W] * n, "epsB": EPS_B, "momW": [RATES["momW"]] * n,
                          "momB": RATES["momB"], "wc": [RATES["wc"]] * n})
        rates.update(layer.params)  # a layer's own keys (bnorm's wc=0) win
        if rates:
            params.append(f"[{layer.name}]\n"
                          + "".join(f"{k}={_value(v)}\n" for k, v in rates.items()))
    return "\n".join(net), "\n".join(params)


def _check(layers: list[ImportedLayer], texts: tuple[str, str], input_shape, classes: int,
           source: str) -> None:
    """Read the config back and check each layer's weight and output shapes against
    what the translation computed (a disagreement is a model the engine cannot take)."""
    with tempfile.TemporaryDirectory(prefix="convnet-import-") as folder:
        paths = [Path(folder) / LAYER_DEF, Path(folder) / LAYER_PARAMS]
        for path, text in zip(paths, texts):
            path.write_text(text)
        try:
            net = load_net(*paths, {0: tuple(input_shape), 1: (1,)}, classes)
        except ConfigError as error:
            raise DataError(f"{source}: the engine cannot compute this model as written: "
                            f"{error.message}") from None
    for layer in layers:
        ldef = net[layer.name]
        want = {k: tuple(w.shape) for k, w in layer.weights.items()}
        have = {k: tuple(s) for k, s in ldef.param_shapes().items()}
        if want != have or int(np.prod(ldef.output_shape)) != int(np.prod(layer.shape)):
            raise DataError(f"{source}: layer '{layer.name}' ({layer.type}) would hold "
                            f"weights {have} and {ldef.output_shape} outputs in the engine, "
                            f"the model {want} and {layer.shape}; it cannot be imported")


def write_imported(tgt_dir: Path, layers: list[ImportedLayer], input_shape, classes: int,
                   source: str, overwrite: bool) -> list[Path]:
    """Write the three files into ``tgt_dir`` (made if missing); the paths written."""
    texts = config_texts(layers, source)
    _check(layers, texts, input_shape, classes, source)
    paths = [tgt_dir / LAYER_DEF, tgt_dir / LAYER_PARAMS, tgt_dir / CHECKPOINT_NAME]
    for path in paths:
        refuse_existing(path, overwrite, keep="give another --tgt-dir")
    arrays = {}
    for layer in layers:
        for key, w in layer.weights.items():
            arrays[f"weights/{layer.name}/{key}"] = np.ascontiguousarray(w, np.float32)
            arrays[f"momentum/{layer.name}/{key}"] = np.zeros(w.shape, np.float32)
    options = dict.fromkeys(RESUMABLE)
    options.update(layer_def=str(paths[0].resolve()), layer_params=str(paths[1].resolve()),
                   data_provider="dummy", num_classes=classes,
                   data_dims="x".join(map(str, input_shape)))
    meta = {"options": options, "imported_from": source,
            "counters": {"step": 0, "epoch": 1, "batch_index": 0, "cumulative_time": 0.0,
                         "log_rows": 0}}
    try:  # a file in the way, a folder that cannot be made, a full disk
        tgt_dir.mkdir(parents=True, exist_ok=True)
        for path, text in zip(paths, texts):
            write_output(path, text.encode("utf-8"))
        save_checkpoint(paths[2], arrays, meta)
    except OSError as error:
        raise CheckpointError(f"cannot write to --tgt-dir {tgt_dir}: "
                              f"{error.strerror or error}") from None
    return paths
