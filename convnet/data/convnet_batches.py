"""The ``convnet-batches`` provider: a cuda-convnet batch folder.

The folder holds ``data_batch_N`` files (any N >= 0), each a pickled dict with
``data`` stored pixels x cases (one column per image, channel-major: all of
channel 0 row by row, then channel 1, ...) and ``labels`` (N values, as a list
or a 1 x N array), plus ``batches.meta`` with ``data_mean`` (pixels x 1),
``num_vis`` (pixels per image) and ``label_names``.

The image is 3 x S x S when ``num_vis / 3`` is a perfect square, else
1 x S x S.  ``data_mean`` from the meta file is the mean subtracted.  Default
ranges (when none are given): every batch but the highest-numbered for
training, the highest for testing, which is how cuda-convnet's CIFAR batches
are laid out (1-5 and 6).
"""

from __future__ import annotations

import math
import os
import re

import numpy as np

from convnet.data.base import DataProvider
from convnet.data.options import DataOptions
from convnet.data.cifar import check_folder, read_label_names
from convnet.data.safe_pickle import load_dict
from convnet.errors import DataError

_BATCH_FILE = re.compile(r"^data_batch_(\d+)$")


def image_shape(num_vis: int, where: str) -> tuple[int, int, int]:
    """Infer (channels, side, side) from the number of values per image."""
    if num_vis % 3 == 0 and math.isqrt(num_vis // 3) ** 2 == num_vis // 3:
        side = math.isqrt(num_vis // 3)
        return (3, side, side)
    side = math.isqrt(num_vis)
    if num_vis > 0 and side * side == num_vis:
        return (1, side, side)
    raise DataError(f"{where}: num_vis={num_vis} is neither 3 x S x S nor S x S "
                    "pixels; images must be square")


def whole_positive(value, what: str) -> int:
    """A count read from a pickle: a positive whole number (a one-element array too),
    never a truncated float, a negative number, infinity or a bool."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)) \
            or not math.isfinite(value) or value != int(value) or value <= 0:
        raise DataError(f"{what} should be a positive whole number, found {value!r}")
    return int(value)


class ConvnetBatchesProvider(DataProvider):
    name = "convnet-batches"

    def __init__(self, options: DataOptions):
        self.folder = check_folder(options.data_path, self.name)
        meta_path = os.path.join(self.folder, "batches.meta")
        meta = load_dict(meta_path, ("data_mean", "num_vis", "label_names"))
        num_vis = whole_positive(meta["num_vis"], f"{meta_path}: 'num_vis'")
        shape = image_shape(num_vis, meta_path)
        mean = np.asarray(meta["data_mean"])
        if mean.size != num_vis or not np.issubdtype(mean.dtype, np.number):
            raise DataError(f"{meta_path}: 'data_mean' should hold num_vis={num_vis} numbers "
                            f"(pixels x 1), found shape {mean.shape} of {mean.dtype}")
        self._data_mean = mean.reshape(shape).astype(np.float64)
        available = sorted(int(m.group(1)) for m in map(_BATCH_FILE.match, os.listdir(self.folder))
                           if m and os.path.isfile(os.path.join(self.folder, m.group(0))))
        if (options.train_range is None or options.test_range is None) and len(available) < 2:
            raise DataError(f"{self.folder}: found {len(available)} data_batch_N file(s); "
                            "give --train-range and --test-range explicitly")
        super().__init__(options, where=self.folder, image_shape=shape,
                         label_names=read_label_names(self.folder), available=available,
                         default_train=available[:-1], default_test=available[-1:])

    def _batch_source(self, batch_id: int) -> str:
        return os.path.join(self.folder, f"data_batch_{batch_id}")

    def _pixel_mean(self) -> np.ndarray:
        return self._data_mean

    def _load(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        path = self._batch_source(batch_id)
        batch = load_dict(path, ("data", "labels"))
        data = batch["data"]
        num_vis = math.prod(self.image_shape)
        if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[0] != num_vis:
            found = data.shape if isinstance(data, np.ndarray) else type(data).__name__
            raise DataError(f"{path}: 'data' should be a {num_vis} x N array (pixels x cases, "
                            f"num_vis from batches.meta), found {found}")
        return data.T.reshape((-1,) + self.image_shape), batch["labels"]
