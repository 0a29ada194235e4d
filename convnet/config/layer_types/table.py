"""The layer types of the config language: one descriptor per ``type=`` value.

Everything the engine knows about a layer type is in its :class:`LayerType`
entry of :data:`LAYER_TYPES`, in the spirit of cuda-convnet2's table of layer
parsers: how many inputs it reads, whether it takes a ``neuron=``, which keys
it accepts in the layer-def and layer-params files (converters, defaults, v1
spellings), its kind (data, weighted, cost or plain), its output-shape rule
(:mod:`convnet.config.layer_types.shape_rules`), its weight-shape rule
(:mod:`convnet.config.layer_types.weight_shapes`) and the class that computes it.

The class is named by a ``"module:Class"`` path (e.g.
``"convnet.layers.weights:ConvLayer"``) that :func:`convnet.layers.build_layer` resolves: the
layer library imports this package, so this package names its classes
without importing them.  Adding a layer type is one entry here, its class in
``layers/`` and its kernels.  The parser, the shape-inference walk and the
layer library read the table; none of them branches on the type.  The attrs
and params names and meanings are those documented in
:mod:`convnet.config.model`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from convnet.config.layer_types import memory_rules as memory
from convnet.config.layer_types import shape_rules as shape
from convnet.config.layer_types import weight_shapes as weights
from convnet.config.values.location import Where
from convnet.config.layer_types.memory_rules import MemoryRule
from convnet.config.values.schedules import ScheduleValue
from convnet.config.layer_types.shape_rules import ShapeRule
from convnet.config.values.typed import Bool, Choice, Float, Int, SyncMode, Unsupported
from convnet.config.layer_types.weight_shapes import WeightRule

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


class Kind(enum.Enum):
    """What a layer is to the rest of the engine."""

    DATA = "data"          # filled from the data provider, computes nothing
    WEIGHTED = "weighted"  # has weights (``weights`` gives their shapes) and learns them
    COST = "cost"          # a per-case cost; no layer may read it
    PLAIN = "plain"        # computes from its inputs, no weights


@dataclass(frozen=True)
class LayerType:
    """Everything about one ``type=``.

    ``attrs`` come from the layer-def file; ``params`` from the layer-params
    file, or from the layer-def section when the params file lacks them (the
    params file wins, so hyper-parameters can be changed there).  ``hints`` are
    kernel-tuning keys of cuda-convnet2: validated, then dropped.  ``aliases``
    map cuda-convnet v1 spellings to current keys.  ``finish`` checks and
    derives attrs that depend on several keys; it gets the attrs and a
    function giving the :class:`Where` of a key.

    ``statistics_size`` says which layers of the type normalise over every replica's
    cases (see the field).

    ``shape`` infers the per-case output shape; an output or weight array too
    large to hold is blamed on ``size_key``.  ``weights`` gives the weight
    shapes, exactly when the kind is ``WEIGHTED``.  ``memory`` says what a
    forward call leaves for the backward call (:mod:`convnet.config.layer_types.memory_rules`),
    which the plan's memory estimate adds up.  ``implementation`` is the
    ``"module:Class"`` path of the layer class.
    """

    name: str
    kind: Kind
    implementation: str
    shape: ShapeRule
    size_key: str = "inputs"
    weights: WeightRule | None = None
    min_inputs: int = 1
    max_inputs: int | None = 1
    neuron: str = "optional"  # "optional" | "required" | "forbidden"
    takes_gpu: bool = True
    attrs: tuple[Key, ...] = ()
    params: tuple[Key, ...] = ()
    hints: tuple[Key, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    finish: Callable[[dict, Callable[[str], Where]], None] | None = None
    memory: MemoryRule = memory.plain_memory
    #: ``rule(layer) -> int``: the values of one replica's statistics when the layer's
    #: statistics cover the cases of all its replicas (bnorm's ``stats=global``), else 0:
    #: its forward and backward calls then wait for every replica's statistics, combined
    #: by the plan's ``BatchStats`` operations.
    statistics_size: Callable[..., int] | None = None

    def __post_init__(self):
        if (self.weights is not None) != (self.kind is Kind.WEIGHTED):
            raise ValueError(f"layer type {self.name!r}: a weight-shape rule goes with "
                             "Kind.WEIGHTED and only with it")


def _grouped_filters(attrs: dict, where: Callable[[str], Where]) -> None:
    """cuda-convnet2 reads ``filters`` per group: the layer has filters x groups of them.

    Every input must give the same total; each filter sees channels/groups channels,
    unless the input has cuda-convnet v1's ``randSparse``: then each filter group
    reads ``filterChannels`` channels drawn at random (``layers/connectivity.py``),
    with v1's rules: more than one group, ``filterChannels`` dividing ``channels``
    and ``groups x filterChannels`` a multiple of ``channels`` (the draw is that
    many permutations of the channels, cut into the groups' subsets).  Without
    ``randSparse`` a ``filterChannels`` written in the file (v1 wrote it) must be
    channels/groups, and v1 read the key only under ``randSparse``.
    """
    totals = [f * g for f, g in zip(attrs["filters"], attrs["groups"])]
    sparse = attrs["randSparse"]
    for channels, groups, given, random in zip(attrs["channels"], attrs["groups"],
                                               attrs["filterChannels"], sparse):
        if random:
            _check_rand_sparse(channels, groups, given, where)
            continue
        if channels % groups:
            raise where("groups").error(f"groups={groups} does not divide channels={channels}")
        if given is not None and given != channels // groups:
            raise where("filterChannels").error(
                f"each filter reads channels/groups = {channels // groups} channels here, got "
                f"{given}; filters reading a random subset of the channels need randSparse=1")
    if len(set(totals)) > 1:
        raise where("filters").error(
            "every input must give the same number of filters (filters x groups), got "
            + ", ".join(map(str, totals)))
    attrs["filters"] = totals[0]
    attrs["filterChannels"] = [
        (given or c // g) if random else c // g
        for c, g, given, random in zip(attrs["channels"], attrs["groups"],
                                       attrs["filterChannels"], sparse)]


def _check_rand_sparse(channels: int, groups: int, given: int | None,
                       where: Callable[[str], Where]) -> None:
    """cuda-convnet v1's checks of a ``randSparse`` input (its ``LocalLayerParser``)."""
    if groups < 2:
        raise where("groups").error("randSparse needs more than one filter group "
                                    f"(each reads its own random channels), got groups={groups}")
    filter_channels = given or channels // groups
    if channels % filter_channels:
        raise where("filterChannels").error(
            f"filterChannels={filter_channels} must divide channels={channels} under randSparse")
    if groups * filter_channels % channels:
        raise where("filterChannels").error(
            f"groups x filterChannels = {groups} x {filter_channels} must be a multiple of "
            f"channels={channels} under randSparse (every channel read by as many groups)")


def _pool_stride(attrs: dict, where: Callable[[str], Where]) -> None:
    """As in cuda-convnet2, pooling windows may overlap but not skip pixels."""
    if attrs["stride"] > attrs["sizeX"]:
        raise where("stride").error(
            f"must be at most sizeX={attrs['sizeX']}, got {attrs['stride']}")


_POSITIVE = Int(lo=1)
_NONNEGATIVE = Float(lo=0)
#: A momentum above 1 makes every update grow the velocity: it can only diverge.
_MOMENTUM = Float(lo=0, hi=1)

_WEIGHT_PARAMS = (
    Key("epsW", ScheduleValue(), per_input=True),
    Key("epsB", ScheduleValue()),
    Key("momW", _MOMENTUM, per_input=True),
    Key("momB", _MOMENTUM),
    Key("wc", _NONNEGATIVE, default=0.0, per_input=True),
    Key("updatePeriod", Int(lo=0), default=0),
    # How the layer's replicas stay together: None follows the run's --sync
    # (convnet.runtime.step.tasks.local_periods).
    Key("sync", SyncMode(), default=None),
)
#: cuda-convnet2 rescaled each conv filter / fc output unit to norm wball after every
#: update (kernels.constraints.ball_projection, applied by the executor); its local
#: layers normalised every module's filters instead, which is not implemented.
_WBALL = Key("wball", _NONNEGATIVE, default=0.0, per_input=True)
_WBALL_LOCAL = Key("wball", Unsupported(Float(), 0.0, "wball on a local layer (normalising "
                                        "each module's filters)"), default=0.0, per_input=True)
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
    Key("filterChannels", _POSITIVE, default=None, per_input=True),
    # cuda-convnet v1: each filter group reads a random subset of the channels
    Key("randSparse", Bool(), default=False, per_input=True),
    # beyond cuda-convnet2: fewer output windows than the ceiling rule (0: that rule's)
    Key("modulesX", Int(lo=0), default=0),
) + _INIT
_FILTER_HINTS = (
    Key("sumWidth", _POSITIVE, default=None),
    Key("partialSum", Int(lo=0), default=None),
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
# The dropout fork of cuda-convnet (dnouri/cuda-convnet): ``dropout=p`` in an fc
# or conv layer's params drops each output with probability p at train time (no
# scaling) and multiplies the outputs by 1 - p at test time, like dropout2.
_FORK_DROPOUT = Key("dropout", Float(lo=0, lt=1), default=0.0)
_DROPOUT_PARAMS = (
    Key("enable", Bool(), default=True),
    Key("keep", Float(gt=0, hi=1), default=0.5),
)


def _table(*types: LayerType) -> dict[str, LayerType]:
    return {t.name: t for t in types}


_FILTER_TYPE = dict(kind=Kind.WEIGHTED, shape=shape.filter_shape, size_key="filters",
                    max_inputs=None, aliases=_V1_FILTERS, finish=_grouped_filters)
_NORM_TYPE = dict(kind=Kind.PLAIN, implementation="convnet.layers.norms:NormLayer", attrs=_NORM_ATTRS,
                  params=_NORM_PARAMS, memory=memory.norm_memory)
_COST_TYPE = dict(kind=Kind.COST, neuron="forbidden", params=_COST_PARAMS)
_PAIR = dict(min_inputs=2, max_inputs=2)

LAYER_TYPES: dict[str, LayerType] = _table(
    # Data layers run wherever their readers run.
    LayerType("data", Kind.DATA, "convnet.layers.data:DataLayer", shape.data_shape, size_key="dataIdx",
              memory=memory.data_memory,
              min_inputs=0, max_inputs=0, neuron="forbidden", takes_gpu=False,
              attrs=(Key("dataIdx", Int(lo=0)),)),
    LayerType("conv", implementation="convnet.layers.weights:ConvLayer", weights=weights.conv_weights,
              memory=memory.conv_memory,
              hints=_FILTER_HINTS, params=_WEIGHT_PARAMS + (_WBALL, _FORK_DROPOUT),
              attrs=_FILTER_ATTRS + (Key("sharedBiases", Bool(), default=True),),
              **_FILTER_TYPE),
    LayerType("local", implementation="convnet.layers.weights:LocalLayer", weights=weights.local_weights,
              memory=memory.local_memory,
              attrs=_FILTER_ATTRS, params=_WEIGHT_PARAMS + (_WBALL_LOCAL,),
              # Local layers always have one bias per output position.
              hints=_FILTER_HINTS + (Key("sharedBiases", Bool(), default=None),),
              **_FILTER_TYPE),
    LayerType("fc", Kind.WEIGHTED, "convnet.layers.weights:FCLayer", shape.fc_shape, size_key="outputs",
              weights=weights.fc_weights, max_inputs=None, memory=memory.fc_memory,
              params=_WEIGHT_PARAMS + (_WBALL, _FORK_DROPOUT),
              attrs=(Key("outputs", _POSITIVE),) + _INIT, aliases={"numOutputs": "outputs"}),
    LayerType("pool", Kind.PLAIN, "convnet.layers.pooling:PoolLayer", shape.pool_shape,
              size_key="outputsX", finish=_pool_stride, memory=memory.pool_memory, attrs=(
                  Key("pool", Choice("max", "avg", "maxabs")),
                  Key("sizeX", _POSITIVE),
                  Key("stride", _POSITIVE),
                  Key("start", Int(), default=0),
                  Key("outputsX", Int(lo=0), default=0),
                  Key("channels", _POSITIVE),
              )),
    LayerType("cmrnorm", shape=shape.norm_shape("channels"), hints=(
        Key("blocked", Unsupported(Bool(), False, "blocked cross-map normalisation"),
            default=False),), **_NORM_TYPE),
    LayerType("rnorm", shape=shape.norm_shape("pixels across"), aliases={"sizeX": "size"},
              **_NORM_TYPE),
    LayerType("cnorm", shape=shape.norm_shape("pixels across"), aliases={"sizeX": "size"},
              **_NORM_TYPE),
    # Batch normalisation (beyond cuda-convnet2): the scale W0 and shift b learn with the
    # weight layers' keys; the running averages (mean, var) are updated by training.
    LayerType("bnorm", Kind.WEIGHTED, "convnet.layers.batch_norm:BatchNormLayer",
              shape.channels_shape, weights=weights.batch_norm_weights,
              memory=memory.batch_norm_memory, params=_WEIGHT_PARAMS,
              attrs=(Key("epsilon", Float(gt=0), default=1e-5),
                     Key("decay", Float(lo=0, hi=1), default=0.9),
                     Key("stats", Choice("global", "replica"), default="global")),
              # the mean and M2 (forward), or sum g and sum g xhat (backward), per channel
              statistics_size=lambda layer: (2 * layer.attrs["channels"]
                                             if layer.attrs["stats"] == "global" else 0)),
    LayerType("neuron", Kind.PLAIN, "convnet.layers.neurons:NeuronLayer", shape.same_shape,
              neuron="required", memory=memory.neuron_layer_memory),
    LayerType("softmax", Kind.PLAIN, "convnet.layers.softmax:SoftmaxLayer", shape.same_shape,
              memory=memory.softmax_memory),
    LayerType("dropout", Kind.PLAIN, "convnet.layers.dropout:DropoutLayer", shape.same_shape,
              params=_DROPOUT_PARAMS, memory=memory.dropout_memory),
    LayerType("dropout2", Kind.PLAIN, "convnet.layers.dropout:Dropout2Layer", shape.same_shape,
              params=_DROPOUT_PARAMS, memory=memory.dropout_memory),
    # pass is the model-parallel gather: the placement differs from concat, not the math.
    LayerType("pass", Kind.PLAIN, "convnet.layers.combine:ConcatLayer", shape.concat_shape,
              max_inputs=None, memory=memory.combine_memory),
    LayerType("concat", Kind.PLAIN, "convnet.layers.combine:ConcatLayer", shape.concat_shape,
              max_inputs=None, memory=memory.combine_memory),
    LayerType("eltsum", Kind.PLAIN, "convnet.layers.combine:EltSumLayer", shape.eltwise_shape,
              max_inputs=None, attrs=(
                  Key("coeffs", Float(), default=1.0, per_input=True, also_in_params=True),)),
    LayerType("eltmax", Kind.PLAIN, "convnet.layers.combine:EltMaxLayer", shape.eltwise_shape,
              min_inputs=2, max_inputs=None, memory=memory.eltmax_memory),
    LayerType("sum", Kind.PLAIN, "convnet.layers.combine:SumLayer", shape.sum_shape,
              attrs=(Key("stride", _POSITIVE, default=None),)),
    LayerType("cost.logreg", implementation="convnet.layers.costs:LogregCost", shape=shape.logreg_shape,
              **_PAIR, **_COST_TYPE),
    LayerType("cost.crossent", implementation="convnet.layers.costs:CrossEntCost",
              shape=shape.crossent_shape, **_PAIR, **_COST_TYPE),
    LayerType("cost.bce", implementation="convnet.layers.costs:BCECost", shape=shape.bce_shape,
              **_PAIR, kind=Kind.COST, neuron="forbidden",
              params=_COST_PARAMS + (Key("posWeight", _NONNEGATIVE, default=1.0),)),
    LayerType("cost.sum2", implementation="convnet.layers.costs:Sum2Cost", shape=shape.cost_shape,
              **_COST_TYPE),
)


#: Older spellings of ``type=`` values: cuda-convnet2's own example configs
#: wrote ``cost.ce`` before the type was named ``cost.crossent``.
TYPE_ALIASES: dict[str, str] = {"cost.ce": "cost.crossent"}


def layer_type(name: str) -> LayerType:
    """The descriptor of ``type=name`` (an alias is resolved); ValueError for a name
    no entry has."""
    try:
        return LAYER_TYPES[TYPE_ALIASES.get(name, name)]
    except KeyError:
        raise ValueError(f"unknown layer type {name!r}") from None
