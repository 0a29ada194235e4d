"""The cuda-convnet2 config language: the layer-def and layer-params files.

``load_net(layer_def, layer_params, data_dims, num_classes)`` reads the two
INI files into a typed :class:`NetConfig` with every shape inferred.  It is
two stages, usable apart: :func:`parse_net` (syntax and per-layer meaning,
no data needed) and :func:`infer_shapes` (shapes given the data dimensions).
Every problem raises :class:`convnet.errors.ConfigError` naming the file,
section and key.

The modules here read files and build the net; below them, :mod:`~convnet.config.layer_types`
(one descriptor and its rules per layer type), then :mod:`~convnet.config.values` (typed
values).  ``config`` imports only ``kernels`` and the base modules of ``convnet``.
"""

from __future__ import annotations

from convnet.config.model import LayerDef, NetConfig
from convnet.config.values.neurons import NeuronSpec
from convnet.config.parse import parse_net
from convnet.config.values.schedules import Schedule
from convnet.config.shapes import infer_shapes
from convnet.config.values.typed import parse_data_columns, parse_data_dims


def load_net(layer_def_path, layer_params_path, data_dims: dict[int, tuple[int, ...]] | None = None,
             num_classes: int | None = None) -> NetConfig:
    """Parse both files and infer shapes; see :func:`infer_shapes` for the arguments."""
    return infer_shapes(parse_net(layer_def_path, layer_params_path), data_dims, num_classes)


__all__ = ["LayerDef", "NetConfig", "NeuronSpec", "Schedule", "infer_shapes", "load_net",
           "parse_data_columns", "parse_data_dims", "parse_net"]
