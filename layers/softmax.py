"""``softmax`` over the features of each case."""

from __future__ import annotations

from convnet.kernels import nn as knn

from .core import ComputeLayer


class SoftmaxLayer(ComputeLayer):
    keeps_output = True

    def _forward(self, inputs, params, ctx):
        x = inputs[0]
        y = knn.softmax_forward(x.reshape(x.shape[0], -1))
        return self.shape_output(y), y

    def _backward(self, grad, inputs, params, state, ctx, need):
        if not need[0]:
            return [None], {}
        y = state
        dx = knn.softmax_backward(grad.reshape(y.shape), y)
        return [dx.reshape(inputs[0].shape)], {}
