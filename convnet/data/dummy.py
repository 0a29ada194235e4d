"""The ``dummy`` provider: synthetic, learnable data of any shape.

For trying a config without a data set and for benchmarks.  Each class has a
fixed random template; a case is its class's template plus unit Gaussian
noise.  For images the templates are smooth (drawn on a grid a quarter of the
side and enlarged by pixel repetition), so they survive pooling and random
crops; nearest-template classification is near perfect, so a working net
learns them.

Everything is drawn from generators seeded by ``(seed, stream, batch)``, so a
batch is the same every time it is asked for.  Every batch number >= 0
exists; the defaults are train 1-8, test 9, with ``cases_per_batch`` (512)
cases each.  ``data_dims[0]`` is any shape (default 3x32x32) and
``num_classes`` defaults to 10.  The mean is zero by construction, so nothing
is subtracted unless ``scalar_mean`` is given.

Any number of further columns (``data_dims[2]``, ``[3]``, ...: a second label
set, a mask) follow from each case's class, so a net can learn them too:

* a column of one value per case holds a second, coarse label, 0 for the
  first half of the classes and 1 for the rest: it fits a logreg head of any
  width >= 2;
* a wider column holds a fixed per-class pattern of values in [0, 1), usable
  as a mask or as targets of ``cost.bce`` / ``cost.sum2``.
"""

from __future__ import annotations

import numpy as np

from convnet.data.base import DataProvider
from convnet.data.options import DataOptions
from convnet.errors import DataError

DEFAULT_SHAPE = (3, 32, 32)
_TEMPLATE_STREAM = 2
_BATCH_STREAM = 3
_COLUMN_STREAM = 4


class _Templates:
    """Each class's template, enlarged only for the cases that ask for it: for images
    the smooth templates are kept on their coarse grid (a sixteenth of the pixels), so
    1000 classes of 3x224x224 hold 37 MiB instead of 602 MiB; ``for_labels`` gives the
    same values as indexing the enlarged templates would."""

    def __init__(self, shape: tuple[int, ...], num_classes: int, seed: int):
        rng = np.random.default_rng([seed, _TEMPLATE_STREAM])
        if len(shape) != 3:
            self.values, self.rows, self.cols = (
                rng.standard_normal((num_classes,) + shape, dtype=np.float32), None, None)
            return
        channels, height, width = shape
        self.values = rng.standard_normal(
            (num_classes, channels, max(1, height // 4), max(1, width // 4)), dtype=np.float32)
        self.rows = (np.arange(height) * self.values.shape[2] // height)[:, None]
        self.cols = (np.arange(width) * self.values.shape[3] // width)[None, :]

    def for_labels(self, labels: np.ndarray) -> np.ndarray:
        """The template of each case's class, (cases,) + shape."""
        if self.rows is None:
            return self.values[labels]
        return self.values[labels][:, :, self.rows, self.cols]

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)


def _column_values(index: int, shape: tuple[int, ...], num_classes: int,
                   seed: int) -> np.ndarray:
    """Column ``index``'s value for each class: (num_classes,) + shape, float32."""
    if shape == (1,):
        return (np.arange(num_classes) * 2 // max(num_classes, 2)).astype(np.float32)[:, None]
    rng = np.random.default_rng([seed, _COLUMN_STREAM, index])
    return rng.random((num_classes,) + shape, dtype=np.float32)


class DummyProvider(DataProvider):
    name = "dummy"
    pixel_max = None  # random values drawn per class, not pictures

    def __init__(self, options: DataOptions):
        dims = dict(options.data_dims or {0: DEFAULT_SHAPE})
        shape = tuple(int(d) for d in dims.pop(0, DEFAULT_SHAPE))
        labels_shape = tuple(dims.pop(1, (1,)))
        if labels_shape != (1,):
            raise DataError("dummy data: column 1 holds the labels, one value per case; "
                            f"asked for {options.data_dims}")
        extra = {int(index): tuple(int(d) for d in shape) for index, shape in sorted(dims.items())}
        if any(index < 2 or not shape or min(shape) < 1 for index, shape in extra.items()):
            raise DataError(f"dummy data: bad data columns {options.data_dims}")
        if not shape or min(shape) < 1:
            raise DataError(f"dummy data: bad image shape {shape}")
        num_classes = 10 if options.num_classes is None else int(options.num_classes)
        if num_classes < 1 or options.cases_per_batch < 1:
            raise DataError(f"dummy data needs >= 1 class and >= 1 case per batch, got "
                            f"{num_classes} classes and {options.cases_per_batch} cases")
        super().__init__(options, where="dummy data", image_shape=shape,
                         label_names=[f"class{k}" for k in range(num_classes)], available=None,
                         default_train=list(range(1, 9)), default_test=[9])
        self._templates = _Templates(shape, num_classes, options.seed)
        self._columns = {index: _column_values(index, shape, num_classes, options.seed)
                         for index, shape in extra.items()}
        self.data_dims.update(extra)

    def load_batch(self, batch_id: int, train: bool, epoch: int = 0, empty=np.empty) -> list:
        batch = super().load_batch(batch_id, train, epoch, empty)
        return batch + self._extra_columns(batch[1])

    def get_test_views(self, batch_id: int) -> list[np.ndarray]:
        views = super().get_test_views(batch_id)
        return views + self._extra_columns(views[1])

    def _extra_columns(self, labels: np.ndarray) -> list[np.ndarray]:
        classes = labels.reshape(-1).astype(np.int64)
        return [self._columns[index][classes] for index in sorted(self._columns)]

    def resident_bytes(self) -> int:
        """The class templates and further columns' values (the mean is zero)."""
        return self._templates.nbytes + sum(int(v.nbytes) for v in self._columns.values())

    def num_cases(self, batch_id: int) -> int:
        """Every dummy batch holds ``cases_per_batch`` cases: counted without making one
        (``--print-plan`` counts the cases of a batch, and a batch of 512 ImageNet-sized
        images takes seconds to draw)."""
        _check_batch_number(batch_id)
        self._check_available(batch_id)
        return self.options.cases_per_batch

    def _batch_source(self, batch_id: int) -> str:
        return f"dummy batch {batch_id}"

    def _pixel_mean(self) -> float:
        return 0.0

    def _load(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        _check_batch_number(batch_id)
        rng = np.random.default_rng([self.options.seed, _BATCH_STREAM, batch_id])
        count = self.options.cases_per_batch
        labels = rng.integers(0, self.num_classes, count)
        images = rng.standard_normal((count,) + self.image_shape, dtype=np.float32)
        images += self._templates.for_labels(labels)
        return images, labels


def _check_batch_number(batch_id: int) -> None:
    if batch_id < 0:
        raise DataError(f"dummy data: batch numbers start at 0, got {batch_id}")
