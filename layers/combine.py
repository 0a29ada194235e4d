"""Layers that combine inputs: ``pass``, ``concat``, ``eltsum``, ``eltmax``, ``sum``.

* ``pass`` / ``concat``: concatenation of the inputs' flattened outputs along
  features (for image inputs of equal size this is channel concatenation).
  ``pass`` is the model-parallel gather: the placement differs, not the math.
* ``eltsum``: ``sum_i coeffs[i] * x_i`` (``coeffs`` from attrs, else params,
  default 1).
* ``eltmax``: element-wise maximum (gradient to the first maximal input).
* ``sum``: channels summed in consecutive groups of ``stride`` (attrs; default
  all channels): output channel j is the sum of input channels
  ``j*stride .. (j+1)*stride-1``.  A flat input counts one channel per feature.
"""

from __future__ import annotations

import math

from convnet.kernels import array_module
from convnet.kernels import nn as knn

from .core import ComputeLayer, per_input


class ConcatLayer(ComputeLayer):

    def __init__(self, ldef):
        super().__init__(ldef)
        # a single input passes through untouched (a view, not a copy)
        self.fresh_output = len(ldef.inputs) > 1

    def _forward(self, inputs, params, ctx):
        n = inputs[0].shape[0]
        if len(inputs) == 1:
            return self.shape_output(inputs[0]), None
        xp = array_module(inputs[0])
        y = xp.concatenate([x.reshape(n, -1) for x in inputs], axis=1)
        return self.shape_output(y), None

    def _backward(self, grad, inputs, params, state, ctx, need):
        n = grad.shape[0]
        g = grad.reshape(n, -1)
        out, lo = [], 0
        for x, want in zip(inputs, need):
            width = math.prod(x.shape[1:])
            out.append(g[:, lo:lo + width].reshape(x.shape) if want else None)
            lo += width
        return out, {}


class EltSumLayer(ComputeLayer):

    def __init__(self, ldef):
        super().__init__(ldef)
        n = len(ldef.inputs)
        coeffs = ldef.attrs.get("coeffs", ldef.params.get("coeffs", 1.0))
        self.coeffs = [float(c) for c in per_input(coeffs, n)]

    def _forward(self, inputs, params, ctx):
        shape = inputs[0].shape
        # a coefficient of 1 multiplies nothing (a residual block's sum: one pass)
        terms = [x.reshape(shape) if c == 1.0 else c * x.reshape(shape)
                 for c, x in zip(self.coeffs, inputs)]
        if len(terms) == 1:
            return self.shape_output(terms[0] * 1.0), None  # a fresh array
        y = terms[0] + terms[1]
        for term in terms[2:]:
            y += term
        return self.shape_output(y), None

    def _backward(self, grad, inputs, params, state, ctx, need):
        # a coefficient of 1 hands the gradient on as it is (layers never write into the
        # gradients they get, and the executor sums them into fresh arrays)
        return [(grad if c == 1.0 else grad * c).reshape(x.shape) if want else None
                for c, x, want in zip(self.coeffs, inputs, need)], {}


class EltMaxLayer(ComputeLayer):

    def _forward(self, inputs, params, ctx):
        shape = inputs[0].shape
        y, idx = knn.eltmax_forward([x.reshape(shape) for x in inputs])
        return self.shape_output(y), idx

    def _switches(self, inputs, state):
        return [state]

    def _backward(self, grad, inputs, params, state, ctx, need):
        g = grad.reshape(state.shape)
        return [knn.eltmax_backward(g, state, i).reshape(x.shape) if want else None
                for i, (x, want) in enumerate(zip(inputs, need))], {}


class SumLayer(ComputeLayer):

    def __init__(self, ldef):
        super().__init__(ldef)
        self.in_shape = tuple(ldef.input_shapes[0]) if ldef.input_shapes else None
        self.stride = ldef.attrs.get("stride")

    def _grouped_shape(self, x):
        """(N, C // stride, stride, pixels) for input x."""
        shape = self.in_shape or tuple(x.shape[1:])
        channels = shape[0]
        pixels = math.prod(shape[1:]) if len(shape) > 1 else 1
        stride = int(self.stride or channels)
        if channels % stride:
            raise ValueError(f"layer '{self.name}': {channels} channels do not split into "
                             f"groups of {stride}")
        return (x.shape[0], channels // stride, stride, pixels), shape

    def _forward(self, inputs, params, ctx):
        x = inputs[0]
        grouped, shape = self._grouped_shape(x)
        y = x.reshape(grouped).sum(axis=2)
        y = y.reshape((x.shape[0], grouped[1]) + tuple(shape[1:]))
        return self.shape_output(y), None

    def _backward(self, grad, inputs, params, state, ctx, need):
        if not need[0]:
            return [None], {}
        x = inputs[0]
        grouped, _ = self._grouped_shape(x)
        xp = array_module(grad)
        g = grad.reshape(grouped[0], grouped[1], 1, grouped[3])
        return [xp.broadcast_to(g, grouped).reshape(x.shape).copy()], {}
