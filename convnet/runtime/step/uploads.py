"""A minibatch's data columns onto their devices, the next minibatch's sent while a step runs.

A data column is a float32 host array, copied to the device as it is, or
:class:`~convnet.kernels.images.StoredImages`: the images as stored (uint8 windows for
JPEG and CIFAR pixels, a quarter of float32's bytes) with the recipe of their float
input.  Those are uploaded in their own dtype (:meth:`Device.upload`) and made float
on the device that reads them by :func:`~convnet.kernels.images.images_to_float`: one
kernel on a GPU, vectorised numpy on a CPU device's worker.  Each case's window,
mirror and shift travel with the pixels, so a step's load task copies nothing itself.

:meth:`Uploads.stage` starts the uploads of a minibatch before its step: the training
loop stages the next minibatch before it runs the current one, so on a GPU its bytes
cross from pinned memory on the upload stream while the current step computes, and
the load task of the next step takes the staged upload instead of making one.  The
uploads of the last two stages are kept (the minibatch about to step and the next);
staging a third drops what the oldest left unused.
Each device keeps a copy of the mean it subtracts (one image), made the first time.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from convnet.kernels.images import StoredImages, images_to_float
from convnet.runtime.step.tasks import TaskAction


def staged_loads(net, tasks, pieces, is_local) -> list[tuple[int, int, int, int]]:
    """(data column, start, stop, device) of each load task of ``tasks`` on this
    process's devices, with ``pieces`` the (start, stop) of each shard's cases."""
    return [(net[t.op.layer].attrs["dataIdx"], *pieces[t.op.shard], t.op.device)
            for t in tasks if t.action is TaskAction.LOAD and is_local(t.op.device)]


class Uploads:
    """The data columns of the steps of one executor on its ``devices``."""

    def __init__(self, devices):
        self._devices = devices
        self._lock = threading.Lock()
        # per stage, (column id, start, stop, device) -> (column, upload); the last two
        self._staged: collections.deque[dict] = collections.deque(maxlen=2)
        self._means: dict[int, tuple] = {}  # device -> (host mean, its copy on the device)

    def stage(self, batch: list, loads: list[tuple[int, int, int, int]]) -> None:
        """Start the uploads of ``loads`` (see :func:`staged_loads`) of the stored images
        of ``batch``; other columns are copied when their step loads them."""
        staged = {}
        for index, start, stop, device in loads:
            column = batch[index]
            if isinstance(column, StoredImages):
                uploads = _send(self._devices[device], column[start:stop])
                staged[(id(column), start, stop, device)] = (column, uploads)
        with self._lock:
            self._staged.append(staged)

    def to_device(self, device_index: int, column, start: int, stop: int):
        """Cases ``start:stop`` of a data column as float32 on the device (a new array)."""
        device = self._devices[device_index]
        if not isinstance(column, StoredImages):
            piece = column[start:stop]
            return (device.to_device(piece) if isinstance(piece, np.ndarray)
                    else device.xp.array(piece, copy=True))  # already on the device: a graph
        key = (id(column), start, stop, device_index)
        with self._lock:
            column_staged, uploads = next((stage.pop(key) for stage in self._staged
                                           if key in stage), (None, None))
        piece = column[start:stop]
        if column_staged is not column:  # not staged (or a column since gone, by its id)
            uploads = _send(device, piece)
        pixels, offsets, flips, shifts = (None if u is None else u.take() for u in uploads)
        with device.scope():
            return images_to_float(pixels, self._mean(device_index, piece.mean), offsets,
                                   flips, shifts, piece.scale, piece.channels_last)

    def _mean(self, device_index: int, mean: np.ndarray):
        with self._lock:
            kept = self._means.get(device_index)
        if kept is None or kept[0] is not mean:
            kept = (mean, self._devices[device_index].upload(mean).take())
            with self._lock:
                self._means[device_index] = kept
        return kept[1]


def _send(device, images: StoredImages) -> list:
    """Start the uploads of the arrays of ``images`` a device needs besides the mean."""
    return [device.upload(images.pixels), device.upload(images.offsets),
            device.upload(images.flips),
            None if images.shifts is None else device.upload(images.shifts)]


__all__ = ["Uploads", "staged_loads"]
