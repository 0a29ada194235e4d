"""Which images go into which numbered batch, as the original's ``make-data.py``
numbers them.

Training images are shuffled (the original shuffles them unseeded; here by
``--seed``, so a rerun makes the same batches) and cut into batches of
``batch_size`` (3072) numbered from 0; the test images follow from the next
multiple of 1000 after the training batches (ILSVRC-2012: training 0-417, test
1000-1016).  The ILSVRC-2012 validation images keep their file-name order, as in
the original; test images from a class-folder tree are shuffled too, so that any
test range holds every class.  Each batch is a folder of sub-batches of
``sub_batch_size`` (1024) images.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from convnet.data.photos.sources import DataSet, ImageRef

#: The original's OUTPUT_BATCH_SIZE and OUTPUT_SUB_BATCH_SIZE.
DEFAULT_BATCH_SIZE = 3072
DEFAULT_SUB_BATCH_SIZE = 1024


class BatchPlan(NamedTuple):
    """One batch to write: its number, whether it trains, its images and labels."""

    number: int
    train: bool
    refs: list[ImageRef]
    labels: list[int]


def first_test_batch(train_batches: int) -> int:
    """The first test batch's number: the next multiple of 1000 (the original's rule)."""
    return max(1, math.ceil(train_batches / 1000)) * 1000


def plan_batches(data: DataSet, batch_size: int, seed: int, shuffle_test: bool
                 ) -> list[BatchPlan]:
    """The batches of ``data``, training then test, in number order."""
    rng = np.random.default_rng([seed, 1])
    train_order = rng.permutation(len(data.train))
    plans = _cut(0, True, [data.train[i] for i in train_order],
                 [data.train_labels[i] for i in train_order], batch_size)
    test_order = rng.permutation(len(data.test)) if shuffle_test else range(len(data.test))
    plans += _cut(first_test_batch(len(plans)), False, [data.test[i] for i in test_order],
                  [data.test_labels[i] for i in test_order], batch_size)
    return plans


def _cut(first: int, train: bool, refs: list[ImageRef], labels: list[int],
         batch_size: int) -> list[BatchPlan]:
    return [BatchPlan(first + n, train, refs[start:start + batch_size],
                      labels[start:start + batch_size])
            for n, start in enumerate(range(0, len(refs), batch_size))]
