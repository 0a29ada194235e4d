"""The ``digits`` provider: the bundled 1,797 digits, split into six fixed batches."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

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
    assert rows.shape == (1797, 64)
    # Every case in exactly one batch: the class counts and pixel sum of the whole set.
    assert np.bincount(labels.astype(int)).tolist() == [178, 182, 177, 183, 181, 182, 181, 179,
                                                        174, 180]
    assert float(rows.sum()) == pytest.approx(35107.375)


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


def test_bundled_file_is_scikit_learns_copy():
    """The shipped file is scikit-learn's digits.csv.gz byte for byte (see
    convnet/data/files/README.md), so the batches are those of load_digits() order."""
    from convnet.data.digits import DIGITS_FILE, _split

    digest = hashlib.sha256(DIGITS_FILE.read_bytes()).hexdigest()
    assert digest == "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"
    _, labels = _split()
    assert labels[0][:12].tolist() == [2, 8, 2, 6, 6, 7, 1, 9, 8, 5, 2, 8]


def test_digits_provider_does_not_import_scikit_learn():
    """The main install has no scikit-learn; the provider must not need it."""
    import subprocess
    import sys

    code = ("import sys; from convnet.data import make_provider; make_provider('digits'); "
            "print('sklearn' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("mean", [128.0, -0.5])
def test_a_scalar_mean_outside_the_pixel_range_is_refused(mean):
    """--scalar-mean 128 copied from a CIFAR recipe onto the 0..1 digits would shift every
    pixel by 128: a mean of the pixels lies within their range, in the data's units."""
    from convnet.errors import DataError

    with pytest.raises(DataError, match=f"--scalar-mean {mean:g} is outside 0..1"):
        make_provider("digits", options=DataOptions(scalar_mean=mean))
