"""The layer library: one implementation per cuda-convnet2 layer type.

Each type's descriptor in :mod:`convnet.config.layer_types.table` names the class
that computes it (``"convnet.layers.weights:ConvLayer"``); :func:`build_layer`
resolves that name.  The classes live in family modules: :mod:`convnet.layers.weights`
(conv, local, fc), :mod:`convnet.layers.pooling`, :mod:`convnet.layers.norms`,
:mod:`convnet.layers.batch_norm`, :mod:`convnet.layers.neurons`, :mod:`convnet.layers.softmax`, :mod:`convnet.layers.costs`,
:mod:`convnet.layers.dropout`, :mod:`convnet.layers.combine` (pass, concat, eltsum, eltmax,
sum) and :mod:`convnet.layers.data` (identity; the executor loads data itself).

Every layer's forward/backward includes its inline ``neuron=`` (not for
costs); the neuron functions are those of :data:`convnet.kernels.neurons.NEURONS`.
"""

from __future__ import annotations

import importlib

from convnet.config.layer_types.table import LayerType, layer_type
from convnet.config.model import LayerDef

from .base import Context, Layer
from .core import ComputeLayer


def build_layer(ldef: LayerDef) -> Layer:
    """The layer object for one parsed layer definition."""
    try:
        ltype = layer_type(ldef.type)
    except ValueError as error:
        raise ValueError(f"layer '{ldef.name}': {error}") from None
    return layer_class(ltype)(ldef)


def layer_class(ltype: LayerType) -> type[Layer]:
    """The class a descriptor's ``"module:Class"`` implementation path names."""
    module, _, name = ltype.implementation.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, Layer)):
        raise TypeError(f"layer type {ltype.name!r}: {ltype.implementation!r} "
                        "does not name a Layer class")
    return cls


__all__ = ["build_layer", "layer_class", "Context", "Layer", "ComputeLayer"]
