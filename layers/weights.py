"""Weight layers: ``conv`` (shared weights), ``local`` (unshared) and ``fc``.

Each input has its own weights ``W<i>`` and the results are summed; one bias
``b``.  Conv/local inputs are split into ``groups`` channel groups and the
filters likewise (filter block g sees channel block g); ``attrs['filters']``
is the total number of filters of the layer (the first axis of ``W<i>``).
Initial weights are N(0, initW[i]^2), biases ``initB``, all float32.  An input
with cuda-convnet v1's ``randSparse`` has a connectivity table ``C<i>`` instead
of channel blocks: its filter groups read the channels the table names
(gathered, :mod:`convnet.kernels.conv.sparse_channels`), drawn by
:mod:`convnet.layers.connectivity` with the weights and never trained.
"""

from __future__ import annotations

import math

import numpy as np

from convnet.config.layer_types.weight_shapes import connection_key, kernel_channels
from convnet.kernels import conv as kconv
from convnet.kernels import nn as knn
from convnet.kernels.conv.sparse_channels import gather_channels, scatter_channels

from .connectivity import draw_tables
from .core import ComputeLayer, per_input
from .dropout import keep_mask


class _DropsOutputs:
    """The ``dropout`` param of the dropout fork of cuda-convnet (fc and conv layers).

    Each output (before the neuron) is dropped with that probability at train
    time, without scaling, and the outputs are multiplied by 1 - dropout at test
    time.  The mask is :func:`~convnet.layers.dropout.keep_mask`'s, so it does not
    depend on the shard split.
    """

    def __init__(self, ldef):
        super().__init__(ldef)
        self.keep = 1.0 - float(ldef.params.get("dropout", 0.0))

    def _drop(self, z, ctx):
        """``z`` (in place) and the train-time mask (None when nothing is drawn)."""
        if self.keep == 1.0:
            return z, None
        if not ctx.train:
            z *= self.keep
            return z, None
        mask = keep_mask(z, self.keep, self.name, ctx)
        z *= mask
        return z, mask

    def _undrop(self, grad, mask):
        """The gradient before the drop, from the gradient after it."""
        if self.keep == 1.0:
            return grad
        return grad * (self.keep if mask is None else mask.reshape(grad.shape))


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

    @property
    def learns(self) -> bool:
        """A frozen layer (all rates 0) needs no weight gradients: the kernels skip them."""
        return self.ldef.learns

    def _param_grads(self, dws, db, params) -> dict:
        """``W<i>`` and ``b`` gradients; none for a frozen layer."""
        if not self.learns:
            return {}
        grads = {f"W{i}": dw for i, dw in enumerate(dws)}
        grads["b"] = db.reshape(params["b"].shape)
        return grads


class _ConvLike(_WeightLayer):
    """Geometry shared by conv and local, and ``randSparse``'s gather and scatter: the
    kernels see each sparse input as the image of the channels its groups read."""

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
        sparse = per_input(a.get("randSparse", False), n)
        self.sparse = [i for i, random in enumerate(sparse) if random]
        self.kernel_channels = kernel_channels(
            {"channels": self.channels, "groups": self.groups, "randSparse": sparse,
             "filterChannels": per_input(a.get("filterChannels"), n)})

    def init_params(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        params = super().init_params(rng)
        params.update({connection_key(i): table
                       for i, table in draw_tables(self.ldef.attrs, rng).items()})
        return params

    def _geom(self):
        return dict(filter_sizes=self.filter_sizes, paddings=self.paddings, strides=self.strides,
                    channels=self.kernel_channels, groups=self.groups, img_sizes=self.img_sizes,
                    modules=self.modules)

    def _kernel_inputs(self, inputs, params):
        """The inputs as the kernels read them: each sparse one's gathered channels."""
        if not self.sparse:
            return inputs
        return [gather_channels(x, params[connection_key(i)], self.channels[i])
                if i in self.sparse else x for i, x in enumerate(inputs)]

    def _input_grads(self, dxs, inputs, params):
        """The gradients of the layer's inputs from those of the kernels' inputs."""
        if not self.sparse:
            return dxs
        return [scatter_channels(dx, params[connection_key(i)], self.channels[i], x.shape)
                if i in self.sparse and dx is not None else dx
                for i, (dx, x) in enumerate(zip(dxs, inputs))]


class ConvLayer(_DropsOutputs, _ConvLike):
    """Shared-weight convolution (cuda-convnet2 ``conv``); its state is the kernel's
    cache and the dropout mask."""

    def __init__(self, ldef):
        super().__init__(ldef)
        self.shared_biases = bool(self.attr("sharedBiases", True))

    def _forward(self, inputs, params, ctx):
        y, cache = kconv.conv_forward(self._kernel_inputs(inputs, params), self._weights(params),
                                      params["b"], keep_cache=ctx.train, **self._geom())
        y, mask = self._drop(y, ctx)
        return y, (cache, mask)

    def _backward(self, grad, inputs, params, state, ctx, need):
        cache, mask = state
        grad = self._undrop(grad, mask)
        ws = self._weights(params)
        dxs, dws, db = kconv.conv_backward(grad, self._kernel_inputs(inputs, params), ws, cache,
                                           need, shared_biases=params["b"].ndim == 1,
                                           need_dw=self.learns, **self._geom())
        return self._input_grads(dxs, inputs, params), self._param_grads(dws, db, params)


class LocalLayer(_ConvLike):
    """Locally-connected convolution: every output position has its own filters."""


    def _forward(self, inputs, params, ctx):
        y, cache = kconv.local_forward(self._kernel_inputs(inputs, params), self._weights(params),
                                       params["b"], keep_cache=ctx.train, **self._geom())
        return y, cache

    def _backward(self, grad, inputs, params, state, ctx, need):
        dxs, dws, db = kconv.local_backward(grad, self._kernel_inputs(inputs, params),
                                            self._weights(params), state, need,
                                            need_dw=self.learns, **self._geom())
        return self._input_grads(dxs, inputs, params), self._param_grads(dws, db, params)


class FCLayer(_DropsOutputs, _WeightLayer):
    """Fully connected; image inputs are flattened in (channel, row, column) order."""

    def _forward(self, inputs, params, ctx):
        z = knn.fc_forward(inputs, self._weights(params), params["b"])
        return self._drop(z, ctx)

    def _backward(self, grad, inputs, params, state, ctx, need):
        grad = self._undrop(grad.reshape(grad.shape[0], -1), state)
        dxs, dws, db = knn.fc_backward(grad, inputs, self._weights(params), need,
                                       need_dw=self.learns)
        return dxs, self._param_grads(dws, db, params)
