"""ONNX operators to the engine's layers: the translation of ``python -m convnet.import_onnx``.

The nodes are read in order (ONNX's is topological) and each becomes a layer of the
config language, or folds into the layer before it where the engine computes both in
one: a bias ``Add`` after a ``Conv`` or ``MatMul``, an activation (``Relu`` ...) as
the layer's inline ``neuron=``, the ``Add`` of two ``MatMul`` results as one fc layer
of two inputs (how the engine's own export writes one), a constant ``Mul`` into the
weights.  ``Flatten``, ``Reshape`` to (N, features), ``Dropout`` and ``Identity``
change nothing the engine keeps (an fc layer reads an image in (C, H, W) order, as
``Flatten`` lays it out).  Where ONNX's geometry is not cuda-convnet2's, the layer is
made to compute ONNX's: a convolution whose last window would hang past the padded
edge (ONNX rounds the output size down, the engine up) gets a 1x1 max-pool that keeps
ONNX's outputs (``<name>_crop``); a pool gets its ``start`` and ``outputsX``.  A
``BatchNormalization`` is a ``bnorm`` layer of its own, never folded into the
convolution before it, so that it fine-tunes (:mod:`convnet.app.using.onnx_batch_norm`).

Anything else is one line naming the node: an operator the engine has no layer for,
or a geometry it cannot compute (dilation, uneven padding).  Layers are named after the nodes (the
module path PyTorch writes, ``/features/features.0/Conv`` -> ``features_0``), so that
``--init-from`` matches a fine-tuned net's layers by name (``layer1_0_conv1`` for the
module ``layer1.0.conv1``).
"""

from __future__ import annotations

import math
import re
import numpy as np

from convnet.app.using.imported_net import INIT_W, ImportedLayer
from convnet.app.using.onnx_batch_norm import BatchNormOps
from convnet.app.using.onnx_image_ops import ImageOps
from convnet.app.using.onnx_model import OnnxGraph
from convnet.errors import DataError

#: ONNX activations -> the engine's inline neurons.
NEURONS = {"Relu": "relu", "Sigmoid": "logistic", "Abs": "abs", "Softplus": "softrelu",
           "Sqrt": "sqrt", "Tanh": "tanh[1,1]"}
#: Layer types an activation can fold into as their ``neuron=``.
TAKES_NEURON = ("conv", "fc", "pool", "eltsum", "bnorm")
#: Operators that change nothing the engine keeps.
ALIASES = ("Identity", "Dropout")


class Translation(ImageOps, BatchNormOps):
    """The layers of one graph, in net order (:attr:`layers`), and notes for the user."""

    def __init__(self, graph: OnnxGraph):
        self.g = graph
        self.layers: dict[str, ImportedLayer] = {}
        self.tensor_layer: dict[str, str] = {}  # ONNX tensor -> the layer whose output it is
        self.direct: dict[str, str] = {}  # layer -> the tensor its last node wrote
        self.shape: dict[str, tuple[int, ...]] = {}  # ONNX tensor -> per-case shape
        self.raw = {graph.input_name}  # the input and what only preprocesses it
        self.notes: list[str] = []
        self._add(ImportedLayer("data", "data", [], graph.input_shape, {"dataIdx": 0}),
                  graph.input_name)
        for node in graph.nodes:
            self._node(node)

    # ------------------------------------------------------------ bookkeeping
    def _refuse(self, node, why: str) -> DataError:
        return DataError(f"{self.g.where(node)}: {why}")

    def _add(self, layer: ImportedLayer, tensor: str) -> ImportedLayer:
        layer.name = self._fresh(layer.name)
        self.layers[layer.name] = layer
        self._alias(tensor, layer.name, layer.shape)
        self.direct[layer.name] = tensor
        return layer

    def _fresh(self, name: str) -> str:
        base, k = name, 1
        while name in self.layers or name in ("labels", "probs", "logprob"):
            k += 1
            name = f"{base}_{k}"
        return name

    def _alias(self, tensor: str, layer: str, shape) -> None:
        self.tensor_layer[tensor] = layer
        self.shape[tensor] = tuple(shape)

    def _source(self, node, tensor: str) -> str:
        """The layer whose output ``tensor`` is."""
        self._refuse_constant(node, tensor)
        return self.tensor_layer[tensor]

    def _shape(self, node, tensor: str) -> tuple[int, ...]:
        """The per-case shape of the activation ``tensor``."""
        self._refuse_constant(node, tensor)
        return self.shape[tensor]

    def _refuse_constant(self, node, tensor: str) -> None:
        if tensor in self.g.constants:
            raise self._refuse(node, f"reads the constant '{tensor}' where the engine needs "
                                     "an activation")

    def _const(self, node, index: int, default=None) -> np.ndarray | None:
        if len(node.input) <= index or not node.input[index]:
            return default
        value = self.g.constants.get(node.input[index])
        if value is None:
            raise self._refuse(node, f"input {index} ('{node.input[index]}') is computed, not "
                                     "a constant; the engine needs fixed weights there")
        return value

    def _pending(self, tensor: str, types) -> ImportedLayer | None:
        """The layer that wrote ``tensor`` when a following node can fold into it: of one
        of ``types``, without a neuron yet, and read by nothing else."""
        name = self.tensor_layer.get(tensor)
        layer = self.layers.get(name) if name else None
        if layer is None or layer.type not in types or layer.neuron is not None \
                or self.direct.get(name) != tensor or self.g.uses[tensor] != 1:
            return None
        return layer

    def _image(self, node, tensor: str) -> tuple[int, int]:
        shape = self._shape(node, tensor)
        if len(shape) != 3 or shape[1] != shape[2]:
            raise self._refuse(node, f"reads a {'x'.join(map(str, shape))} activation; the "
                                     "engine's image layers read square C x S x S images")
        return shape[0], shape[1]

    def _out_side(self, node) -> int:
        shape = self.g.shapes.get(node.output[0])
        if shape is None or len(shape) != 3:
            raise self._refuse(node, "its output shape is not known (dynamic shapes)")
        return shape[1]

    def _name(self, node) -> str:
        """The module path PyTorch writes, whose scopes repeat their parent's name
        (``/features/features.0/Conv`` -> ``features_0``, ``/layer1/layer1.0/conv1/Conv``
        -> ``layer1_0_conv1``, as the module's weights are named); else the node's own."""
        text = node.name or node.output[0]
        parts = [p for p in text.split("/") if p]
        path: list[str] = []
        for part in parts[:-1]:
            if path and part.startswith(path[-1] + "."):
                path[-1] = part  # a child of a Sequential (ModuleList ...): its full name
            else:
                path.append(part)
        text = "_".join(path) if path else (parts[0] if parts else node.op_type.lower())
        text = re.sub(r"[^A-Za-z0-9_]", "_", text).strip("_") or node.op_type.lower()
        return text if text[0].isalpha() else f"l_{text}"

    # ----------------------------------------------------------------- nodes
    def _node(self, node) -> None:
        if node.domain not in ("", "ai.onnx"):
            raise self._refuse(node, f"is an operator of the domain '{node.domain}', which "
                                     "the engine has no layer for")
        handler = getattr(self, f"_op_{node.op_type}", None)
        if node.op_type in NEURONS:
            handler = self._op_activation
        elif node.op_type in ALIASES:
            handler = self._op_alias
        if handler is None:
            raise self._refuse(node, "the engine has no layer for this operator")
        used = [out for out in node.output[1:] if out and self.g.uses[out]]
        if used:
            raise self._refuse(node, f"its extra output '{used[0]}' is read, which the engine "
                                     "does not compute")
        handler(node)

    def _op_alias(self, node) -> None:
        x = node.input[0]
        if x in self.g.constants:  # PyTorch names a shared initializer twice this way
            self.g.constants[node.output[0]] = self.g.constants[x]
            return
        self._alias(node.output[0], self._source(node, x), self._shape(node, x))
        if x in self.raw:
            self.raw.add(node.output[0])

    def _op_Flatten(self, node) -> None:
        if self.g.attrs(node).get("axis", 1) != 1:
            raise self._refuse(node, "flattens from another axis than 1 (the features)")
        x = node.input[0]
        self._alias(node.output[0], self._source(node, x), (math.prod(self._shape(node, x)),))

    def _op_Reshape(self, node) -> None:
        x, target = node.input[0], self._const(node, 1)
        features = math.prod(self._shape(node, x))
        if target is None or len(target) != 2 or int(target[1]) not in (features, -1):
            raise self._refuse(node, "reshapes to something other than (N, features)")
        self._alias(node.output[0], self._source(node, x), (features,))

    def _fc(self, node, x: str, weights: np.ndarray, bias: np.ndarray) -> None:
        features = math.prod(self._shape(node, x))
        if weights.ndim != 2 or weights.shape[0] != features:
            raise self._refuse(node, f"multiplies {features} features by weights of shape "
                                     f"{weights.shape}")
        outputs = weights.shape[1]
        if np.size(bias) not in (1, outputs):
            raise self._refuse(node, f"adds a bias of shape {np.shape(bias)} to {outputs} "
                                     "outputs")
        self._add(ImportedLayer(self._name(node), "fc", [self._source(node, x)], (outputs,),
                                {"outputs": outputs, "initW": INIT_W},
                                weights={"W0": weights.astype(np.float32),
                                         "b": np.broadcast_to(bias, (outputs,))
                                         .astype(np.float32)}), node.output[0])

    def _op_Gemm(self, node) -> None:
        a = self.g.attrs(node)
        if a.get("transA", 0):
            raise self._refuse(node, "transposes its input")
        weights = self._const(node, 1)
        weights = (weights.T if a.get("transB", 0) else weights) * a.get("alpha", 1.0)
        bias = self._const(node, 2, np.zeros(1, np.float32)) * a.get("beta", 1.0)
        self._fc(node, node.input[0], weights, bias.reshape(-1))

    def _op_MatMul(self, node) -> None:
        x = node.input[0]
        if len(self.shape.get(x, ())) != 1:
            raise self._refuse(node, "multiplies an image (not N x features) by a matrix")
        self._fc(node, x, self._const(node, 1), np.zeros(1, np.float32))

    # ------------------------------------------------ folding and combining
    def _op_activation(self, node, spec: str | None = None) -> None:
        spec = spec or NEURONS[node.op_type]
        x = node.input[0]
        layer = self._pending(x, TAKES_NEURON)
        if layer is not None:
            layer.neuron = spec
            self._alias(node.output[0], layer.name, self._shape(node, x))
            self.direct[layer.name] = node.output[0]
            return
        self._add(ImportedLayer(f"{self._name(node)}_{spec.split('[')[0]}", "neuron",
                                [self._source(node, x)], self._shape(node, x), neuron=spec),
                  node.output[0])

    def _op_Clip(self, node) -> None:
        low, high = self._const(node, 1), self._const(node, 2)
        a = self.g.attrs(node)  # opset < 11 gives the bounds as attributes
        low = float(a.get("min", 0.0) if low is None else low)
        high = a.get("max") if high is None else float(high)
        if low != 0.0:
            raise self._refuse(node, f"clips from {low:g}; the engine's bounded relu "
                                     "clips from 0")
        self._op_activation(node, "relu" if high is None else f"brelu[{float(high)!r}]")

    def _op_Add(self, node) -> None:
        a, b = node.input[:2]
        if a in self.g.constants and b in self.g.constants:
            raise self._refuse(node, "adds two constants (fold them before exporting)")
        if a in self.g.constants or b in self.g.constants:
            x, c = (b, a) if a in self.g.constants else (a, b)
            self._add_constant(node, x, self.g.constants[c])
            return
        fa, fb = self._pending(a, ("fc",)), self._pending(b, ("fc",))
        if fa is not None and fb is not None and fa is not fb:
            self._merge_fc(node, fa, fb)
            return
        self._eltsum(node, [a, b])

    def _add_constant(self, node, x: str, value: np.ndarray) -> None:
        """A bias into the conv or fc before it; at the input, a mean to leave out."""
        if x in self.raw and self.g.uses[x] == 1:
            self.notes.append(f"'{node.name or node.output[0]}' adds a constant image to the "
                              "input (a mean): left out, as the data providers subtract "
                              "their own mean")
            self._alias(node.output[0], "data", self._shape(node, x))
            self.raw.add(node.output[0])
            return
        layer = self._pending(x, ("conv", "fc"))
        outputs = self._shape(node, x)[0]
        if layer is None or value.size not in (1, outputs) or \
                any(d != 1 for d in value.shape[:-3 if layer.type == "conv" else -1]) or \
                (layer.type == "conv" and value.size > 1
                 and value.reshape(value.shape[-3:] if value.ndim >= 3 else (-1,)).shape[0]
                 != outputs):
            raise self._refuse(node, "adds a constant to an activation; the engine takes "
                                     "only a bias (one value per output or channel) right "
                                     "after a Conv, Gemm or MatMul")
        layer.weights["b"] = layer.weights["b"] + value.astype(np.float32).reshape(-1)
        self._renamed(layer, self._name(node))
        self.direct[layer.name] = node.output[0]
        self._alias(node.output[0], layer.name, self._shape(node, x))

    def _op_Mul(self, node) -> None:
        a, b = node.input[:2]
        x, c = (b, a) if a in self.g.constants else (a, b)
        value = self.g.constants.get(c)
        layer = self._pending(x, ("conv", "fc"))
        if value is None or value.size != 1 or layer is None:
            raise self._refuse(node, "multiplies activations; the engine takes only a "
                                     "constant scale right after a Conv, Gemm or MatMul")
        scale = np.float32(value.reshape(()))
        layer.weights = {k: w * scale for k, w in layer.weights.items()}
        self.direct[layer.name] = node.output[0]
        self._alias(node.output[0], layer.name, self._shape(node, x))

    def _renamed(self, layer: ImportedLayer, name: str) -> None:
        """Give ``layer`` the name of the node that completed it (the bias ``Add`` the
        engine's own export names after the layer), if free."""
        if name == layer.name or name in self.layers or name in ("labels", "probs",
                                                                  "logprob"):
            return
        old = layer.name
        self.layers = {(name if k == old else k): v for k, v in self.layers.items()}
        layer.name = name
        self.tensor_layer = {t: (name if n == old else n) for t, n in self.tensor_layer.items()}
        self.direct[name] = self.direct.pop(old)
        for other in self.layers.values():
            other.inputs = [name if i == old else i for i in other.inputs]

    def _merge_fc(self, node, first: ImportedLayer, second: ImportedLayer) -> None:
        """One fc layer of several inputs: the engine's W0, W1, ... summed, one bias."""
        n = len(first.inputs)
        weights = {k: w for k, w in first.weights.items() if k != "b"}
        weights.update({f"W{n + int(k[1:])}": w for k, w in second.weights.items()
                        if k != "b"})
        weights["b"] = first.weights["b"] + second.weights["b"]
        for old in (first, second):
            del self.layers[old.name]
            del self.direct[old.name]
        init = [INIT_W] * (n + len(second.inputs))
        self._add(ImportedLayer(self._name(node), "fc", first.inputs + second.inputs,
                                first.shape, {"outputs": first.shape[0], "initW": init},
                                weights=weights), node.output[0])

    def _eltsum(self, node, tensors: list[str]) -> None:
        shapes = {self._shape(node, t) for t in tensors}
        if len(shapes) != 1:
            raise self._refuse(node, "adds activations of different shapes "
                                     f"({', '.join('x'.join(map(str, s)) for s in shapes)})")
        self._add(ImportedLayer(self._name(node), "eltsum",
                                [self._source(node, t) for t in tensors], shapes.pop()),
                  node.output[0])

    def _op_Sum(self, node) -> None:
        self._eltsum(node, list(node.input))

    def _op_Concat(self, node) -> None:
        rank = 1 + len(self._shape(node, node.input[0]))
        if self.g.attrs(node).get("axis", 1) % rank != 1:
            raise self._refuse(node, "concatenates along another axis than the channels")
        shapes = [self._shape(node, t) for t in node.input]
        if all(len(s) == 3 and s[1:] == shapes[0][1:] for s in shapes):
            shape = (sum(s[0] for s in shapes),) + shapes[0][1:]
        elif all(len(s) == 1 for s in shapes):
            shape = (sum(s[0] for s in shapes),)
        else:
            raise self._refuse(node, "concatenates images of different sizes, or images "
                                     "with vectors")
        self._add(ImportedLayer(self._name(node), "concat",
                                [self._source(node, t) for t in node.input], shape),
                  node.output[0])

    def _op_Softmax(self, node) -> None:
        x = node.input[0]
        if math.prod(self._shape(node, x)) != self._shape(node, x)[0] or \
                self.g.attrs(node).get("axis", 1) not in (1, -1):
            raise self._refuse(node, "is a softmax over something other than the features "
                                     "of each case")
        self._add(ImportedLayer(self._name(node), "softmax", [self._source(node, x)],
                                (self._shape(node, x)[0],)), node.output[0])

    def _op_Slice(self, node) -> None:
        """Only a crop of the input itself (a centre crop before the net): the imported
        net reads the cropped images, as a provider's --inner-size serves them."""
        x = node.input[0]
        if x not in self.raw or self.g.uses[x] != 1:
            raise self._refuse(node, "slices an activation, which no engine layer does")
        shape = self.g.shapes.get(node.output[0])
        if shape is None or len(shape) != 3 or shape[1] != shape[2]:
            raise self._refuse(node, "crops the input to something other than square images")
        self.layers["data"].shape = shape
        self.notes.append(f"the model crops its input to {shape[1]}x{shape[2]}: the imported "
                          f"net reads {shape[1]}x{shape[2]} images (--inner-size "
                          f"{shape[1]} crops larger ones)")
        self._alias(node.output[0], "data", shape)
        self.raw.add(node.output[0])

    # ------------------------------------------------------------- the end
    def output_layer(self) -> str:
        """The layer whose output is the model's."""
        name = self.tensor_layer.get(self.g.output_name)
        if name is None or name == "data":
            raise DataError(f"{self.g.path}: the model's output '{self.g.output_name}' is "
                            "not computed by any layer")
        return name


def import_model(onnx, path) -> tuple[list[ImportedLayer], str, list[str]]:
    """(layers in net order, the output layer, notes) of the ONNX model at ``path``."""
    from convnet.app.using.onnx_model import read_onnx

    translation = Translation(read_onnx(onnx, path))
    return list(translation.layers.values()), translation.output_layer(), translation.notes
