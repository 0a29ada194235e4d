"""The interface every layer implementation follows.

A layer object holds a :class:`~convnet.config.model.LayerDef` and knows its
math; it holds no weights and no activations.  Weights are a plain dict of
arrays owned by the executor (one dict per replica), so the same layer object
serves every replica and every device: the array module is taken from the
arrays passed in (numpy on the CPU, CuPy on a GPU).

Gradients follow cuda-convnet2: cost layers return the gradient of
``coeff * sum over cases`` of their cost, and weight gradients are sums over
the cases of the shard; the optimiser divides by the number of cases.

Layers compute in the dtype of their inputs (float32 in training, float64 in
the gradient check); ``init_params`` returns float32.  The layer families in
this package derive from :class:`convnet.layers.core.ComputeLayer`, which applies the
inline ``neuron=`` inside ``forward``/``backward``.  Cost layers also have
``metrics(inputs, output) -> dict`` of sums over the shard (``cost``, and
``error``/``error_topk`` where the type defines them): see :mod:`convnet.layers.costs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from convnet.config.model import LayerDef


@dataclass(frozen=True)
class ShardStatistics:
    """What :meth:`Layer.shard_statistics` gives: ``values``, the flat array the plan
    combines with the other replicas', and ``carry``, what the layer's own call can reuse
    of the work that made them (it stays with the replica: bnorm's gradient through its
    neuron, which the backward call would otherwise compute again)."""

    values: Any
    carry: Any = None


@dataclass(frozen=True)
class ReducedStatistics:
    """Statistics of a layer that normalises over all its replicas' cases (bnorm's
    ``stats=global``), combined from every replica's by the plan's ``BatchStats``
    operation: ``combined`` over ``count`` values per channel, ``own``, what this
    replica's shard gave (its share of the weight gradients), and ``carry``, what its
    :class:`ShardStatistics` carried."""

    combined: Any
    count: int
    own: Any
    carry: Any = None


@dataclass(frozen=True)
class Context:
    """What a forward/backward call needs to know beyond its arrays.

    ``case_offset`` is the index, within the whole minibatch, of the shard's
    first case: dropout masks are a function of (seed, step, layer, case
    index), so they do not depend on how the minibatch was split.
    ``statistics``, for a layer whose statistics cover every replica's cases, are
    the statistics combined over them (None: the shard's own, as on one device).
    """

    train: bool = True
    seed: int = 0
    step: int = 0
    case_offset: int = 0
    statistics: ReducedStatistics | None = None


class Layer:
    """Base class: forward and backward of one layer type, neuron included.

    Subclasses override :meth:`init_params`, :meth:`forward` and
    :meth:`backward`; the descriptor of each layer type
    (:mod:`convnet.config.layer_types.table`) names the subclass that computes it.
    """

    def __init__(self, ldef: LayerDef):
        self.ldef = ldef

    @property
    def name(self) -> str:
        return self.ldef.name

    def init_params(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Fresh float32 host weights: ``W0``, ``W1``, ... per input, and ``b`` (and the
        connectivity tables ``C<i>`` of ``randSparse`` inputs)."""
        return {}

    def forward(self, inputs: list, params: dict, ctx: Context) -> tuple[Any, Any]:
        """Return ``(output, state)``; ``state`` is handed back to :meth:`backward`."""
        raise NotImplementedError

    def backward(self, grad_output, inputs: list, output, params: dict, state, ctx: Context,
                 need_input_grads: list[bool]) -> tuple[list, dict]:
        """Return ``(input_grads, param_grads)``.

        ``input_grads[i]`` is ``None`` where ``need_input_grads[i]`` is false.
        ``param_grads`` has the keys of ``params`` but the connectivity tables
        (``C<i>``, never learned).  Cost layers get
        ``grad_output=None``.
        """
        raise NotImplementedError

    def switches(self, inputs: list, output, state) -> list:
        """The discrete choices a forward call made, as arrays: which side of a
        relu or abs kink each value fell on, which input each max picked.

        The output is smooth in the inputs and weights while these stay the
        same; the gradient check compares them to tell a finite difference that
        crossed a kink from a wrong gradient.  Empty for smooth layers.
        """
        return []

    def shard_statistics(self, phase: str, inputs: list, params: dict, grad_output=None,
                         output=None, state=None):
        """A layer with global statistics (:attr:`LayerDef.statistics_size`): its shard's
        statistics before its ``phase`` ('forward', from the inputs; 'backward', from the
        gradient and the forward's output and state), a :class:`ShardStatistics`."""
        raise NotImplementedError(f"layer '{self.name}' has no batch statistics")

    def combine_statistics(self, phase: str, parts: list, counts: list[int]):
        """The statistics of the union of shards whose own are ``parts`` (in replica order)
        over ``counts`` values per channel; the same arithmetic on every replica."""
        raise NotImplementedError(f"layer '{self.name}' has no batch statistics")

    def statistics_count(self, cases: int) -> int:
        """How many values per channel the statistics of ``cases`` cases cover."""
        return cases

    def input_differentiable(self, i: int) -> bool:
        """Whether the output depends smoothly on input ``i`` (False for the class
        labels of ``cost.logreg``); the gradient check skips the others."""
        return True
