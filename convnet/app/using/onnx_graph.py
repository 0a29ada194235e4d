"""A small builder of ONNX graphs: nodes, constants and unique names, and the model.

Kept apart from the layers' translation (:mod:`convnet.app.using.onnx_layers`) so
that each translation reads as the arithmetic it writes down.  ``onnx`` is
imported only when a graph is made (the ``onnx`` extra).
"""

from __future__ import annotations

import numpy as np

#: The operator set the models are written for (onnx >= 1.16, onnxruntime >= 1.18).
OPSET = 21


class GraphBuilder:
    """Nodes in the order they are added (each after its inputs: a valid ONNX order)."""

    def __init__(self, onnx_module):
        self.onnx = onnx_module
        self.nodes = []
        self.initializers = []
        self._names: set[str] = set()

    def fresh(self, hint: str) -> str:
        """A tensor name not used yet, made from ``hint``."""
        name, k = hint, 1
        while name in self._names:
            k += 1
            name = f"{hint}_{k}"
        self._names.add(name)
        return name

    def const(self, value, hint: str = "const", dtype=np.float32) -> str:
        """A constant tensor (weights, shapes, scalars); its name."""
        array = np.asarray(value, dtype=dtype)
        name = self.fresh(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str, **attrs) -> str:
        """Add one node with one output; the output's name."""
        out = self.fresh(hint)
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def reshape(self, tensor: str, shape: tuple[int, ...], hint: str) -> str:
        """``tensor`` as (N, *shape), N taken from the tensor."""
        return self.op("Reshape", [tensor, self.const([-1, *shape], "shape", np.int64)], hint)

    def slice(self, tensor: str, starts, ends, axes, hint: str) -> str:
        return self.op("Slice", [tensor, self.const(starts, "starts", np.int64),
                                 self.const(ends, "ends", np.int64),
                                 self.const(axes, "axes", np.int64)], hint)

    def model(self, input_name: str, input_shape, output_name: str, output_shape, doc: str):
        """The checked ModelProto: one float input and one float output, batch axis ``N``."""
        helper, proto = self.onnx.helper, self.onnx.TensorProto
        graph = helper.make_graph(
            self.nodes, "convnet",
            [helper.make_tensor_value_info(input_name, proto.FLOAT, ["N", *input_shape])],
            [helper.make_tensor_value_info(output_name, proto.FLOAT, ["N", *output_shape])],
            initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="convnet-engine", doc_string=doc)
        self.onnx.checker.check_model(model)
        return model
