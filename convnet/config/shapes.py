"""Shape inference: per-case input/output shapes and the derived attrs.

Walks the layers in file order (a topological order, checked by the parser)
and applies each layer's shape rule, which its type's descriptor names
(:mod:`convnet.config.layer_types.table`; the rules are in
:mod:`convnet.config.layer_types.shape_rules`).  Every error names the layer-def file (or
the layer-params file for a params key), the layer's section and the key to
change.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Mapping

from convnet.config.values.location import Where
from convnet.config.model import NetConfig
from convnet.config.layer_types.shape_rules import ShapeState

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
    state = ShapeState(net, dims, _classes_arg(net, num_classes))
    for layer in net:
        layer.input_shapes = tuple(net[name].output_shape for name in layer.inputs)
        ltype = layer.layer_type
        layer.output_shape = ltype.shape(layer, state)
        state.check_size(layer, ltype.size_key)
    net.data_dims = {idx: state.data_dims[idx] for idx in sorted(state.used_dims)}
    net.num_classes = state.num_classes or 0
    return net


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
