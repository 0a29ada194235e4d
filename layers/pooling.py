"""Spatial pooling: ``pool`` with ``pool=max|avg|maxabs`` (see :mod:`convnet.kernels.pool`)."""

from __future__ import annotations

import math

import numpy as np

from convnet.kernels import array_module
from convnet.kernels import pool as kpool

from .core import ComputeLayer


def image_geometry(ldef, channels_key: str = "channels"):
    """(channels, imgSize) of a layer's first input, from attrs or the input shape."""
    shape = tuple(ldef.input_shapes[0]) if ldef.input_shapes else ()
    channels = ldef.attrs.get(channels_key)
    if channels is None:
        channels = shape[0]
    channels = int(channels[0] if isinstance(channels, (list, tuple)) else channels)
    img = ldef.attrs.get("imgSize")
    if isinstance(img, (list, tuple)):
        img = img[0]
    if img is None:
        img = shape[-1] if len(shape) == 3 else int(round(math.sqrt(math.prod(shape) / channels)))
    return channels, int(img)


def as_image(x, channels: int, img: int):
    return x if x.ndim == 4 else x.reshape(x.shape[0], channels, img, img)


class PoolLayer(ComputeLayer):
    keeps_output = True  # max pooling's backward compares inputs with the output

    def __init__(self, ldef):
        super().__init__(ldef)
        a = ldef.attrs
        self.channels, self.img = image_geometry(ldef)
        self.kind = a.get("pool", "max")
        if self.kind not in ("max", "avg", "maxabs"):
            raise ValueError(f"layer '{ldef.name}': unknown pool type {self.kind!r}")
        self.size = int(a["sizeX"])
        self.stride = int(a.get("stride", 1))
        self.start = int(a.get("start", 0) or 0)
        self.outputs = int(a.get("outputsX") or kpool.out_size(self.img, self.size, self.stride,
                                                               self.start))

    def _geom(self):
        return dict(pool=self.kind, size=self.size, stride=self.stride, start=self.start,
                    outputs=self.outputs)

    def _forward(self, inputs, params, ctx):
        x = as_image(inputs[0], self.channels, self.img)
        y, cache = kpool.pool_forward(x, **self._geom())
        return y, (y, cache)

    def _switches(self, inputs, state):
        """Max/maxabs: which pixels win their windows, seen through the backward
        of a fixed generic output gradient (it spreads to the winners only)."""
        if self.kind == "avg":
            return []
        y, cache = state
        xp = array_module(y)
        probe = xp.asarray(np.random.default_rng(0).uniform(1, 2, y.shape), dtype=y.dtype)
        x = as_image(inputs[0], self.channels, self.img)
        return [kpool.pool_backward(probe, x, y, cache, **self._geom())]

    def _backward(self, grad, inputs, params, state, ctx, need):
        if not need[0]:
            return [None], {}
        y, cache = state
        x = as_image(inputs[0], self.channels, self.img)
        dx = kpool.pool_backward(grad, x, y, cache, **self._geom())
        return [dx.reshape(inputs[0].shape)], {}
