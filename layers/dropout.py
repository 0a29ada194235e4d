"""``dropout`` and ``dropout2`` with masks that do not depend on the shard split.

At train time (``ctx.train`` and the ``enable`` param) each element is kept
with probability ``keep``; the mask bit of (case c, feature f) is a pure
function of ``(ctx.seed, ctx.step, layer name, ctx.case_offset + row, f)``
(:mod:`convnet.kernels.random`), so data-parallel runs see the same masks as one
device.

* ``dropout``: kept values are scaled by 1/keep; identity at test time or
  when disabled.
* ``dropout2``: kept values are not scaled; outputs are multiplied by
  ``keep`` at test time, and also at train time when disabled (as in
  cuda-convnet2).
"""

from __future__ import annotations

from convnet.kernels import random as krandom

from .core import ComputeLayer


def keep_mask(x, keep: float, name: str, ctx):
    """The train-time mask of layer ``name``: True (keep) with probability ``keep``."""
    key = krandom.stream_key(ctx.seed, ctx.step, name)
    return krandom.keep_mask(x, keep, key, ctx.case_offset)


class _DropoutBase(ComputeLayer):
    fresh_output = False  # may hand its input straight through

    @property
    def keep(self) -> float:
        return float(self.ldef.params.get("keep", 0.5))

    @property
    def enabled(self) -> bool:
        return bool(self.ldef.params.get("enable", True))

    def mask(self, x, ctx):
        return keep_mask(x, self.keep, self.name, ctx)


class DropoutLayer(_DropoutBase):

    def _forward(self, inputs, params, ctx):
        x = inputs[0]
        if not (ctx.train and self.enabled):
            return x, None
        m = self.mask(x, ctx)
        y = x * m
        y *= 1.0 / self.keep
        return y, m

    def _backward(self, grad, inputs, params, state, ctx, need):
        if not need[0]:
            return [None], {}
        if state is None:
            return [grad], {}
        dx = grad * state
        dx *= 1.0 / self.keep
        return [dx], {}


class Dropout2Layer(_DropoutBase):

    def _forward(self, inputs, params, ctx):
        x = inputs[0]
        if not (ctx.train and self.enabled):
            return x * self.keep, None
        m = self.mask(x, ctx)
        return x * m, m

    def _backward(self, grad, inputs, params, state, ctx, need):
        if not need[0]:
            return [None], {}
        if state is None:
            return [grad * self.keep], {}
        return [grad * state], {}
