"""The data pipeline's memory figure (convnet/data/memory.py) and the dummy provider's
templates kept on their coarse grid."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from convnet.data import DataOptions, make_provider
from convnet.data.memory import data_memory, in_flight


@pytest.mark.parametrize("batches, expected", [(0, 0.0), (1, 1.0), (2, 2.5), (3, 3.5), (9, 3.5)])
def test_batches_in_flight_are_the_one_in_use_the_queued_the_loaded_and_its_copy(batches,
                                                                                 expected):
    assert in_flight(batches, 100, 50) == expected


def _dummy(shape, classes, cases, **options):
    opts = DataOptions(data_dims={0: shape}, num_classes=classes, **options)
    opts.cases_per_batch = cases
    return make_provider("dummy", options=opts)


def test_the_figure_counts_every_column_of_a_batch_and_the_providers_arrays():
    provider = _dummy((3, 8, 8), 10, 20, train_range=[1, 2, 3, 4], test_range=[5, 6])
    memory = data_memory(provider)
    batch = provider.get_batch(1, train=True)
    assert memory.train_batch_bytes == sum(column.size * 4 for column in batch)
    copy = 20 * 3 * 8 * 8 * 4 / memory.train_batch_bytes  # the images of a loading copy
    assert memory.train_batches == 3 + copy
    assert memory.test_batches == 2 + copy
    assert memory.resident_bytes == 10 * 3 * 2 * 2 * 4  # the templates' coarse grid
    assert memory.testing_bytes == memory.training_bytes + int((2 + copy) * memory.test_batch_bytes)


def test_dummy_templates_are_kept_coarse_and_enlarged_per_case():
    tracemalloc.start()
    try:
        provider = _dummy((3, 224, 224), 1000, 8)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert provider.resident_bytes() < 40 << 20 and held < 48 << 20  # not 602 MiB
    images, labels = provider.get_batch(3, train=True)
    templates = provider._templates
    enlarged = np.repeat(np.repeat(templates.values[labels.astype(int).ravel()], 4, axis=2),
                         4, axis=3)
    noise = images - enlarged  # unit Gaussian noise around each case's class template
    assert abs(float(noise.mean())) < 0.01 and abs(float(noise.std()) - 1) < 0.01
