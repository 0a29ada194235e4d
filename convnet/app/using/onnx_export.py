"""``--export-onnx FILE``: the saved net's test-mode forward pass as an ONNX model.

The model's input ``images`` is raw pixels (N, C, S, S) at the data set's stored
size and in its own units (0..255 for CIFAR-style batches, 0..1 for digits); the
graph crops the centre ``--inner-size`` window and subtracts the provider's mean,
as a test case gets them, then runs every layer up to the class probabilities,
its output ``probs`` (N, classes).  A serving system feeds it decoded images.
Under ``--multiview-test`` the model still computes the centre view only (one
forward pass per image; a server wanting ten views can feed crops itself).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from convnet.app.options import RunOptions
from convnet.app.using.onnx_graph import OPSET, GraphBuilder
from convnet.app.using.onnx_layers import refuse, translate
from convnet.app.using.saved_net import SavedNet, open_saved_net, require_image_input
from convnet.config.model import NetConfig
from convnet.errors import DataError
from convnet.optional import require_onnx
from convnet.outputs import write_output

INPUT, OUTPUT = "images", "probs"


def layers_up_to(net: NetConfig, last: str) -> list[str]:
    """The layers ``last`` depends on and ``last`` itself, each after its inputs."""
    order, seen = [], set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for source in net[name].inputs:
            visit(source)
        order.append(name)

    visit(last)
    return order


def layer_weights(state: dict[str, np.ndarray], layer: str) -> dict[str, np.ndarray]:
    """A layer's weights from the ``weights/LAYER/KEY`` arrays of a checkpoint's state."""
    prefix = f"weights/{layer}/"
    return {key[len(prefix):]: np.asarray(value, np.float32)
            for key, value in state.items() if key.startswith(prefix)}


def net_model(onnx, net: NetConfig, state: dict[str, np.ndarray], probs_layer: str,
              raw_shape: tuple[int, int, int], offset: np.ndarray, doc: str = ""):
    """The ONNX model of ``net`` up to ``probs_layer``: raw pixels of ``raw_shape`` per
    case in, centre-cropped to ``offset``'s side and added ``offset`` (the provider's
    minus-mean, cropped), probabilities out."""
    g = GraphBuilder(onnx)
    g.fresh(INPUT)
    g.fresh(OUTPUT)  # the names of the graph's input and output are taken
    channels, side, _ = raw_shape
    inner = offset.shape[-1]
    x = INPUT
    if inner != side:
        start = (side - inner) // 2  # the provider's centre crop
        x = g.slice(x, [start, start], [start + inner, start + inner], [2, 3], "crop")
    x = g.op("Add", [x, g.const(offset[None], "minus_mean")], "centred")
    tensors = {}
    for name in layers_up_to(net, probs_layer):
        ldef = net[name]
        if ldef.is_data:
            if int(ldef.attrs.get("dataIdx", 0)) != 0:
                raise refuse(ldef, "reads a data column other than the images, which the "
                                   "exported model does not take")
            tensors[name] = (x, (channels, inner, inner))
            continue
        tensors[name] = translate(g, ldef, [tensors[i] for i in ldef.inputs],
                                  layer_weights(state, name))
    probs, shape = tensors[probs_layer]
    flat = g.op("Flatten", [probs], "flat_probs", axis=1) if len(shape) > 1 else probs
    g.nodes.append(onnx.helper.make_node("Identity", [flat], [OUTPUT], name=OUTPUT))
    return g.model(INPUT, raw_shape, OUTPUT, (int(np.prod(shape)),), doc)


def saved_net_model(onnx, saved: SavedNet, path: Path):
    """(the ONNX model of the trained net, the line that says what it takes and gives
    once written to ``path``, a note or None)."""
    require_image_input(saved, "--export-onnx")
    provider = saved.provider
    raw_shape = tuple(int(d) for d in provider.image_shape)
    offset = provider.test_cases_from_pixels(np.zeros((1,) + raw_shape, np.float32))
    offset = (offset[0] if offset.ndim == 5 else offset)[0]
    state = saved.trainer.executor.state_arrays()
    model = net_model(onnx, saved.net, state, saved.probs_layer, raw_shape, offset,
                      doc=f"{saved.opts.layer_def.name}: test-mode forward pass, raw pixels "
                          f"in (0..{provider.pixel_max:g}), class probabilities out")
    note = ("note: the model computes the centre view only, not the "
            f"{provider.num_views} views of --multiview-test" if provider.num_views > 1
            else None)
    text = (f"wrote {path}: input '{INPUT}' N x {' x '.join(map(str, raw_shape))} (raw "
            f"pixels, 0..{provider.pixel_max:g}), output '{OUTPUT}' N x {saved.num_classes}; "
            f"ONNX opset {OPSET}")
    return model, text, note


def write_model(model, path: Path) -> None:
    try:
        write_output(path, model.SerializeToString())
    except OSError as error:
        raise DataError(f"cannot write {path}: {error.strerror}") from None


def run_export_onnx(opts: RunOptions) -> int:
    onnx = require_onnx("--export-onnx")
    saved = open_saved_net(opts)
    try:
        model, text, note = saved_net_model(onnx, saved, opts.export_onnx)
    finally:
        saved.close()
    write_model(model, opts.export_onnx)
    if note is not None:
        print(note, file=sys.stderr)
    print(text)
    return 0
