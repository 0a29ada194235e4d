"""Stored images made into a data layer's float32 input: the mean, the mirror, the colour noise.

A data provider serves the images of a batch as they are stored (uint8 for JPEG and
CIFAR pixels), each already cut to its crop window but not yet mirrored, with what it
takes to make them the input: the per-pixel mean (or one number), where each case's
window lies in it, which cases are mirrored, each case's colour shift and a scale.
:class:`StoredImages` holds them; :func:`images_to_float` computes, element by element::

    out[n, c, y, x] = ((float32(pixels[n, c, y, x']) - mean[c, top[n] + y, left[n] + x'])
                       + shift[n, c]) * scale

with ``x' = w - 1 - x`` for a mirrored case and ``x' = x`` otherwise, each operation
rounded to float32.  That is the order in which the providers made float batches
before (convert the whole image, subtract the mean, cut and mirror the window, add
the shift, scale), so the values are bitwise the same; the shift is added and the
scale applied only where given (adding 0 would turn -0 into +0).

The conversion runs where the images are used: on a CUDA device as one kernel over
the uploaded bytes (a quarter of float32's; :mod:`convnet.kernels.cuda.images`), on
a CPU device as the vectorised numpy below, on its worker; ``get_batch`` runs it on
the host.  ``pixels`` may be channels-last, ``(N, h, w, C)``, as JPEGs decode: the
kernel reads either layout, so the decoding threads copy their windows' rows as
they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import array_module, kernel


@dataclass(frozen=True)
class StoredImages:
    """A batch column of images in their stored dtype, with the recipe of its float input.

    ``pixels``: ``(N, C, h, w)``, or ``(N, h, w, C)`` when ``channels_last``, uint8 or
    float32, each case's window as stored (unmirrored); ``mean``: float32, shape ``()``
    or ``(C, H, W)`` with ``H >= h``, ``W >= w``; ``offsets``: int32 ``(N, 2)``, the top
    and left of each window in the mean; ``flips``: bool ``(N,)``; ``shifts``: float32
    ``(N, C)`` or None; ``scale``: float32 or None.  Sliced by cases like an array
    (``images[a:b]``), it stands in for the float32 ``(N, C, h, w)`` column it becomes
    (which ``numpy.asarray`` gives, computed on the host).
    """

    pixels: np.ndarray
    mean: np.ndarray
    offsets: np.ndarray
    flips: np.ndarray
    shifts: np.ndarray | None = None
    scale: np.float32 | None = None
    channels_last: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the float column: ``(N, C, h, w)``."""
        if self.channels_last:
            n, h, w, c = self.pixels.shape
            return (n, c, h, w)
        return tuple(self.pixels.shape)

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the float column (the stored one is ``pixels.dtype``)."""
        return np.dtype(np.float32)

    def __len__(self) -> int:
        return len(self.pixels)

    def __getitem__(self, cases: slice) -> StoredImages:
        if not isinstance(cases, slice):
            raise TypeError("StoredImages are cut by slices of cases")
        return StoredImages(self.pixels[cases], self.mean, self.offsets[cases],
                            self.flips[cases],
                            None if self.shifts is None else self.shifts[cases], self.scale,
                            self.channels_last)

    def to_float(self) -> np.ndarray:
        """The float32 ``(N, C, h, w)`` column, computed on the host."""
        return images_to_float(self.pixels, self.mean, self.offsets, self.flips, self.shifts,
                               self.scale, self.channels_last)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """numpy's view of the column: the float32 images (``np.array(images[a:b])`` is what
        code that keeps a copy of a batch gets)."""
        out = self.to_float()
        return out if dtype is None else out.astype(dtype, copy=False)


@kernel
def images_to_float(pixels, mean, offsets, flips, shifts, scale, channels_last: bool):
    """The float32 input of :class:`StoredImages`' arrays (all of one array module; see
    the module docstring for the formula).  Returns a new C-contiguous array."""
    xp = array_module(pixels)
    images = pixels.transpose(0, 3, 1, 2) if channels_last else pixels
    n, channels, height, width = images.shape
    out = xp.empty((n, channels, height, width), np.float32)
    if mean.ndim == 0:
        xp.subtract(images, mean, out=out)
    else:  # each case's window of the mean, unmirrored like its pixels
        windows = xp.lib.stride_tricks.sliding_window_view(mean, (height, width), axis=(1, 2))
        xp.subtract(images, windows[:, offsets[:, 0], offsets[:, 1]].transpose(1, 0, 2, 3),
                    out=out)
    flipped = xp.flatnonzero(flips)  # mirrored in place: a whole-batch where reads both
    if len(flipped):  # versions of every case and writes a third array
        out[flipped] = out[flipped, ..., ::-1]
    if shifts is not None:
        out += shifts[:, :, None, None]
    if scale is not None:
        out *= np.float32(scale)
    return xp.ascontiguousarray(out)


__all__ = ["StoredImages", "images_to_float"]
