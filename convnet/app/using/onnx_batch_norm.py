"""ONNX's ``BatchNormalization`` as the engine's ``bnorm`` layer (docs/BATCH-NORM.md).

A batch normalisation stays a layer of its own, also right after a convolution (where
an exporter in eval mode may fold it into the weights): the imported net then trains
as the model did, with the statistics of each minibatch, and keeps moving its running
averages.  The node's four constants are the layer's arrays: ``scale`` is ``W0``,
``B`` is ``b``, ``input_mean`` and ``input_var`` are the running ``mean`` and ``var``,
taken as they are.  ONNX's inference computes ``scale (x - input_mean) /
sqrt(input_var + epsilon) + B``, and so do the engine's test mode and PyTorch's eval
mode with their running variance (which both keep unbiased: the convention is only in
how training moves it), so no conversion is due.  ``epsilon`` and ``momentum`` (the
running averages' factor, ONNX's and the engine's ``decay`` alike) become the layer's
keys.  A node in training mode (``training_mode=1``, what PyTorch writes for a model
exported in training) normalises with the batch's statistics in ONNX's inference too;
the layer does so in training, and in testing uses its running averages, as PyTorch's
eval mode does: the import says so in a note.

A mixin of :class:`convnet.app.using.onnx_import.Translation`, whose bookkeeping
(``_add``, ``_source``, ``_const``, ...) it uses.
"""

from __future__ import annotations

import numpy as np

from convnet.app.using.imported_net import ImportedLayer

#: The node's constant inputs after ``X``, in order, and the layer's arrays they fill.
ARRAYS = (("scale", "W0"), ("B", "b"), ("input_mean", "mean"), ("input_var", "var"))


def float32_value(value: float) -> float:
    """An ONNX float attribute (float32) as the shortest decimal that gives it back
    (``1e-05``, not ``9.999999747378752e-06``), for the layer-def file."""
    return float(str(np.float32(value)))


class BatchNormOps:
    """``BatchNormalization`` of an image (per channel) or of flat features (each its
    own channel, as ``bnorm`` normalises a flat input)."""

    def _op_BatchNormalization(self, node) -> None:
        a, x = self.g.attrs(node), node.input[0]
        if not a.get("spatial", 1):
            raise self._refuse(node, "normalises each pixel on its own (spatial=0); the "
                                     "engine's bnorm normalises per channel")
        source = self._source(node, x)
        shape = self.shape[x]
        if len(shape) == 3:
            self._image(node, x)
        if self.layers[source].shape[0] != shape[0]:  # a Flatten of an image before it
            raise self._refuse(node, f"normalises each of the {shape[0]} flattened features "
                                     f"of the image of '{source}' on its own; the engine's "
                                     "bnorm normalises an image per channel")
        channels = shape[0]
        arrays = {}
        for index, (onnx_name, key) in enumerate(ARRAYS, start=1):
            value = self._const(node, index)
            if value is None or value.size != channels:
                raise self._refuse(node, f"its {onnx_name} has "
                                         f"{0 if value is None else value.size} values for "
                                         f"{channels} channels")
            arrays[key] = value.astype(np.float32).reshape(-1)
        attrs = {"epsilon": float32_value(a.get("epsilon", 1e-5)),
                 "decay": float32_value(a.get("momentum", 0.9))}
        # the scale and shift learn without weight decay, as ResNets train them
        layer = self._add(ImportedLayer(self._name(node), "bnorm", [source], shape, attrs,
                                        {"wc": [0.0]}, weights=arrays), node.output[0])
        if a.get("training_mode", 0):
            self.notes.append(f"'{layer.name}' normalises with each batch's statistics in "
                              "the model (training_mode=1); the engine's bnorm does so in "
                              "training and uses its running averages in testing and "
                              "--predict, as PyTorch's eval mode does")
