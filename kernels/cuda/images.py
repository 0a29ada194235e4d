"""CUDA float conversion of stored images: :func:`convnet.kernels.images.images_to_float`
as one kernel.

The generic form is five passes over the batch (the conversion with the mean, the
mean windows gathered, the mirror, the shift, the scale); ``cvn_images_u8`` (and
``cvn_images_f32`` for float pixels) makes the same operations, in the same order,
in one pass over the uploaded bytes, reading either pixel layout.  Pixels of another
dtype take the generic form.
"""

from __future__ import annotations

import numpy as np

from ..images import images_to_float as _generic
from .kernel_set import contiguous, current
from .sources.images import PIXEL_TYPES

_KERNELS = {np.dtype(t): f"cvn_images_{suffix}" for suffix, t in PIXEL_TYPES.items()}


def images_to_float(pixels, mean, offsets, flips, shifts, scale, channels_last: bool):
    name = _KERNELS.get(np.dtype(pixels.dtype))
    if name is None or mean.ndim not in (0, 3):
        return _generic.generic(pixels, mean, offsets, flips, shifts, scale, channels_last)
    xp = current().xp
    if channels_last:
        n, height, width, channels = pixels.shape
    else:
        n, channels, height, width = pixels.shape
    out = xp.empty((n, channels, height, width), np.float32)
    if not out.size:
        return out
    per_pixel = mean.ndim == 3
    mean_height, mean_width = (int(mean.shape[1]), int(mean.shape[2])) if per_pixel else (1, 1)
    current().kernel(name)(
        contiguous(pixels), contiguous(mean.astype(np.float32, copy=False)),
        contiguous(offsets.astype(np.int32, copy=False)),
        contiguous(flips.astype(bool, copy=False)),
        contiguous(shifts) if shifts is not None else xp.zeros((1,), np.float32),
        np.float32(1.0 if scale is None else scale), np.int32(channels), np.int32(height),
        np.int32(width), np.int32(mean_height), np.int32(mean_width), np.int32(channels_last),
        np.int32(per_pixel), np.int32(shifts is not None), np.int32(scale is not None), out)
    return out
