"""An ONNX file read for import: its nodes, constants, one input and one output.

An ONNX file is untrusted input: it is parsed by the onnx package (no code runs),
checked by its checker, and its shapes inferred; anything this engine cannot take is
one line naming what, before any file is written.  The engine trains on fixed image
sizes, so the one input must be (N, C, S, S) with C and S fixed (N, the batch, may be
symbolic) and every other tensor's shape must follow from it: a model with dynamic
shapes (sizes only known at run time) is refused.  Weights come from the graph's
initializers and from Constant nodes; both become float32 numpy arrays.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convnet.errors import DataError
from convnet.filekind import not_a_regular_file

#: ONNX files larger than this are refused unread (the largest ImageNet nets are ~600 MB).
MAX_MODEL_BYTES = 2 * 2**30


@dataclass
class OnnxGraph:
    """What the import reads of a model: nodes in order, constants, shapes."""

    path: Path
    nodes: list
    constants: dict[str, np.ndarray]
    input_name: str
    input_shape: tuple[int, int, int]  # per case: channels, side, side
    output_name: str
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # per case
    uses: Counter = field(default_factory=Counter)  # tensor -> how many nodes read it

    def attrs(self, node) -> dict:
        """A node's attributes as plain Python values."""
        from onnx import helper

        return {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def where(self, node) -> str:
        return f"{self.path}: node '{node.name or node.output[0]}' ({node.op_type})"


def _refuse(path, text: str) -> DataError:
    return DataError(f"{path}: {text}")


def read_onnx(onnx, path: Path) -> OnnxGraph:
    """The model at ``path``, checked; a :class:`DataError` naming what is wrong."""
    problem = not_a_regular_file(os.fspath(path))
    if problem is not None:
        raise _refuse(path, f"{problem}; give an .onnx file")
    if path.stat().st_size > MAX_MODEL_BYTES:
        raise _refuse(path, f"{path.stat().st_size:,} bytes is larger than any model this "
                            f"engine imports ({MAX_MODEL_BYTES:,})")
    try:
        model = onnx.load_model_from_string(path.read_bytes())
        onnx.checker.check_model(model)
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as error:  # protobuf's DecodeError, the checker's, shape inference's
        text = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise _refuse(path, f"not a valid ONNX model ({type(error).__name__}"
                            f"{': ' + text[:200] if text else ''})") from None
    graph = model.graph
    constants = {init.name: onnx.numpy_helper.to_array(init) for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in constants]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise _refuse(path, f"the model has {len(inputs)} input(s) and {len(graph.output)} "
                            "output(s); the engine imports nets of one image input and one "
                            "output")
    nodes = []
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            constants[node.output[0]] = onnx.numpy_helper.to_array(
                onnx.helper.get_attribute_value(node.attribute[0]))
        else:
            nodes.append(node)
    shapes = _static_shapes(path, graph, constants)
    input_shape = shapes.get(inputs[0].name, ())
    if len(input_shape) != 3 or input_shape[1] != input_shape[2]:
        raise _refuse(path, f"input '{inputs[0].name}' is {_shown(inputs[0])}; the engine "
                            "imports nets whose input is N x C x S x S images of a fixed size")
    uses = Counter(name for node in nodes for name in node.input if name)
    uses[graph.output[0].name] += 1
    return OnnxGraph(path, nodes, constants, inputs[0].name, input_shape,
                     graph.output[0].name, shapes, uses)


def _dims(value_info) -> list:
    """A tensor's dimensions: ints, or the name of a symbolic one (None when unknown)."""
    if not value_info.type.tensor_type.HasField("shape"):
        return [None]
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in value_info.type.tensor_type.shape.dim]


def _shown(value_info) -> str:
    return " x ".join("?" if d is None else str(d) for d in _dims(value_info))


def _static_shapes(path, graph, constants) -> dict[str, tuple[int, ...]]:
    """Per-case shapes of every tensor whose shape inference knows it (constants aside):
    all dimensions but the first (the batch) fixed; a tensor with another unknown is
    refused."""
    shapes = {}
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        if info.name in constants:
            continue
        dims = _dims(info)
        if any(not isinstance(d, int) or d <= 0 for d in dims[1:]) or dims == [None]:
            raise _refuse(path, f"tensor '{info.name}' has the dynamic shape {_shown(info)}; "
                                "export the model with fixed sizes (no dynamic axes but the "
                                "batch)")
        shapes[info.name] = tuple(int(d) for d in dims[1:])
    return shapes
