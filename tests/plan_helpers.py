"""Build small NetConfigs directly (no files) for planner and executor tests."""

from __future__ import annotations

from convnet.config.model import LayerDef, NetConfig, Schedule

WEIGHT_PARAMS = {"epsW": [Schedule("const", 0.01)], "epsB": Schedule("const", 0.02),
                 "momW": [0.9], "momB": 0.9, "wc": [0.0], "wball": [0.0], "updatePeriod": 0}


def fc_net(spec, features: int = 4, num_classes: int = 3) -> NetConfig:
    """A net of fc/pass layers from ``[(name, type, inputs, gpu, updatePeriod), ...]``.

    Two data layers ``data`` (``features`` wide) and ``labels`` are prepended.
    Every fc layer has ``features`` outputs except those feeding a cost, which
    have ``num_classes``.
    """
    layers = {
        "data": LayerDef("data", "data", attrs={"dataIdx": 0}, output_shape=(features,)),
        "labels": LayerDef("labels", "data", attrs={"dataIdx": 1}, output_shape=(1,)),
    }
    feeds_softmax = {inp for _, type_, inputs, _, _ in spec if type_ == "softmax" for inp in inputs}
    for name, type_, inputs, gpu, update_period in spec:
        in_shapes = tuple(layers[i].output_shape for i in inputs)
        ldef = LayerDef(name, type_, inputs=tuple(inputs), gpu=tuple(gpu) if gpu else None,
                        input_shapes=in_shapes, file="test.cfg")
        if type_ == "fc":
            ldef.attrs = {"outputs": features, "initW": [0.1] * len(inputs), "initB": 0.0}
            ldef.params = dict(WEIGHT_PARAMS, momW=[0.9] * len(inputs), wc=[0.0] * len(inputs),
                               epsW=[Schedule("const", 0.01)] * len(inputs),
                               updatePeriod=update_period)
            ldef.attrs["outputs"] = num_classes if name in feeds_softmax else features
            ldef.output_shape = (ldef.attrs["outputs"],)
        elif type_ in ("pass", "concat"):
            ldef.output_shape = (sum(s[0] for s in in_shapes),)
        elif type_ == "cost.logreg":
            ldef.output_shape = (1,)
            ldef.params = {"coeff": 1.0, "topk": 1}
        else:
            ldef.output_shape = in_shapes[0]
        layers[name] = ldef
    return NetConfig(layers=layers, data_dims={0: (features,), 1: (1,)}, num_classes=num_classes)
