"""Each layer type's output-shape rule, and the state the rules share.

A rule is ``rule(layer, state) -> per-case output shape``: ``layer`` is the
:class:`~convnet.config.model.LayerDef` being inferred, with its
``input_shapes`` filled in; the rule checks them, may store derived attrs
(``imgSize``, ``modulesX``, ...) and raises a :class:`ConfigError` that names
the file, section and key to change.  Sizes follow cuda-convnet2's ceiling
rules, not PyTorch's floor rules.  The layer-type table
(:mod:`convnet.config.layer_types.table`) names each type's rule and
:func:`convnet.config.shapes.infer_shapes` applies them; rules take the layer
without importing its class, since the class reads that table.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

from convnet.config.values.location import Where
from convnet.config.values.typed import INT_MAX

Shape = tuple[int, ...]
ShapeRule = Callable[..., Shape]  # (layer, state) -> Shape


def ceil_div(a: int, b: int) -> int:
    """Exact ceil(a / b) for integers (floats lose precision on large sizes)."""
    return -(-a // b)


class ShapeState:
    """What shape rules share: data dims, the class counts, and error locations."""

    def __init__(self, net, data_dims: dict, num_classes: int | None):
        self.net, self.data_dims, self.num_classes = net, data_dims, num_classes
        self.given_classes = num_classes
        self.used_dims: set[int] = set()

    def at(self, layer, key: str) -> Where:
        return Where(layer.file, layer.name, key)

    def at_param(self, layer, key: str) -> Where:
        return Where(layer.params_file, layer.name, key)

    def classes(self, layer, count: int) -> int:
        """Note a cost head's class count; the first head's becomes the net's count
        when none was given.

        Heads may differ in width (cuda-convnet2 checked no width against a
        global class count).  Only the labels a head reads must fit its own
        probabilities: when the class count of the data's label column (dataIdx
        1) is given, a logreg head reading that column must be at least as wide.
        """
        if self.num_classes is None:
            self.num_classes = count
        return count

    def check_label_column(self, layer, count: int) -> None:
        source = self.net[layer.inputs[0]]
        if (self.given_classes is not None and source.is_data
                and source.attrs["dataIdx"] == 1 and self.given_classes > count):
            error = self.at(layer, "inputs").error(
                f"labels '{source.name}' hold {self.given_classes} classes, but input "
                f"'{layer.inputs[1]}' gives only {count} probabilities per case")
            error.config_classes = count  # the class count the config implies, for a hint
            raise error

    def check_size(self, layer, key: str) -> None:
        """Refuse activations or weights no engine could hold (cuda-convnet2 sized with ints)."""
        arrays = {"output": layer.output_shape, **layer.param_shapes()}
        for what, shape in arrays.items():
            count = math.prod(shape)
            if count > INT_MAX:
                raise self.at(layer, key).error(
                    f"{what} of {_text(shape)} = {count} values is too large (at most {INT_MAX})")


def _text(shape: Shape) -> str:
    return "x".join(map(str, shape)) if shape else "()"


def _features(shape: Shape) -> int:
    return math.prod(shape)


def _image_size(layer, index: int, channels: int, state: ShapeState) -> int:
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


def _data_dims_hint(index: int, known: dict) -> str:
    """How to give column ``index`` on the command line: ``--data-dims`` lists the
    columns in dataIdx order, so the example repeats the known ones and fills
    the others with one value per case (``3x224x224,1,1`` for column 2)."""
    if index == 0:
        return "give them, e.g. --data-dims 3x224x224"
    columns = [_text(known[c]) if c in known else ("3x224x224" if c == 0 else "1")
               for c in range(index + 1)]
    return (f"give every column up to it after commas, e.g. --data-dims {','.join(columns)} "
            f"(column {index}: one value per case)")


def data_shape(layer, state: ShapeState) -> Shape:
    index = layer.attrs["dataIdx"]
    where = state.at(layer, "dataIdx")
    if index not in state.data_dims:
        known = ", ".join(map(str, sorted(state.data_dims))) or "none"
        raise where.error(f"no data dimensions for dataIdx {index} (known: {known}); "
                          + _data_dims_hint(index, state.data_dims))
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


def filter_shape(layer, state: ShapeState) -> Shape:
    """conv/local: modulesX = 1 + ceil((2*padding + imgSize - filterSize) / stride) per input,
    unless the file gives ``modulesX`` (beyond cuda-convnet2, like pool's ``outputsX``): then
    only that many windows from the first, fewer than the ceiling rule's (a 3x3 stride-2
    conv with padding 1 on 32x32 images gives 16 outputs, as the floor rule of other
    frameworks does, where the ceiling rule's 17th window reads one column of the image)."""
    a = layer.attrs
    given = a.get("modulesX") or 0
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
    if given:
        if given > min(modules):
            raise state.at(layer, "modulesX").error(
                f"must be at most the {min(modules)} windows the ceiling rule gives, got {given}")
        modules = [given]
    if len(set(modules)) > 1:
        raise state.at(layer, "inputs").error(
            "all inputs must give the same output size, got "
            + ", ".join(f"{m}x{m} from '{s}'" for m, s in zip(modules, layer.inputs)))
    a["imgSize"], a["modulesX"] = sizes, modules[0]
    return (a["filters"], modules[0], modules[0])


def fc_shape(layer, state: ShapeState) -> Shape:
    return (layer.attrs["outputs"],)


def pool_shape(layer, state: ShapeState) -> Shape:
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


def norm_shape(span: str) -> ShapeRule:
    """cmrnorm windows span channels; rnorm/cnorm windows span pixels."""
    def rule(layer, state: ShapeState) -> Shape:
        a = layer.attrs
        size = _image_size(layer, 0, a["channels"], state)
        limit = a["channels"] if span == "channels" else size
        if a["size"] > limit:
            raise state.at(layer, "size").error(
                f"must be at most the input's {limit} {span}, got {a['size']}")
        a["imgSize"] = size
        return (a["channels"], size, size)
    return rule


def same_shape(layer, state: ShapeState) -> Shape:
    return layer.input_shapes[0]


def channels_shape(layer, state: ShapeState) -> Shape:
    """The input's shape; ``channels`` are an image's channels, or a flat input's
    features (bnorm normalises each of them over the cases and pixels)."""
    shape = layer.input_shapes[0]
    layer.attrs["channels"] = shape[0]
    return shape


def eltwise_shape(layer, state: ShapeState) -> Shape:
    shapes = layer.input_shapes
    if len({_features(s) for s in shapes}) > 1:
        raise state.at(layer, "inputs").error(
            "all inputs must have the same size, got "
            + ", ".join(f"{_text(s)} from '{n}'" for s, n in zip(shapes, layer.inputs)))
    return shapes[0] if len(set(shapes)) == 1 else (_features(shapes[0]),)


def sum_shape(layer, state: ShapeState) -> Shape:
    """Channels (or features of a flat input) summed in groups of ``stride``; default all."""
    shape = layer.input_shapes[0]
    stride = layer.attrs["stride"] or shape[0]
    if shape[0] % stride:
        raise state.at(layer, "stride").error(
            f"must divide the input's {shape[0]} channels, got {stride}")
    layer.attrs["stride"] = stride
    return (shape[0] // stride,) + shape[1:]


def concat_shape(layer, state: ShapeState) -> Shape:
    """Images of one size stack along channels; anything else concatenates flat."""
    shapes = layer.input_shapes
    if all(len(s) == 3 for s in shapes) and len({s[1:] for s in shapes}) == 1:
        return (sum(s[0] for s in shapes),) + shapes[0][1:]
    return (sum(_features(s) for s in shapes),)


def _probs_classes(layer, state: ShapeState) -> int:
    """The class count the second (probabilities) input gives; it must be a softmax."""
    source = layer.inputs[1]
    if state.net[source].type != "softmax":
        raise state.at(layer, "inputs").error(
            f"second input '{source}' must be a softmax layer, not {state.net[source].type}")
    return state.classes(layer, _features(layer.input_shapes[1]))


def logreg_shape(layer, state: ShapeState) -> Shape:
    labels = layer.input_shapes[0]
    if _features(labels) != 1:
        raise state.at(layer, "inputs").error(
            f"first input '{layer.inputs[0]}' must be the labels (1 value per case), "
            f"got {_text(labels)}")
    classes = _probs_classes(layer, state)
    state.check_label_column(layer, classes)
    _check_topk(layer, state, classes)
    return (1,)


def crossent_shape(layer, state: ShapeState) -> Shape:
    """Dense labels: one value per class, like the probabilities."""
    classes = _probs_classes(layer, state)
    _check_topk(layer, state, classes)
    labels = _features(layer.input_shapes[0])
    if labels != classes:
        raise state.at(layer, "inputs").error(
            f"dense labels '{layer.inputs[0]}' give {labels} values per case, but "
            f"'{layer.inputs[1]}' gives {classes} probabilities")
    return (1,)


def _check_topk(layer, state: ShapeState, classes: int) -> None:
    if layer.params["topk"] > classes:
        raise state.at_param(layer, "topk").error(
            f"must be at most the number of classes ({classes}), got {layer.params['topk']}")


def bce_shape(layer, state: ShapeState) -> Shape:
    labels, predictions = layer.input_shapes
    if _features(labels) != _features(predictions):
        raise state.at(layer, "inputs").error(
            f"both inputs must have the same size, got {_text(labels)} and {_text(predictions)}")
    return (1,)


def cost_shape(layer, state: ShapeState) -> Shape:
    return (1,)
