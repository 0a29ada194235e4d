"""The layer library: one implementation per cuda-convnet2 layer type.

``LAYER_TYPES`` maps every config ``type`` to its :class:`~layers.base.Layer`
subclass; each family module registers its types on import:

=====================  ==============================================
module                 types
=====================  ==============================================
:mod:`layers.weights`  ``conv``, ``local``, ``fc``
:mod:`layers.pooling`  ``pool``
:mod:`layers.norms`    ``cmrnorm``, ``rnorm``, ``cnorm``
:mod:`layers.neurons`  ``neuron``
:mod:`layers.softmax`  ``softmax``
:mod:`layers.costs`    ``cost.logreg``, ``cost.crossent``, ``cost.bce``, ``cost.sum2``
:mod:`layers.dropout`  ``dropout``, ``dropout2``
:mod:`layers.combine`  ``pass``, ``concat``, ``eltsum``, ``eltmax``, ``sum``
:mod:`layers.data`     ``data`` (identity; the executor loads data itself)
=====================  ==============================================

Every layer's forward/backward includes its inline ``neuron=`` (not for
costs); the neuron functions are listed in ``NEURON_TYPES``.
"""

from __future__ import annotations

from convnet.config.model import LayerDef
from kernels.neurons import NEURONS

from . import combine, costs, data, dropout, norms, neurons, pooling, softmax, weights  # noqa: F401
from .base import Context, Layer
from .core import LAYER_TYPES, ComputeLayer, register

NEURON_TYPES: dict[str, int] = {name: fn.nargs for name, fn in NEURONS.items()}


def build_layer(ldef: LayerDef) -> Layer:
    """The layer object for one parsed layer definition."""
    try:
        cls = LAYER_TYPES[ldef.type]
    except KeyError:
        raise ValueError(f"layer '{ldef.name}': unknown layer type {ldef.type!r}") from None
    return cls(ldef)


__all__ = ["LAYER_TYPES", "NEURON_TYPES", "build_layer", "register", "Context", "Layer",
           "ComputeLayer"]
