"""Weight layers: ``conv`` (shared weights), ``local`` (unshared) and ``fc``.

Each input has its own weights ``W<i>`` and the results are summed; one bias
``b``.  Conv/local inputs are split into ``groups`` channel groups and the
filters likewise (filter block g sees channel block g); ``attrs['filters']``
is the total number of filters of the layer (the first axis of ``W<i>``).
Initial weights are N(0, initW[i]^2), biases ``initB``, all float32.
"""

from __future__ import annotations

import math

import numpy as np

from convnet.kernels import conv as kconv
from convnet.kernels import nn as knn

from .core import ComputeLayer, per_input
from .dropout import keep_mask


class _WeightLayer(ComputeLayer):
    def init_params(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        shapes = self.ldef.param_shapes()
        n = len(self.ldef.inputs)
        init_w = per_input(self.attr("initW", 0.01), n)
        init_b = float(self.attr("initB", 0.0) or 0.0)
        out = {}
        for i in range(n):
            w = rng.standard_normal(shapes[f"W{i}"], dtype=np.float32)
            w *= np.float32(init_w[i])
            out[f"W{i}"] = w
        out["b"] = np.full(shapes["b"], init_b, dtype=np.float32)
        return out

    def _weights(self, params):
        return [params[f"W{i}"] for i in range(len(self.ldef.inputs))]


class _ConvLike(_WeightLayer):
    """Geometry shared by conv and local."""

    def __init__(self, ldef):
        super().__init__(ldef)
        n = len(ldef.inputs)
        a = ldef.attrs
        self.filter_sizes = per_input(a["filterSize"], n)
        self.paddings = per_input(a.get("padding", 0), n)
        self.strides = per_input(a.get("stride", 1), n)
        self.channels = per_input(a["channels"], n)
        self.groups = per_input(a.get("groups", 1), n)
        img = a.get("imgSize")
        if img is None:
            img = []
            for i in range(n):
                shape = ldef.input_shapes[i]
                img.append(shape[-1] if len(shape) == 3 else
                           int(round(math.sqrt(math.prod(shape) / self.channels[i]))))
        self.img_sizes = per_input(img, n)
        self.modules = int(a.get("modulesX") or kconv.out_size(
            self.img_sizes[0], self.filter_sizes[0], self.paddings[0], self.strides[0]))
        self.filters = int(a["filters"])

    def _geom(self):
        return dict(filter_sizes=self.filter_sizes, paddings=self.paddings, strides=self.strides,
                    channels=self.channels, groups=self.groups, img_sizes=self.img_sizes,
                    modules=self.modules)


class ConvLayer(_ConvLike):
    """Shared-weight convolution (cuda-convnet2 ``conv``)."""


    def __init__(self, ldef):
        super().__init__(ldef)
        self.shared_biases = bool(self.attr("sharedBiases", True))

    def _forward(self, inputs, params, ctx):
        y, cache = kconv.conv_forward(inputs, self._weights(params), params["b"],
                                      keep_cache=ctx.train, **self._geom())
        return y, cache

    def _backward(self, grad, inputs, params, state, ctx, need):
        ws = self._weights(params)
        dxs, dws, db = kconv.conv_backward(grad, inputs, ws, state, need,
                                           shared_biases=params["b"].ndim == 1, **self._geom())
        grads = {f"W{i}": dw for i, dw in enumerate(dws)}
        grads["b"] = db.reshape(params["b"].shape)
        return dxs, grads


class LocalLayer(_ConvLike):
    """Locally-connected convolution: every output position has its own filters."""


    def _forward(self, inputs, params, ctx):
        y, cache = kconv.local_forward(inputs, self._weights(params), params["b"],
                                       keep_cache=ctx.train, **self._geom())
        return y, cache

    def _backward(self, grad, inputs, params, state, ctx, need):
        dxs, dws, db = kconv.local_backward(grad, inputs, self._weights(params), state, need,
                                            **self._geom())
        grads = {f"W{i}": dw for i, dw in enumerate(dws)}
        grads["b"] = db.reshape(params["b"].shape)
        return dxs, grads


class FCLayer(_WeightLayer):
    """Fully connected; image inputs are flattened in (channel, row, column) order.

    The ``dropout`` param (the dropout fork of cuda-convnet) drops each output
    with that probability at train time, before the neuron, without scaling,
    and multiplies the outputs by 1 - dropout at test time.
    """

    def __init__(self, ldef):
        super().__init__(ldef)
        self.keep = 1.0 - float(ldef.params.get("dropout", 0.0))

    def _forward(self, inputs, params, ctx):
        z = knn.fc_forward(inputs, self._weights(params), params["b"])
        if self.keep == 1.0:
            return z, None
        if not ctx.train:
            z *= self.keep
            return z, None
        mask = keep_mask(z, self.keep, self.name, ctx)
        z *= mask
        return z, mask

    def _backward(self, grad, inputs, params, state, ctx, need):
        grad = grad.reshape(grad.shape[0], -1)
        if self.keep != 1.0:
            grad = grad * (self.keep if state is None else state)
        dxs, dws, db = knn.fc_backward(grad, inputs, self._weights(params), need)
        grads = {f"W{i}": dw for i, dw in enumerate(dws)}
        grads["b"] = db
        return dxs, grads
