"""The ``dummy`` provider: deterministic, learnable synthetic data of any shape."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.data import DataOptions, make_provider
from convnet.errors import DataError


def dummy(**options):
    return make_provider("dummy", options=DataOptions(**options))


def test_defaults():
    data = dummy()
    assert data.data_dims == {0: (3, 32, 32), 1: (1,)} and data.num_classes == 10
    assert data.train_batches == list(range(1, 9)) and data.test_batches == [9]
    images, labels = data.get_batch(1, train=True, epoch=0)
    assert images.shape == (512, 3, 32, 32) and images.dtype == np.float32
    assert images.flags.c_contiguous and labels.shape == (512, 1)
    assert data.num_cases(4) == 512


def test_cases_are_counted_without_drawing_a_batch_and_as_many_as_a_batch_holds():
    data = dummy(cases_per_batch=7)
    assert data.num_cases(2) == 7 == len(data.get_batch(2, train=True, epoch=0)[0])
    with pytest.raises(DataError, match="batch numbers start at 0"):
        data.num_cases(-1)


def test_deterministic_per_batch_and_seed():
    a, b = dummy(seed=1), dummy(seed=1)
    np.testing.assert_array_equal(a.get_batch(3, True, 0)[0], b.get_batch(3, True, 0)[0])
    np.testing.assert_array_equal(a.get_batch(3, False)[1], b.get_batch(3, False)[1])
    assert not np.array_equal(a.get_batch(3, False)[0], a.get_batch(4, False)[0])
    assert not np.array_equal(a.get_batch(3, False)[0], dummy(seed=2).get_batch(3, False)[0])


@pytest.mark.parametrize("shape, classes", [((3, 32, 32), 10), ((1, 8, 8), 5), ((20,), 3)])
def test_nearest_class_mean_classifier_learns_it(shape, classes):
    data = dummy(data_dims={0: shape, 1: (1,)}, num_classes=classes, cases_per_batch=256)
    assert data.data_dims[0] == shape
    images, labels = data.get_batch(1, train=False)
    flat, labels = images.reshape(len(images), -1), labels[:, 0].astype(int)
    centres = np.stack([flat[labels == k].mean(axis=0) for k in range(classes)])
    test_images, test_labels = data.get_batch(9, train=False)
    test_flat = test_images.reshape(len(test_images), -1)
    distances = ((test_flat[:, None, :] - centres[None]) ** 2).sum(axis=2)
    accuracy = np.mean(distances.argmin(axis=1) == test_labels[:, 0])
    assert accuracy > 0.9
    assert set(np.unique(labels)) == set(range(classes))


def test_crops_work_on_dummy_images():
    data = dummy(data_dims={0: (3, 16, 16)}, inner_size=12, cases_per_batch=8)
    assert data.data_dims[0] == (3, 12, 12)
    assert data.get_batch(1, train=True, epoch=2)[0].shape == (8, 3, 12, 12)


@pytest.mark.parametrize("options, message", [
    ({"data_dims": {0: (3, 8, 8), 2: (0,)}}, "bad data columns"),
    ({"data_dims": {0: (3, 8, 8), 1: (2,)}}, "column 1 holds the labels"),
    ({"data_dims": {0: (0, 8, 8)}}, "bad image shape"),
    ({"num_classes": 0}, ">= 1 class"),
    ({"data_dims": {0: (20,)}, "inner_size": 4}, "--inner-size needs images"),
    ({"seed": -1}, "seed must be >= 0"),
])
def test_bad_options(options, message):
    with pytest.raises(DataError, match=message):
        dummy(**options)
