"""Shape inference: per-case input/output shapes and the derived attrs (SPEC section 2).

Walks the layers in file order (a topological order, checked by the parser)
and applies the rule of each type from :data:`SHAPE_RULES`.  Sizes follow
cuda-convnet2's ceiling rules, not PyTorch's floor rules.  Every error names
the layer-def file (or the layer-params file for a params key), the layer's
section and the key to change.
"""

from __future__ import annotations

import copy
import math
import operator
from collections.abc import Callable, Mapping
from typing import NamedTuple

from convnet.config.location import Where
from convnet.config.model import LayerDef, NetConfig
from convnet.config.values import INT_MAX

Shape = tuple[int, ...]
LABELS_IDX, LABELS_DIMS = 1, (1,)


def infer_shapes(net: NetConfig, data_dims: dict[int, tuple[int, ...]] | None,
                 num_classes: int | None = None) -> NetConfig:
    """A copy of ``net`` with shapes filled in.

    ``data_dims`` maps a data layer's ``dataIdx`` to its per-case shape
    (``(channels, size, size)`` or ``(features,)``).  dataIdx 1 defaults to
    ``(1,)``, cuda-convnet2's label column.  ``num_classes``, when None, is
    taken from what the cost layers read.
    """
    net = copy.deepcopy(net)
    if data_dims is not None and not isinstance(data_dims, Mapping):
        raise Where(net.layer_def_file).error(
            f"data dims must map dataIdx to a shape, got {data_dims!r}")
    dims = {LABELS_IDX: LABELS_DIMS, **(data_dims or {})}
    state = _State(net, dims, _classes_arg(net, num_classes))
    for layer in net:
        layer.input_shapes = tuple(net[name].output_shape for name in layer.inputs)
        rule = SHAPE_RULES[layer.type]
        layer.output_shape = rule.infer(layer, state)
        state.check_size(layer, rule.size_key)
    net.data_dims = {idx: state.data_dims[idx] for idx in sorted(state.used_dims)}
    net.num_classes = state.num_classes or 0
    return net


def ceil_div(a: int, b: int) -> int:
    """Exact ceil(a / b) for integers (floats lose precision on large sizes)."""
    return -(-a // b)


class _State:
    """What shape rules share: data dims, the class count, and error locations."""

    def __init__(self, net: NetConfig, data_dims: dict, num_classes: int | None):
        self.net, self.data_dims, self.num_classes = net, data_dims, num_classes
        self.used_dims: set[int] = set()

    def at(self, layer: LayerDef, key: str) -> Where:
        return Where(layer.file, layer.name, key)

    def at_param(self, layer: LayerDef, key: str) -> Where:
        return Where(layer.params_file, layer.name, key)

    def classes(self, layer: LayerDef, count: int, source: str) -> int:
        """Check ``count`` against the class count, or learn it from the first cost layer."""
        if self.num_classes is None:
            self.num_classes = count
        elif count != self.num_classes:
            raise self.at(layer, "inputs").error(
                f"input '{source}' gives {count} values per case, "
                f"but there are {self.num_classes} classes")
        return count

    def check_size(self, layer: LayerDef, key: str) -> None:
        """Refuse activations or weights no engine could hold (cuda-convnet2 sized with ints)."""
        arrays = {"output": layer.output_shape, **layer.param_shapes()}
        for what, shape in arrays.items():
            count = math.prod(shape)
            if count > INT_MAX:
                raise self.at(layer, key).error(
                    f"{what} of {_text(shape)} = {count} values is too large (at most {INT_MAX})")


def _classes_arg(net: NetConfig, num_classes) -> int | None:
    if num_classes is None:
        return None
    try:
        count = operator.index(num_classes)
    except TypeError:
        count = 0
    if isinstance(num_classes, bool) or count < 1:
        raise Where(net.layer_def_file).error(
            f"number of classes must be a positive integer, got {num_classes!r}")
    return count


def _text(shape: Shape) -> str:
    return "x".join(map(str, shape)) if shape else "()"


def _features(shape: Shape) -> int:
    return math.prod(shape)


def _image_size(layer: LayerDef, index: int, channels: int, state: _State) -> int:
    """Side of the square ``channels``-channel images that input ``index`` holds.

    A flat input of F values is read as images when F/channels is a perfect
    square, as cuda-convnet2 did.
    """
    shape, source = layer.input_shapes[index], layer.inputs[index]
    where = state.at(layer, "channels")
    if len(shape) == 3:
        if shape[0] != channels:
            raise where.error(
                f"input '{source}' has {shape[0]} channels ({_text(shape)}), not {channels}")
        return shape[1]
    pixels, rest = divmod(_features(shape), channels)
    size = math.isqrt(pixels)
    if rest or pixels == 0 or size * size != pixels:
        raise where.error(f"input '{source}' gives {_features(shape)} values per case, "
                          f"which are not square {channels}-channel images")
    return size


def _data(layer: LayerDef, state: _State) -> Shape:
    index = layer.attrs["dataIdx"]
    where = state.at(layer, "dataIdx")
    if index not in state.data_dims:
        known = ", ".join(map(str, sorted(state.data_dims))) or "none"
        raise where.error(f"no data dimensions for dataIdx {index} (known: {known}); "
                          "give them, e.g. --data-dims 3x224x224")
    try:
        dims = tuple(operator.index(d) for d in state.data_dims[index])
    except TypeError:
        raise where.error(f"data dimensions {state.data_dims[index]!r} are not integers") from None
    if len(dims) not in (1, 3) or min(dims) < 1 or (len(dims) == 3 and dims[1] != dims[2]):
        raise where.error(f"data dimensions {_text(dims)} are neither (features,) nor square "
                          "(channels, size, size) with positive sizes")
    state.data_dims[index] = dims
    state.used_dims.add(index)
    return dims


def _filters(layer: LayerDef, state: _State) -> Shape:
    """conv/local: modulesX = 1 + ceil((2*padding + imgSize - filterSize) / stride) per input."""
    a = layer.attrs
    sizes, modules = [], []
    for i, source in enumerate(layer.inputs):
        size = _image_size(layer, i, a["channels"][i], state)
        filter_size, padding, stride = a["filterSize"][i], a["padding"][i], a["stride"][i]
        if filter_size > size + 2 * padding:
            raise state.at(layer, "filterSize").error(
                f"filter {filter_size}x{filter_size} is larger than input '{source}' "
                f"({size}x{size} with padding {padding})")
        sizes.append(size)
        modules.append(1 + ceil_div(2 * padding + size - filter_size, stride))
    if len(set(modules)) > 1:
        raise state.at(layer, "inputs").error(
            "all inputs must give the same output size, got "
            + ", ".join(f"{m}x{m} from '{s}'" for m, s in zip(modules, layer.inputs)))
    a["imgSize"], a["modulesX"] = sizes, modules[0]
    return (a["filters"], modules[0], modules[0])


def _fc(layer: LayerDef, state: _State) -> Shape:
    return (layer.attrs["outputs"],)


def _pool(layer: LayerDef, state: _State) -> Shape:
    """outputsX = 1 + ceil((imgSize - start - sizeX) / stride) unless outputsX > 0 is given."""
    a = layer.attrs
    size = _image_size(layer, 0, a["channels"], state)
    size_x, stride, start = a["sizeX"], a["stride"], a["start"]
    if size_x > size:
        raise state.at(layer, "sizeX").error(
            f"window {size_x} is larger than the {size}x{size} input")
    outputs = a["outputsX"] or 1 + ceil_div(size - start - size_x, stride)
    if start + size_x <= 0 or outputs < 1:
        raise state.at(layer, "start").error(
            f"start={start} leaves no window on the {size}x{size} input")
    if start + (outputs - 1) * stride >= size:
        raise state.at(layer, "outputsX").error(
            f"{outputs} windows of stride {stride} from {start} run past the {size}x{size} input")
    a["imgSize"], a["outputsX"] = size, outputs
    return (a["channels"], outputs, outputs)


def _norm(span: str) -> Callable[[LayerDef, _State], Shape]:
    """cmrnorm windows span channels; rnorm/cnorm windows span pixels."""
    def rule(layer: LayerDef, state: _State) -> Shape:
        a = layer.attrs
        size = _image_size(layer, 0, a["channels"], state)
        limit = a["channels"] if span == "channels" else size
        if a["size"] > limit:
            raise state.at(layer, "size").error(
                f"must be at most the input's {limit} {span}, got {a['size']}")
        a["imgSize"] = size
        return (a["channels"], size, size)
    return rule


def _same(layer: LayerDef, state: _State) -> Shape:
    return layer.input_shapes[0]


def _eltwise(layer: LayerDef, state: _State) -> Shape:
    shapes = layer.input_shapes
    if len({_features(s) for s in shapes}) > 1:
        raise state.at(layer, "inputs").error(
            "all inputs must have the same size, got "
            + ", ".join(f"{_text(s)} from '{n}'" for s, n in zip(shapes, layer.inputs)))
    return shapes[0] if len(set(shapes)) == 1 else (_features(shapes[0]),)


def _sum(layer: LayerDef, state: _State) -> Shape:
    """Channels (or features of a flat input) summed in groups of ``stride``; default all."""
    shape = layer.input_shapes[0]
    stride = layer.attrs["stride"] or shape[0]
    if shape[0] % stride:
        raise state.at(layer, "stride").error(
            f"must divide the input's {shape[0]} channels, got {stride}")
    layer.attrs["stride"] = stride
    return (shape[0] // stride,) + shape[1:]


def _concat(layer: LayerDef, state: _State) -> Shape:
    """Images of one size stack along channels; anything else concatenates flat."""
    shapes = layer.input_shapes
    if all(len(s) == 3 for s in shapes) and len({s[1:] for s in shapes}) == 1:
        return (sum(s[0] for s in shapes),) + shapes[0][1:]
    return (sum(_features(s) for s in shapes),)


def _probs_classes(layer: LayerDef, state: _State) -> int:
    """The class count the second (probabilities) input gives; it must be a softmax."""
    source = layer.inputs[1]
    if state.net[source].type != "softmax":
        raise state.at(layer, "inputs").error(
            f"second input '{source}' must be a softmax layer, not {state.net[source].type}")
    return state.classes(layer, _features(layer.input_shapes[1]), source)


def _logreg(layer: LayerDef, state: _State) -> Shape:
    labels = layer.input_shapes[0]
    if _features(labels) != 1:
        raise state.at(layer, "inputs").error(
            f"first input '{layer.inputs[0]}' must be the labels (1 value per case), "
            f"got {_text(labels)}")
    _check_topk(layer, state, _probs_classes(layer, state))
    return (1,)


def _crossent(layer: LayerDef, state: _State) -> Shape:
    """Dense labels: one value per class, like the probabilities."""
    _check_topk(layer, state, _probs_classes(layer, state))
    state.classes(layer, _features(layer.input_shapes[0]), layer.inputs[0])
    return (1,)


def _check_topk(layer: LayerDef, state: _State, classes: int) -> None:
    if layer.params["topk"] > classes:
        raise state.at_param(layer, "topk").error(
            f"must be at most the number of classes ({classes}), got {layer.params['topk']}")


def _bce(layer: LayerDef, state: _State) -> Shape:
    labels, predictions = layer.input_shapes
    if _features(labels) != _features(predictions):
        raise state.at(layer, "inputs").error(
            f"both inputs must have the same size, got {_text(labels)} and {_text(predictions)}")
    return (1,)


def _cost(layer: LayerDef, state: _State) -> Shape:
    return (1,)


class _Rule(NamedTuple):
    """A type's shape rule and the key an oversized result is blamed on."""

    infer: Callable[[LayerDef, _State], Shape]
    size_key: str = "inputs"


SHAPE_RULES: dict[str, _Rule] = {
    "data": _Rule(_data, "dataIdx"),
    "conv": _Rule(_filters, "filters"),
    "local": _Rule(_filters, "filters"),
    "fc": _Rule(_fc, "outputs"),
    "pool": _Rule(_pool, "outputsX"),
    "cmrnorm": _Rule(_norm("channels")),
    "rnorm": _Rule(_norm("pixels across")),
    "cnorm": _Rule(_norm("pixels across")),
    "neuron": _Rule(_same),
    "softmax": _Rule(_same),
    "dropout": _Rule(_same),
    "dropout2": _Rule(_same),
    "pass": _Rule(_concat),
    "concat": _Rule(_concat),
    "eltsum": _Rule(_eltwise),
    "eltmax": _Rule(_eltwise),
    "sum": _Rule(_sum),
    "cost.logreg": _Rule(_logreg),
    "cost.crossent": _Rule(_crossent),
    "cost.bce": _Rule(_bce),
    "cost.sum2": _Rule(_cost),
}
