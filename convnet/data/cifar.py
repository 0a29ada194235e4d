"""The ``cifar`` provider: a CIFAR-10 "python version" folder.

The folder holds ``data_batch_1`` .. ``data_batch_5`` (batches 1-5) and
``test_batch`` (batch 6), each a pickled dict with ``data`` (N x 3072 uint8
rows: the red, green and blue 32x32 planes, row-major) and ``labels`` (N
ints), plus ``batches.meta`` with ``label_names``.  Default ranges: train 1-5,
test 6.

Pixels stay in 0..255; the per-pixel mean of the training batches (those of
the train range) is subtracted, computed on first use and kept in memory.  Batches are read from
disk each time they are served rather than kept, so memory stays at one batch
per caller.
"""

from __future__ import annotations

import os

import numpy as np

from convnet.data.base import DataProvider
from convnet.data.options import DataOptions
from convnet.data.safe_pickle import load_dict
from convnet.errors import DataError

SHAPE = (3, 32, 32)
TEST_BATCH = 6


def batch_file(batch_id: int) -> str:
    return "test_batch" if batch_id == TEST_BATCH else f"data_batch_{batch_id}"


def read_label_names(folder: str) -> list[str]:
    """``label_names`` from ``batches.meta``, as ``str`` whatever Python wrote them."""
    path = os.path.join(folder, "batches.meta")
    names = load_dict(path, ("label_names",))["label_names"]
    if not isinstance(names, (list, tuple)) or not names:
        raise DataError(f"{path}: 'label_names' should be a non-empty list of names")
    return [n.decode("latin1") if isinstance(n, bytes) else str(n) for n in names]


def check_folder(path: str | None, provider: str) -> str:
    if not path:
        raise DataError(f"the '{provider}' data provider needs --data-path")
    if os.path.isfile(path):
        raise DataError(f"{path}: --data-path must be a folder of batch files, not a file")
    if not os.path.isdir(path):
        raise DataError(f"{path}: data folder does not exist")
    return path


class CifarProvider(DataProvider):
    name = "cifar"

    def __init__(self, options: DataOptions):
        self.folder = check_folder(options.data_path, self.name)
        label_names = read_label_names(self.folder)
        available = [b for b in range(1, TEST_BATCH + 1)
                     if os.path.isfile(self._batch_source(b))]
        super().__init__(options, where=self.folder, image_shape=SHAPE, label_names=label_names,
                         available=available, default_train=[1, 2, 3, 4, 5],
                         default_test=[TEST_BATCH])

    def _batch_source(self, batch_id: int) -> str:
        return os.path.join(self.folder, batch_file(batch_id))

    def _load(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        path = self._batch_source(batch_id)
        batch = load_dict(path, ("data", "labels"))
        data = batch["data"]
        if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072:
            found = data.shape if isinstance(data, np.ndarray) else type(data).__name__
            raise DataError(f"{path}: 'data' should be an N x 3072 array of 32x32 RGB rows, "
                            f"found {found}")
        return data.reshape((-1,) + SHAPE), batch["labels"]
