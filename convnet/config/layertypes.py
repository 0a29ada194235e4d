"""What each layer type accepts: the key table of the config language (SPEC section 2).

One :class:`LayerType` per ``type=`` value says how many inputs the layer
reads, whether it takes a ``neuron=``, and which keys it accepts in the
layer-def and layer-params files with their converters and defaults.  The
parser (:mod:`convnet.config.parse`) walks this table; it has no per-type
branches.  The attrs/params names and meanings are those documented in
:mod:`convnet.config.model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from convnet.config.location import Where
from convnet.config.schedules import ScheduleValue
from convnet.config.values import Bool, Choice, Float, Int, Unsupported

REQUIRED = object()  # Key.default of a key that must be given


@dataclass(frozen=True)
class Key:
    """One key: its converter, default and whether it takes one value per input.

    ``also_in_params``: an attr that cuda-convnet2 read from the layer-params
    file (``coeffs``); it is accepted there too.
    """

    name: str
    convert: Callable[[str, Where], Any]
    default: Any = REQUIRED
    per_input: bool = False
    also_in_params: bool = False


@dataclass(frozen=True)
class LayerType:
    """The rules for one ``type=``.

    ``attrs`` come from the layer-def file; ``params`` from the layer-params
    file, or from the layer-def section when the params file lacks them (the
    params file wins, so hyper-parameters can be changed there).  ``hints`` are
    kernel-tuning keys of cuda-convnet2: validated, then dropped.  ``aliases``
    map cuda-convnet v1 spellings to current keys.  ``finish`` checks and
    derives attrs that depend on several keys; it gets the attrs and a
    function giving the :class:`Where` of a key.
    """

    name: str
    min_inputs: int = 1
    max_inputs: int | None = 1
    neuron: str = "optional"  # "optional" | "required" | "forbidden"
    takes_gpu: bool = True
    attrs: tuple[Key, ...] = ()
    params: tuple[Key, ...] = ()
    hints: tuple[Key, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    finish: Callable[[dict, Callable[[str], Where]], None] | None = None


def _grouped_filters(attrs: dict, where: Callable[[str], Where]) -> None:
    """cuda-convnet2 reads ``filters`` per group: the layer has filters x groups of them.

    Every input must give the same total; each filter sees channels/groups channels.
    """
    totals = [f * g for f, g in zip(attrs["filters"], attrs["groups"])]
    for channels, groups in zip(attrs["channels"], attrs["groups"]):
        if channels % groups:
            raise where("groups").error(f"groups={groups} does not divide channels={channels}")
    if len(set(totals)) > 1:
        raise where("filters").error(
            "every input must give the same number of filters (filters x groups), got "
            + ", ".join(map(str, totals)))
    attrs["filters"] = totals[0]
    attrs["filterChannels"] = [c // g for c, g in zip(attrs["channels"], attrs["groups"])]


def _pool_stride(attrs: dict, where: Callable[[str], Where]) -> None:
    """As in cuda-convnet2, pooling windows may overlap but not skip pixels."""
    if attrs["stride"] > attrs["sizeX"]:
        raise where("stride").error(
            f"must be at most sizeX={attrs['sizeX']}, got {attrs['stride']}")


_POSITIVE = Int(lo=1)
_NONNEGATIVE = Float(lo=0)

_WEIGHT_PARAMS = (
    Key("epsW", ScheduleValue(), per_input=True),
    Key("epsB", ScheduleValue()),
    Key("momW", _NONNEGATIVE, per_input=True),
    Key("momB", _NONNEGATIVE),
    Key("wc", _NONNEGATIVE, default=0.0, per_input=True),
    Key("wball", Unsupported(Float(), 0.0, "wball (weight-ball normalisation)"), default=0.0,
        per_input=True),
    Key("updatePeriod", Int(lo=0), default=0),
)
_INIT = (
    Key("initW", _NONNEGATIVE, default=0.01, per_input=True),
    Key("initB", Float(), default=0.0),
)
_FILTER_ATTRS = (
    Key("filters", _POSITIVE, per_input=True),
    Key("filterSize", _POSITIVE, per_input=True),
    Key("padding", Int(lo=0), default=0, per_input=True),
    Key("stride", _POSITIVE, default=1, per_input=True),
    Key("channels", _POSITIVE, per_input=True),
    Key("groups", _POSITIVE, default=1, per_input=True),
) + _INIT
_FILTER_HINTS = (
    Key("sumWidth", _POSITIVE, default=None),
    Key("partialSum", Int(lo=0), default=None),
    Key("randSparse", Unsupported(Bool(), False, "randSparse (random sparse connectivity)"),
        default=False),
)
_V1_FILTERS = {"numFilters": "filters"}
_COST_PARAMS = (
    Key("coeff", Float(), default=1.0),
    Key("topk", _POSITIVE, default=1),
)
_NORM_ATTRS = (
    Key("size", _POSITIVE),
    Key("channels", _POSITIVE),
)
_NORM_PARAMS = (
    Key("scale", _NONNEGATIVE),
    Key("pow", _NONNEGATIVE),
    Key("minDiv", Float(gt=0), default=1.0),
)
_DROPOUT_PARAMS = (
    Key("enable", Bool(), default=True),
    Key("keep", Float(gt=0, hi=1), default=0.5),
)


def _table(*types: LayerType) -> dict[str, LayerType]:
    return {t.name: t for t in types}


LAYER_TYPES: dict[str, LayerType] = _table(
    # Data layers run wherever their readers run (SPEC section 3).
    LayerType("data", min_inputs=0, max_inputs=0, neuron="forbidden", takes_gpu=False,
              attrs=(Key("dataIdx", Int(lo=0)),)),
    LayerType("conv", max_inputs=None, params=_WEIGHT_PARAMS, hints=_FILTER_HINTS,
              attrs=_FILTER_ATTRS + (Key("sharedBiases", Bool(), default=True),),
              aliases=_V1_FILTERS, finish=_grouped_filters),
    LayerType("local", max_inputs=None, params=_WEIGHT_PARAMS, attrs=_FILTER_ATTRS,
              # Local layers always have one bias per output position.
              hints=_FILTER_HINTS + (Key("sharedBiases", Bool(), default=None),),
              aliases=_V1_FILTERS, finish=_grouped_filters),
    LayerType("fc", max_inputs=None, params=_WEIGHT_PARAMS,
              attrs=(Key("outputs", _POSITIVE),) + _INIT, aliases={"numOutputs": "outputs"}),
    LayerType("pool", finish=_pool_stride, attrs=(
        Key("pool", Choice("max", "avg", "maxabs")),
        Key("sizeX", _POSITIVE),
        Key("stride", _POSITIVE),
        Key("start", Int(), default=0),
        Key("outputsX", Int(lo=0), default=0),
        Key("channels", _POSITIVE),
    )),
    LayerType("cmrnorm", attrs=_NORM_ATTRS, params=_NORM_PARAMS, hints=(
        Key("blocked", Unsupported(Bool(), False, "blocked cross-map normalisation"),
            default=False),)),
    LayerType("rnorm", attrs=_NORM_ATTRS, params=_NORM_PARAMS, aliases={"sizeX": "size"}),
    LayerType("cnorm", attrs=_NORM_ATTRS, params=_NORM_PARAMS, aliases={"sizeX": "size"}),
    LayerType("neuron", neuron="required"),
    LayerType("softmax"),
    LayerType("dropout", params=_DROPOUT_PARAMS),
    LayerType("dropout2", params=_DROPOUT_PARAMS),
    LayerType("pass", max_inputs=None),
    LayerType("concat", max_inputs=None),
    LayerType("eltsum", max_inputs=None, attrs=(
        Key("coeffs", Float(), default=1.0, per_input=True, also_in_params=True),)),
    LayerType("eltmax", min_inputs=2, max_inputs=None),
    LayerType("sum", attrs=(Key("stride", _POSITIVE, default=None),)),
    LayerType("cost.logreg", min_inputs=2, max_inputs=2, neuron="forbidden", params=_COST_PARAMS),
    LayerType("cost.crossent", min_inputs=2, max_inputs=2, neuron="forbidden", params=_COST_PARAMS),
    LayerType("cost.bce", min_inputs=2, max_inputs=2, neuron="forbidden",
              params=_COST_PARAMS + (Key("posWeight", _NONNEGATIVE, default=1.0),)),
    LayerType("cost.sum2", neuron="forbidden", params=_COST_PARAMS),
)
