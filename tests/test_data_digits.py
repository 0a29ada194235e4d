"""The ``digits`` provider: scikit-learn's 1,797 digits, split into six fixed batches."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from convnet.data import DataOptions, make_provider


@pytest.fixture(scope="module")
def digits():
    return make_provider("digits")


def test_shape_classes_and_ranges(digits):
    assert digits.data_dims == {0: (1, 8, 8), 1: (1,)}
    assert digits.num_classes == 10 and digits.label_names == [str(d) for d in range(10)]
    assert digits.train_batches == [1, 2, 3, 4, 5] and digits.test_batches == [6]
    assert [digits.num_cases(b) for b in range(1, 7)] == [300, 300, 300, 299, 299, 299]


def test_batches_partition_the_data_set():
    raw = make_provider("digits", options=DataOptions(scalar_mean=0.0))
    rows, labels = [], []
    for batch in range(1, 7):
        images, batch_labels = raw.get_batch(batch, train=False)
        rows.append(images.reshape(len(images), -1))
        labels.append(batch_labels[:, 0])
    rows, labels = np.concatenate(rows), np.concatenate(labels)
    reference = load_digits()
    expected = np.concatenate([reference.data / 16.0, reference.target[:, None]], axis=1)
    got = np.concatenate([rows, labels[:, None]], axis=1)
    assert len(got) == 1797
    # Same multiset of (pixels, label) rows: every case in exactly one batch.
    np.testing.assert_allclose(np.unique(got, axis=0), np.unique(expected, axis=0), atol=1e-5)
    assert sorted(map(tuple, np.round(got, 4))) == sorted(map(tuple, np.round(expected, 4)))


def test_training_mean_is_subtracted(digits):
    train = np.concatenate([digits.get_batch(b, train=False)[0] for b in digits.train_batches])
    np.testing.assert_allclose(train.mean(axis=0), 0.0, atol=1e-5)
    raw = make_provider("digits", options=DataOptions(scalar_mean=0.0)).get_batch(6, False)[0]
    shift = raw - digits.get_batch(6, train=False)[0]
    np.testing.assert_allclose(shift, np.broadcast_to(shift[:1], shift.shape), atol=1e-6)
    assert 0.0 <= shift.min() and shift.max() <= 1.0 and raw.max() <= 1.0


def test_split_is_fixed():
    first = make_provider("digits", options=DataOptions(seed=3)).get_batch(6, train=False)
    second = make_provider("digits").get_batch(6, train=False)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])


def test_digits_file_read_directly_matches_load_digits():
    """The provider reads scikit-learn's file without importing scikit-learn; same data."""
    from convnet.data.digits import NUM_BATCHES, _split

    digits = load_digits()
    order = np.random.RandomState(0).permutation(len(digits.images))
    images, labels = _split()
    for batch, cases in enumerate(np.array_split(order, NUM_BATCHES)):
        np.testing.assert_array_equal(images[batch][:, 0], digits.images[cases] / 16.0)
        np.testing.assert_array_equal(labels[batch], digits.target[cases])
