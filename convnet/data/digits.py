"""The ``digits`` provider: scikit-learn's bundled handwritten digits.

1,797 grey 8x8 images of the digits 0-9 (``sklearn.datasets.load_digits``,
shipped with scikit-learn, so no download).  Pixels 0..16 are scaled to 0..1;
the per-pixel mean of the training batches is then subtracted.

The split is fixed: the cases are shuffled by ``RandomState(0).permutation``
(numpy's legacy generator, whose stream never changes) and cut into six
batches with ``numpy.array_split`` (300, 300, 300, 299, 299, 299 cases),
numbered 1-6.  Default ranges: train 1-5 (1,498 cases), test 6 (299 cases).
Any batch may be used for either role, as with every provider.
"""

from __future__ import annotations

import numpy as np

from convnet.data.base import DataOptions, DataProvider

NUM_BATCHES = 6


def _split() -> tuple[list[np.ndarray], list[np.ndarray]]:
    from sklearn.datasets import load_digits  # scikit-learn imports slowly; only when used

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    order = np.random.RandomState(0).permutation(len(images))
    chunks = np.array_split(order, NUM_BATCHES)
    return [images[c] for c in chunks], [digits.target[c] for c in chunks]


class DigitsProvider(DataProvider):
    name = "digits"

    def __init__(self, options: DataOptions):
        self._images, self._labels = _split()
        batches = list(range(1, NUM_BATCHES + 1))
        super().__init__(options, where="digits (scikit-learn)", image_shape=(1, 8, 8),
                         label_names=[str(d) for d in range(10)], available=batches,
                         default_train=batches[:-1], default_test=batches[-1:])

    def _batch_source(self, batch_id: int) -> str:
        return f"digits batch {batch_id}"

    def _load(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        return self._images[batch_id - 1], self._labels[batch_id - 1]
