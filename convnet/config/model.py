"""The typed layer graph that the config parser produces.

This module is the contract between the parser (which fills it in), the
planner (which places it on devices) and the layer library (which computes
with it).  Nothing here reads files.

Shapes
------
Activations are float32 arrays with the case index first.  Image layers have a
per-case shape ``(channels, size, size)``; flat layers ``(features,)``.  An fc
layer reading an image flattens it in (channel, row, column) order, which is
cuda-convnet2's order too.  The label column of a data layer is ``(1,)``.

``LayerDef.attrs`` keys, by layer type (after parsing and shape inference)
-------------------------------------------------------------------------
Every per-input key is a list with one entry per input.  Names follow the
config language (camelCase) so that an error about a key can quote it.

``data``      dataIdx:int
``conv``/``local``
              filters:int (the total, filters x groups: the file's ``filters``
              counts per group, as in cuda-convnet2), filterSize:[int],
              padding:[int], stride:[int],
              channels:[int], groups:[int], sharedBiases:bool (conv only),
              initW:[float], initB:float,
              imgSize:[int] (input side), modulesX:int (output side; a file may
              give fewer windows than the ceiling rule's),
              filterChannels:[int] (= channels // groups; a file may give it,
              cuda-convnet v1 did, only with that value)
              Weights of input i have shape
              conv:  (filters, filterChannels[i], filterSize[i], filterSize[i])
              local: (modulesX*modulesX, filters, filterChannels[i], fs, fs)
              Biases: conv with sharedBiases (filters,), else (filters, modulesX, modulesX).
``fc``        outputs:int, initW:[float], initB:float; weights of input i have
              shape (features of input i, outputs), biases (outputs,)
``pool``      pool:'max'|'avg'|'maxabs', sizeX:int, stride:int (<= sizeX),
              start:int (may be negative: windows hang over the top/left edge),
              outputsX:int (computed when the file says 0), channels:int, imgSize:int
``cmrnorm``/``rnorm``/``cnorm``
              size:int, channels:int, imgSize:int
``neuron``    (the function is ``LayerDef.neuron``)
``softmax``, ``pass``, ``concat``, ``eltmax``: nothing extra
``eltsum``    coeffs:[float] (one per input, default 1; may also be in the params file)
``bnorm``     epsilon:float (1e-5), decay:float (0.9, the running averages' factor),
              stats:'global'|'replica', channels:int (derived: the input's channels, or a
              flat input's features); weights W0 (scale) and b (shift), and the running
              averages mean and var, all (channels,)
``sum``       stride:int (channels summed in groups of ``stride``; default all;
              always an int after shape inference; a flat input's features count
              as channels)
``dropout``/``dropout2``: nothing extra (``keep``/``enable`` are params)
``cost.*``    nothing extra (``coeff``/``topk`` are params); output_shape is (1,), the
              per-case cost, and no layer may read a cost layer

``LayerDef.neuron`` is None or a NeuronSpec naming an entry of
:data:`convnet.kernels.neurons.NEURONS` (listed in docs/CONFIG.md), with its bracket args
in order.  Data and cost layers never have one.
``LayerDef.gpu`` is always None for data layers.

``LayerDef.params`` keys (from the layer-params file, typed, defaults applied)
----------------------------------------------------------------------------
A params key may also be written in the layer's layer-def section; the
layer-params file wins when both give it.
weight layers: epsW:[Schedule], epsB:Schedule, momW:[float], momB:float,
               wc:[float], wball:[float] (always 0: non-zero is rejected),
               updatePeriod:int (0 = every activation),
               sync:str|None ('sync' or 'local:K'; None: the run's --sync)
fc, conv:      also dropout:float (0; the dropout fork's train-time drop probability)
costs:         coeff:float (1), topk:int (1, at most the number of classes);
               cost.bce also posWeight:float (1), the weight of the positive term
dropout*:      enable:bool (True), keep:float (0.5)
norms:         scale:float, pow:float, minDiv:float (1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from convnet.config.layer_types import table as layertypes
from convnet.config.layer_types.table import Kind, LayerType
from convnet.config.layer_types.weight_shapes import is_learned_key
from convnet.config.values.neurons import NeuronSpec


@dataclass
class LayerDef:
    """One layer of the net as written in the two config files, fully typed.

    ``gpu`` is the list as written (``None`` when absent); the planner decides
    the effective device list.  ``input_shapes``/``output_shape`` are per-case
    shapes filled in by shape inference.
    """

    name: str
    type: str
    inputs: tuple[str, ...] = ()
    gpu: tuple[int, ...] | None = None
    neuron: NeuronSpec | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    input_shapes: tuple[tuple[int, ...], ...] = ()
    output_shape: tuple[int, ...] = ()
    file: str | None = None
    params_file: str | None = None

    @property
    def layer_type(self) -> LayerType:
        """The descriptor of this layer's ``type`` (:mod:`convnet.config.layer_types.table`)."""
        return layertypes.layer_type(self.type)

    @property
    def has_weights(self) -> bool:
        return self.layer_type.kind is Kind.WEIGHTED

    @property
    def learns(self) -> bool:
        """Whether training changes any of its weights: a weight layer whose ``epsW`` and
        ``epsB`` are not all 0 (a schedule whose base is 0 is 0 throughout).  A layer that
        does not learn is *frozen*: no update, no weight gradients, and no backward pass
        at all where nothing below it learns either."""
        if not self.has_weights:
            return False
        rates = list(self.params.get("epsW") or ()) + [self.params.get("epsB")]
        return any(rate is None or rate.base > 0 for rate in rates)

    @property
    def is_cost(self) -> bool:
        return self.layer_type.kind is Kind.COST

    @property
    def is_data(self) -> bool:
        return self.layer_type.kind is Kind.DATA

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of this layer's weight arrays (``W0``, ``W1``, ... and ``b``); needs
        shape inference.  The layer library allocates from it and the planner counts
        parameters with it."""
        rule = self.layer_type.weights
        return {} if rule is None else rule(self)

    @property
    def statistics_size(self) -> int:
        """The values of one replica's statistics when the layer normalises over the cases
        of all its replicas (bnorm's ``stats=global``), else 0
        (:attr:`LayerType.statistics_size`)."""
        rule = self.layer_type.statistics_size
        return 0 if rule is None else int(rule(self))

    @property
    def param_count(self) -> int:
        return sum(int(math.prod(s)) for s in self.param_shapes().values())

    @property
    def learned_count(self) -> int:
        """The values of the arrays that learn (what an all-reduce of gradients sums):
        the parameters without connectivity tables and running averages."""
        return sum(int(math.prod(s)) for k, s in self.param_shapes().items()
                   if is_learned_key(k))

    @property
    def outputs(self) -> int:
        """Number of features per case (cuda-convnet2's ``outputs``)."""
        return int(math.prod(self.output_shape)) if self.output_shape else 0


@dataclass
class NetConfig:
    """The parsed net: layers in file order (a topological order) plus data dims.

    The graph is fixed once the net is made: parsing names every layer's inputs,
    shape inference only fills in shapes, and a changed net is a new one
    (``dataclasses.replace``), so the index of readers is built once, on first use."""

    layers: dict[str, LayerDef]
    data_dims: dict[int, tuple[int, ...]]
    num_classes: int
    layer_def_file: str | None = None
    layer_params_file: str | None = None
    _readers: dict[str, list[str]] | None = field(default=None, init=False, repr=False,
                                                  compare=False)

    def consumers(self, name: str) -> list[str]:
        """Names of the layers reading ``name``, in file order (each once).  Planning asks
        this of every layer: one pass over the net answers all of them, where a scan per
        question made planning quadratic in the layer count."""
        if self._readers is None:
            self._readers = self._index_readers()
        return list(self._readers.get(name, ()))

    def _index_readers(self) -> dict[str, list[str]]:
        readers: dict[str, list[str]] = {}
        for ldef in self.layers.values():
            for inp in dict.fromkeys(ldef.inputs):
                readers.setdefault(inp, []).append(ldef.name)
        return readers

    def __getitem__(self, name: str) -> LayerDef:
        return self.layers[name]

    def __iter__(self):
        return iter(self.layers.values())


def on_one_device(net: NetConfig) -> NetConfig:
    """``net`` unsplit: every layer with a placement on logical device 0 (the first of
    a one-device ``--gpu`` list) and every ``updatePeriod`` at its default, which one
    device needs.  What one replica of a data-parallel net trains, and what a profile
    of the whole net on one device runs."""
    layers = {name: ldef if ldef.is_data and ldef.gpu is None else
              replace(ldef, gpu=(0,),
                      params={k: v for k, v in ldef.params.items() if k != "updatePeriod"})
              for name, ldef in net.layers.items()}
    return replace(net, layers=layers)


def all_synchronous(net: NetConfig) -> NetConfig:
    """``net`` without the layers' ``sync=`` keys: every replicated layer all-reduces its
    gradients every step, as under ``--sync sync`` alone.  What ``--simulate`` profiles
    (it predicts synchronous steps)."""
    layers = {name: replace(ldef, params={**ldef.params, "sync": None})
              if ldef.params.get("sync") is not None else ldef
              for name, ldef in net.layers.items()}
    return replace(net, layers=layers)
