"""The ``digits`` provider: the small handwritten-digits set, shipped with the package.

1,797 grey 8x8 images of the digits 0-9: the UCI optdigits test set, in the
copy and row order that scikit-learn ships (``load_digits``).  The 57 KB file
lives in ``convnet/data/files/`` (see the README there for its source and
licence), so the bundled example needs neither a download nor scikit-learn
and its SciPy.  Pixels 0..16 are scaled to 0..1; the per-pixel mean of the
training batches is then subtracted.

The split is fixed: the cases are shuffled by ``RandomState(0).permutation``
(numpy's legacy generator, whose stream never changes) and cut into six
batches with ``numpy.array_split`` (300, 300, 300, 299, 299, 299 cases),
numbered 1-6.  Default ranges: train 1-5 (1,498 cases), test 6 (299 cases).
Any batch may be used for either role, as with every provider.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from convnet.data.base import DataProvider
from convnet.data.options import DataOptions
from convnet.errors import DataError

NUM_BATCHES = 6

#: The data file, shipped inside the package (package data in pyproject.toml).
DIGITS_FILE = Path(__file__).parent / "files" / "digits.csv.gz"


def _digits_file() -> Path:
    if not DIGITS_FILE.is_file():
        raise DataError(f"the digits data file is missing from this installation: "
                        f"{DIGITS_FILE} (reinstall the package)")
    return DIGITS_FILE


def _split() -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The six fixed batches; the same cases and order as ``load_digits()`` gives."""
    table = np.loadtxt(_digits_file(), delimiter=",", dtype=np.float32)
    images = (table[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    targets = table[:, 64].astype(np.int64)
    order = np.random.RandomState(0).permutation(len(images))
    chunks = np.array_split(order, NUM_BATCHES)
    return [images[c] for c in chunks], [targets[c] for c in chunks]


class DigitsProvider(DataProvider):
    name = "digits"
    pixel_max = 1.0  # the 0..16 counts are scaled to 0..1

    def __init__(self, options: DataOptions):
        self._images, self._labels = _split()
        batches = list(range(1, NUM_BATCHES + 1))
        super().__init__(options, where="digits (bundled)", image_shape=(1, 8, 8),
                         label_names=[str(d) for d in range(10)], available=batches,
                         default_train=batches[:-1], default_test=batches[-1:])

    def _batch_source(self, batch_id: int) -> str:
        return f"digits batch {batch_id}"

    def _load(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        return self._images[batch_id - 1], self._labels[batch_id - 1]
