"""The layer-type table is the one home of a type: its kind, rules and class."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

from convnet import layers
from convnet.config.layer_types.table import LAYER_TYPES, Kind, LayerType
from convnet.config.model import LayerDef
from convnet.config.layer_types.shape_rules import same_shape
from convnet.layers import layer_class
from convnet.layers.base import Layer
from convnet.layers.core import ComputeLayer


def _layer_classes() -> set[type]:
    """Every public Layer class of the layer library (the bases excepted)."""
    found = set()
    for info in pkgutil.iter_modules(layers.__path__):
        module = importlib.import_module(f"convnet.layers.{info.name}")
        for name, obj in inspect.getmembers(module, inspect.isclass):
            if (issubclass(obj, Layer) and obj.__module__ == module.__name__
                    and not name.startswith("_") and obj not in (Layer, ComputeLayer)):
                found.add(obj)
    return found


def test_every_descriptor_names_a_layer_class_and_every_class_is_named():
    named = {layer_class(ltype) for ltype in LAYER_TYPES.values()}
    assert all(issubclass(cls, Layer) for cls in named)
    assert named == _layer_classes()


def test_kinds():
    by_kind = {kind: {n for n, t in LAYER_TYPES.items() if t.kind is kind} for kind in Kind}
    assert by_kind[Kind.DATA] == {"data"}
    assert by_kind[Kind.WEIGHTED] == {"conv", "local", "fc", "bnorm"}
    assert by_kind[Kind.COST] == {"cost.logreg", "cost.crossent", "cost.bce", "cost.sum2"}
    ldef = LayerDef(name="c", type="cost.sum2")
    assert ldef.is_cost and not ldef.has_weights and not ldef.is_data
    assert ldef.param_shapes() == {}


def test_a_weight_rule_goes_with_the_weighted_kind():
    with pytest.raises(ValueError, match="weight-shape rule"):
        LayerType("x", Kind.WEIGHTED, "convnet.layers.combine:SumLayer", same_shape)
    with pytest.raises(ValueError, match="weight-shape rule"):
        LayerType("x", Kind.PLAIN, "convnet.layers.combine:SumLayer", same_shape, weights=dict)


def test_an_implementation_path_must_name_a_layer_class():
    ltype = LayerType("x", Kind.PLAIN, "convnet.layers.core:per_input", same_shape)
    with pytest.raises(TypeError, match="does not name a Layer class"):
        layer_class(ltype)

