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
              imgSize:[int] (input side), modulesX:int (output side),
              filterChannels:[int] (= channels // groups)
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
``sum``       stride:int (channels summed in groups of ``stride``; default all;
              always an int after shape inference; a flat input's features count
              as channels)
``dropout``/``dropout2``: nothing extra (``keep``/``enable`` are params)
``cost.*``    nothing extra (``coeff``/``topk`` are params); output_shape is (1,), the
              per-case cost, and no layer may read a cost layer

``LayerDef.neuron`` is None or a NeuronSpec named ``ident``, ``logistic``, ``abs``,
``relu``, ``nrelu``, ``softrelu``, ``square``, ``sqrt``, ``log[a]``, ``tanh[a,b]``,
``abstanh[a,b]`` (cuda-convnet v1: a*|tanh(b*x)|), ``brelu[a]``, ``linear[a,b]``,
``drelu[a]``; args in bracket order.  Data and cost layers never have one.
``LayerDef.gpu`` is always None for data layers.

``LayerDef.params`` keys (from the layer-params file, typed, defaults applied)
----------------------------------------------------------------------------
A params key may also be written in the layer's layer-def section; the
layer-params file wins when both give it.
weight layers: epsW:[Schedule], epsB:Schedule, momW:[float], momB:float,
               wc:[float], wball:[float] (always 0: non-zero is rejected),
               updatePeriod:int (0 = every activation)
costs:         coeff:float (1), topk:int (1, at most the number of classes);
               cost.bce also posWeight:float (1), the weight of the positive term
dropout*:      enable:bool (True), keep:float (0.5)
norms:         scale:float, pow:float, minDiv:float (1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

WEIGHT_LAYER_TYPES = frozenset({"conv", "local", "fc"})
COST_LAYER_TYPES = frozenset({"cost.logreg", "cost.crossent", "cost.bce", "cost.sum2"})


@dataclass(frozen=True)
class NeuronSpec:
    """An activation function with its bracketed parameters, e.g. ``tanh[1.7,0.66]``."""

    name: str
    args: tuple[float, ...] = ()

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}[{','.join(f'{a:g}' for a in self.args)}]"


@dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule over training progress x in [0, 1] (SPEC section 4).

    kind is one of ``const``, ``linear``, ``exp``, ``dexp``.
    """

    kind: str
    base: float
    tgt_factor: float = 1.0
    num_steps: int = 1

    def value(self, progress: float) -> float:
        x = min(max(float(progress), 0.0), 1.0)
        if self.kind == "const":
            return self.base
        if self.kind == "linear":
            return self.base * (1.0 - x) + (self.base / self.tgt_factor) * x
        if self.kind == "exp":
            return self.base * (1.0 / self.tgt_factor) ** x
        if self.kind == "dexp":
            step = min(int(math.floor(x * self.num_steps)), self.num_steps - 1)
            if step == self.num_steps - 1:
                return self.base / self.tgt_factor
            # numSteps-1 evenly spaced samples of the exp schedule on [0, 1).
            return self.base * (1.0 / self.tgt_factor) ** (step / (self.num_steps - 1))
        raise ValueError(f"unknown schedule kind {self.kind!r}")

    def __str__(self) -> str:
        if self.kind == "const":
            return f"{self.base:g}"
        if self.kind == "dexp":
            return f"dexp[base={self.base:g};tgtFactor={self.tgt_factor:g};numSteps={self.num_steps}]"
        return f"{self.kind}[base={self.base:g};tgtFactor={self.tgt_factor:g}]"


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
    def has_weights(self) -> bool:
        return self.type in WEIGHT_LAYER_TYPES

    @property
    def is_cost(self) -> bool:
        return self.type in COST_LAYER_TYPES

    @property
    def is_data(self) -> bool:
        return self.type == "data"

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of this layer's weight arrays (``W0``, ``W1``, ... and ``b``).

        The one place that knows them: the layer library allocates from it
        and the planner counts parameters with it.  Needs shape inference.
        """
        if not self.has_weights:
            return {}
        a = self.attrs
        shapes: dict[str, tuple[int, ...]] = {}
        if self.type == "fc":
            for i, shape in enumerate(self.input_shapes):
                shapes[f"W{i}"] = (int(math.prod(shape)), a["outputs"])
            shapes["b"] = (a["outputs"],)
            return shapes
        filters, modules = a["filters"], a["modulesX"]
        for i in range(len(self.inputs)):
            fs, fch = a["filterSize"][i], a["filterChannels"][i]
            if self.type == "conv":
                shapes[f"W{i}"] = (filters, fch, fs, fs)
            else:
                shapes[f"W{i}"] = (modules * modules, filters, fch, fs, fs)
        shared = self.type == "conv" and a.get("sharedBiases", True)
        shapes["b"] = (filters,) if shared else (filters, modules, modules)
        return shapes

    @property
    def param_count(self) -> int:
        return sum(int(math.prod(s)) for s in self.param_shapes().values())

    @property
    def outputs(self) -> int:
        """Number of features per case (cuda-convnet2's ``outputs``)."""
        return int(math.prod(self.output_shape)) if self.output_shape else 0


@dataclass
class NetConfig:
    """The parsed net: layers in file order (a topological order) plus data dims."""

    layers: dict[str, LayerDef]
    data_dims: dict[int, tuple[int, ...]]
    num_classes: int
    layer_def_file: str | None = None
    layer_params_file: str | None = None

    def consumers(self, name: str) -> list[str]:
        """Names of the layers reading ``name``, in file order."""
        return [l.name for l in self.layers.values() if name in l.inputs]

    def __getitem__(self, name: str) -> LayerDef:
        return self.layers[name]

    def __iter__(self):
        return iter(self.layers.values())
