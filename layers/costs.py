"""Cost layers: ``cost.logreg``, ``cost.crossent``, ``cost.bce``, ``cost.sum2``.

Contract shared with the executor:

* ``forward`` returns a (N,) array of per-case costs (``coeff`` not applied).
* ``metrics(inputs, output)`` returns sums over the shard: ``cost`` (sum of
  the per-case costs) and, per type, ``error`` (logreg: top-1 wrong count;
  crossent: cases whose arg-max differs from the labels'; bce: sum over cases
  of the fraction of outputs on the wrong side of 0.5) and ``error_topk``
  (logreg: cases whose label is not among the ``topk`` most probable).
  Divide by the number of cases for means.
* ``backward`` gets ``grad_output=None`` and returns the gradient of
  ``coeff * sum over cases of the cost``.

Cost layers take no inline neuron (cuda-convnet2 drops it too).
"""

from __future__ import annotations

from convnet.errors import DataError
from convnet.kernels import array_module
from convnet.kernels import nn as knn

from .core import ComputeLayer


class _CostLayer(ComputeLayer):
    allows_neuron = False

    @property
    def coeff(self) -> float:
        return float(self.ldef.params.get("coeff", 1.0))

    def metrics(self, inputs: list, output) -> dict:
        return {"cost": output.sum()}

    def _labels_pair(self, inputs):
        return inputs[0], inputs[1]


class LogregCost(_CostLayer):
    """Inputs (labels (N, 1) class indices as floats, probs (N, K)).

    Each head checks only that its own labels fit its own probabilities (as
    the original did): a net may have heads of different widths reading
    different label columns.
    """

    #: Set by the executor where it checks the labels on the host before a step
    #: (:mod:`convnet.runtime.step.batch_check`): the check here reads a device value.
    labels_checked = False

    def input_differentiable(self, i: int) -> bool:
        return i != 0

    @property
    def topk(self) -> int:
        return int(self.ldef.params.get("topk", 1))

    def _forward(self, inputs, params, ctx):
        labels, probs = inputs
        probs = probs.reshape(probs.shape[0], -1)
        if not self.labels_checked:
            self._check_labels(labels, probs.shape[1])
        cost, _, _ = knn.logreg_cost(labels, probs, self.topk)
        return cost, None

    def _check_labels(self, labels, classes: int) -> None:
        if labels.size and not bool(((labels >= 0) & (labels < classes)).all()):
            bad = float(labels[(labels < 0) | (labels >= classes)].reshape(-1)[0])
            raise DataError(f"layer '{self.name}': label {bad:g} (from '{self.ldef.inputs[0]}') "
                            f"is not a class index of its {classes}-way input "
                            f"'{self.ldef.inputs[1]}'")

    def metrics(self, inputs, output):
        labels, probs = inputs
        cost, err1, errk = knn.logreg_cost(labels, probs.reshape(probs.shape[0], -1), self.topk)
        return {"cost": cost.sum(), "error": err1.sum(), "error_topk": errk.sum()}

    def _backward(self, grad, inputs, params, state, ctx, need):
        labels, probs = inputs
        gl = None
        if need[0]:
            gl = array_module(labels).zeros_like(labels)
        gp = None
        if need[1]:
            gp = knn.logreg_grad(labels, probs.reshape(probs.shape[0], -1), self.coeff)
            gp = gp.reshape(probs.shape)
        return [gl, gp], {}


class CrossEntCost(_CostLayer):
    """Inputs (dense labels (N, K), probs (N, K)); cost ``-sum labels * log probs``."""


    def _forward(self, inputs, params, ctx):
        cost, _ = knn.crossent_cost(*inputs)
        return cost, None

    def metrics(self, inputs, output):
        cost, err = knn.crossent_cost(*inputs)
        return {"cost": cost.sum(), "error": err.sum()}

    def _backward(self, grad, inputs, params, state, ctx, need):
        gl, gp = knn.crossent_grad(inputs[0], inputs[1], self.coeff, need_labels=need[0])
        return [gl, gp if need[1] else None], {}


class BCECost(_CostLayer):
    """Binomial cross-entropy between targets in [0, 1] and probabilities;
    optional ``posWeight`` param weighs the positive term (default 1)."""


    @property
    def pos_weight(self) -> float:
        return float(self.ldef.params.get("posWeight", 1.0))

    def _forward(self, inputs, params, ctx):
        cost, _ = knn.bce_cost(inputs[0], inputs[1], self.pos_weight)
        return cost, None

    def metrics(self, inputs, output):
        cost, err = knn.bce_cost(inputs[0], inputs[1], self.pos_weight)
        return {"cost": cost.sum(), "error": err.sum()}

    def _backward(self, grad, inputs, params, state, ctx, need):
        gl, gp = knn.bce_grad(inputs[0], inputs[1], self.coeff, self.pos_weight,
                              need_labels=need[0])
        return [gl, gp if need[1] else None], {}


class Sum2Cost(_CostLayer):
    """Sum of squares of its single input; gradient ``2 * coeff * x``."""


    def _forward(self, inputs, params, ctx):
        return knn.sum2_cost(inputs[0]), None

    def _backward(self, grad, inputs, params, state, ctx, need):
        if not need[0]:
            return [None], {}
        return [(2.0 * self.coeff) * inputs[0]], {}
