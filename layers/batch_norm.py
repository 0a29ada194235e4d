"""Batch normalisation, ``bnorm`` (beyond cuda-convnet2; :mod:`convnet.kernels.batch_norm`).

Per channel of the input (an image's channels, or a flat input's features), in
training ``y = W0 (x - mean) / sqrt(var + epsilon) + b`` with the mean and biased
variance of the minibatch's values of that channel (over cases and pixels); in
testing with the running averages ``mean`` and ``var``, which every training forward
call moves: ``r = decay r + (1 - decay) batch``, where the batch variance is the
unbiased one (m / (m - 1) times the biased, as PyTorch, Caffe and cuDNN keep it).

Arrays (all ``(channels,)``): ``W0`` the scale (starts at 1) and ``b`` the shift
(starts at 0), which learn with the layer-params keys of weight layers, and ``mean``
(starts at 0) and ``var`` (starts at 1), which never get a gradient.

With ``stats=global`` and several replicas, the plan combines the replicas' statistics
before each forward and backward call (``BatchStats`` operations): the executor calls
:meth:`BatchNormLayer.shard_statistics` on every replica, then
:meth:`BatchNormLayer.combine_statistics` on every replica in replica order, and passes
the result in the call's :class:`~convnet.layers.base.Context`.  Without it (one replica,
``stats=replica``, the gradient check) a call uses its own shard's statistics.
"""

from __future__ import annotations

import numpy as np

from convnet.kernels import batch_norm as kbn

from .base import ShardStatistics
from .core import ComputeLayer

FORWARD, BACKWARD = "forward", "backward"


class BatchNormLayer(ComputeLayer):
    """``bnorm``: its state from forward to backward is (mean, 1/std, values per channel),
    the statistics in float64 (:mod:`convnet.kernels.batch_norm`)."""

    def __init__(self, ldef):
        super().__init__(ldef)
        self.channels = int(ldef.attrs["channels"])
        self.epsilon = float(ldef.attrs.get("epsilon", 1e-5))
        self.decay = float(ldef.attrs.get("decay", 0.9))

    def init_params(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        c = self.channels
        return {"W0": np.ones(c, np.float32), "b": np.zeros(c, np.float32),
                "mean": np.zeros(c, np.float32), "var": np.ones(c, np.float32)}

    def _view(self, x):
        """x as (cases, channels, pixels)."""
        return x.reshape(x.shape[0], self.channels, -1)

    # -- the statistics the plan combines over the replicas ----------------------
    def shard_statistics(self, phase, inputs, params, grad_output=None, output=None,
                         state=None):
        x = self._view(inputs[0])
        if phase == FORWARD:
            return ShardStatistics(kbn.batch_moments(x))
        grad, own_state = self.through_neuron(grad_output, output, state)
        mean, invstd, _ = own_state
        return ShardStatistics(kbn.batch_norm_grad_sums(self._view(grad), x, mean, invstd),
                               carry=(grad, own_state))

    def combine_statistics(self, phase, parts, counts):
        combine = kbn.combine_moments if phase == FORWARD else kbn.combine_sums
        return combine(parts, counts)

    def statistics_count(self, cases: int) -> int:
        pixels = int(np.prod(self.ldef.input_shapes[0])) // self.channels
        return cases * pixels

    # -- forward and backward ------------------------------------------------------
    def _forward(self, inputs, params, ctx):
        x = self._view(inputs[0])
        c = self.channels
        if ctx.train:
            if ctx.statistics is not None:
                moments, count = ctx.statistics.combined, ctx.statistics.count
            else:
                moments, count = kbn.batch_moments(x), kbn.moments_count(x)
            mean, var = moments[:c], moments[c:] / count
            self._update_running(params, mean, var, count)
        else:
            mean, var, count = params["mean"], params["var"], 0
        invstd = kbn.inverse_std(var, self.epsilon)
        y = kbn.batch_norm_forward(x, mean, invstd, params["W0"], params["b"])
        return y.reshape(inputs[0].shape), (mean, invstd, count)

    def _update_running(self, params, mean, var, count: int) -> None:
        """Move the running averages (in place: every replica's own arrays) towards the
        batch's mean and unbiased variance.  The gradient check's weights have none."""
        if "mean" not in params:
            return
        unbiased = var * (count / (count - 1)) if count > 1 else var
        for key, batch in (("mean", mean), ("var", unbiased)):
            running = params[key]
            running *= self.decay
            running += ((1.0 - self.decay) * batch).astype(running.dtype, copy=False)

    def backward(self, grad_output, inputs, output, params, state, ctx, need_input_grads):
        """As any layer's, from the gradient through the neuron that the shard's
        statistics carry where the plan combined them (computed once a step)."""
        carried = ctx.statistics.carry if ctx.statistics is not None else None
        if carried is None:
            return super().backward(grad_output, inputs, output, params, state, ctx,
                                    need_input_grads)
        grad_z, own_state = carried
        return self._backward(grad_z, inputs, params, own_state, ctx, need_input_grads)

    def _backward(self, grad, inputs, params, state, ctx, need):
        mean, invstd, count = state
        x, g = self._view(inputs[0]), self._view(grad)
        c = self.channels
        if ctx.statistics is not None:
            own, combined, count = ctx.statistics.own, ctx.statistics.combined, \
                ctx.statistics.count
        else:
            own = combined = kbn.batch_norm_grad_sums(g, x, mean, invstd)
        if not ctx.train:  # the running averages do not depend on x
            combined, count = combined * 0, 1
        grads = {"W0": own[c:].astype(x.dtype), "b": own[:c].astype(x.dtype)}
        if not need[0]:
            return [None], grads
        dx = kbn.batch_norm_backward(g, x, mean, invstd, params["W0"], combined, count)
        return [dx.reshape(inputs[0].shape)], grads
