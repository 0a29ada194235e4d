"""The image layers of an ONNX import: convolutions, pooling and LRN, in the engine's geometry.

ONNX rounds a convolution's or pool's output size down; cuda-convnet2 rounds a
convolution's up (its last window may hang past the padded edge and read zeros) and
lets a pool say how many windows it has (``outputsX``) and where the first starts
(``start``, negative for padding).  So a pool takes ONNX's count and padding as they
are, and a convolution that would get one window more than ONNX's takes ONNX's count
as its ``modulesX`` (the first windows of those the ceiling rule gives, as a ResNet's
stride-2 convolutions need them).  A geometry the engine
cannot compute (dilation, windows not the same across and down, padding that differs
from one side to the other beyond what the rounding covers) is one line naming the
node.  A mixin of :class:`convnet.app.using.onnx_import.Translation`, whose
bookkeeping (``_add``, ``_source``, ``_image``, ...) it uses.
"""

from __future__ import annotations

import numpy as np

from convnet.app.using.imported_net import INIT_W, ImportedLayer


class ImageOps:
    """``Conv``, ``MaxPool``, ``AveragePool``, the global pools and ``LRN``."""

    def _op_Conv(self, node) -> None:
        a, x = self.g.attrs(node), node.input[0]
        weights = self._const(node, 1).astype(np.float32)
        filters = weights.shape[0]
        bias = self._const(node, 2, np.zeros(filters, np.float32))
        channels, side = self._image(node, x)
        size, stride, top, end = self._window(node, a, weights.shape[2:])
        groups = int(a.get("group", 1))
        if weights.shape[1] * groups != channels:
            raise self._refuse(node, f"its weights read {weights.shape[1]} x {groups} "
                                     f"channels, its input has {channels}")
        want = self._out_side(node)
        modules = 1 + -(-(2 * top + side - size) // stride)  # the engine's ceiling rule
        if modules < want:
            raise self._refuse(node, f"pads the end by {end} and the start by {top}: the "
                                     "engine pads both sides alike")
        attrs = {"channels": channels, "filters": filters // groups, "filterSize": size,
                 "padding": top, "stride": stride, "sharedBiases": 1, "initW": INIT_W}
        if modules > want:  # ONNX drops the window that would hang past the padded edge
            attrs["modulesX"] = want
        if groups > 1:
            attrs["groups"] = groups
        self._add(ImportedLayer(self._name(node), "conv", [self._source(node, x)],
                                (filters, want, want), attrs,
                                weights={"W0": weights, "b": bias.astype(np.float32)
                                         .reshape(-1)}), node.output[0])

    def _window(self, node, a: dict, kernel) -> tuple[int, int, int, int]:
        """(size, stride, start padding, end padding) of a square window."""
        kernel = list(a.get("kernel_shape", kernel))
        strides = list(a.get("strides", [1, 1]))
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
            raise self._refuse(node, "pads by auto_pad; export it with explicit pads")
        if any(d != 1 for d in a.get("dilations", [1, 1])):
            raise self._refuse(node, "is dilated, which the engine's layers are not")
        if len(kernel) != 2 or kernel[0] != kernel[1] or strides[0] != strides[1] \
                or pads[0] != pads[1] or pads[2] != pads[3]:
            raise self._refuse(node, "has a window, stride or padding that is not the same "
                                     "across and down, as the engine's are")
        return int(kernel[0]), int(strides[0]), int(pads[0]), int(pads[2])

    def _pool(self, node, kind: str, size: int, stride: int, start: int) -> None:
        x = node.input[0]
        channels, side = self._image(node, x)
        outputs = self._out_side(node)
        if start + (outputs - 1) * stride >= side:
            raise self._refuse(node, "has windows that lie wholly in the padding")
        attrs = {"pool": kind, "sizeX": size, "stride": stride, "outputsX": outputs,
                 "channels": channels}
        if start:
            attrs["start"] = start
        self._add(ImportedLayer(self._name(node), "pool", [self._source(node, x)],
                                (channels, outputs, outputs), attrs), node.output[0])

    def _op_MaxPool(self, node) -> None:
        a = self.g.attrs(node)
        if a.get("storage_order", 0):
            raise self._refuse(node, "stores its indices column-major")
        size, stride, top, _ = self._window(node, a, None)
        self._pool(node, "max", size, stride, -top)

    def _op_AveragePool(self, node) -> None:
        a = self.g.attrs(node)
        size, stride, top, end = self._window(node, a, None)
        _, side = self._image(node, node.input[0])
        hangs = (top or end or a.get("ceil_mode", 0)) and \
            (side + top + end - size) % stride + top + end > 0
        if hangs and a.get("count_include_pad", 0):
            raise self._refuse(node, "counts the padding in its averages; the engine "
                                     "averages the pixels inside the image")
        self._pool(node, "avg", size, stride, -top)

    def _op_GlobalAveragePool(self, node, kind: str = "avg") -> None:
        _, side = self._image(node, node.input[0])
        self._pool(node, kind, side, side, 0)

    def _op_GlobalMaxPool(self, node) -> None:
        self._op_GlobalAveragePool(node, "max")

    def _op_LRN(self, node) -> None:
        a, x = self.g.attrs(node), node.input[0]
        channels, side = self._image(node, x)
        size = int(a["size"])
        if size % 2 == 0:
            raise self._refuse(node, "has an even window, which ONNX centres otherwise than "
                                     "the engine's cmrnorm")
        self._add(ImportedLayer(self._name(node), "cmrnorm", [self._source(node, x)],
                                (channels, side, side), {"size": size, "channels": channels},
                                {"scale": float(a.get("alpha", 1e-4)),
                                 "pow": float(a.get("beta", 0.75)),
                                 "minDiv": float(a.get("bias", 1.0))}), node.output[0])
