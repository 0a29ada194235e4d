"""Normalisation layers: ``cmrnorm``, ``rnorm`` and ``cnorm`` (see :mod:`convnet.kernels.norm`).

Their ``scale``, ``pow`` and ``minDiv`` come from the layer-params file
(``LayerDef.params``), ``size`` from the layer definition.
"""

from __future__ import annotations

from convnet.kernels import norm as knorm

from .core import ComputeLayer
from .pooling import as_image, image_geometry


class NormLayer(ComputeLayer):
    keeps_output = True

    def __init__(self, ldef):
        super().__init__(ldef)
        self.channels, self.img = image_geometry(ldef)
        self.size = int(ldef.attrs["size"])
        p = ldef.params
        self.kw = dict(kind=ldef.type, size=self.size, scale=float(p.get("scale", 0.0)),
                       pow=float(p.get("pow", 0.0)), min_div=float(p.get("minDiv", 1.0)))

    def _forward(self, inputs, params, ctx):
        x = as_image(inputs[0], self.channels, self.img)
        y, cache = knorm.response_norm_forward(x, **self.kw)
        return y, (y, cache)

    def _backward(self, grad, inputs, params, state, ctx, need):
        if not need[0]:
            return [None], {}
        y, cache = state
        x = as_image(inputs[0], self.channels, self.img)
        dx = knorm.response_norm_backward(grad, x, y, cache, **self.kw)
        return [dx.reshape(inputs[0].shape)], {}
