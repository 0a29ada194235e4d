"""The ``convnet-batches`` provider on small cuda-convnet batch folders."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from convnet.data import DataOptions, make_provider
from convnet.errors import DataError
from tests.data.test_safe_pickle import py2_dumps


def make_batches(folder, shape=(3, 8, 8), batches=(1, 2, 3), cases=7, dumps=pickle.dumps,
                 label_array=False):
    """Write data_batch_N (pixels x cases) and batches.meta; return {batch: (images, labels)}."""
    rng = np.random.default_rng(1)
    folder.mkdir(exist_ok=True)
    num_vis = int(np.prod(shape))
    written = {}
    for batch in batches:
        images = rng.integers(0, 256, (cases,) + shape, dtype=np.uint8)
        labels = rng.integers(0, 4, cases)
        stored_labels = labels.reshape(1, -1).astype(np.float32) if label_array else \
            [int(v) for v in labels]
        (folder / f"data_batch_{batch}").write_bytes(dumps(
            {"data": np.ascontiguousarray(images.reshape(cases, num_vis).T),
             "labels": stored_labels}))
        written[batch] = (images, labels)
    mean = rng.uniform(0, 255, (num_vis, 1)).astype(np.float32)
    (folder / "batches.meta").write_bytes(dumps({
        "data_mean": mean, "num_vis": num_vis, "label_names": ["a", "b", "c", "d"],
        "num_cases_per_batch": cases}))
    return written, mean.reshape(shape)


def provider(folder, **options):
    return make_provider("convnet-batches", str(folder), DataOptions(**options))


@pytest.mark.parametrize("shape", [(3, 8, 8), (1, 6, 6)])
@pytest.mark.parametrize("dumps", [pickle.dumps, py2_dumps], ids=["python3", "python2"])
def test_reads_columns_as_images_and_subtracts_data_mean(tmp_path, shape, dumps):
    written, mean = make_batches(tmp_path, shape=shape, dumps=dumps)
    data = provider(tmp_path)
    assert data.data_dims == {0: shape, 1: (1,)} and data.num_classes == 4
    assert data.label_names == ["a", "b", "c", "d"]
    assert data.train_batches == [1, 2] and data.test_batches == [3]
    for batch in (1, 3):
        images, labels = data.get_batch(batch, train=False)
        np.testing.assert_allclose(images, written[batch][0] - mean, atol=1e-4)
        np.testing.assert_array_equal(labels[:, 0], written[batch][1])
    assert data.num_cases(2) == 7


def test_labels_as_row_array_and_batch_zero(tmp_path):
    written, _ = make_batches(tmp_path, batches=(0, 1, 2), label_array=True)
    data = provider(tmp_path, train_range=[0, 1], test_range=[2])
    _, labels = data.get_batch(0, train=True, epoch=0)
    np.testing.assert_array_equal(labels[:, 0], written[0][1])


def test_crop_options_apply(tmp_path):
    written, mean = make_batches(tmp_path)
    data = provider(tmp_path, inner_size=6, multiview_test=True)
    assert data.data_dims[0] == (3, 6, 6) and data.num_views == 10
    images, _ = data.get_batch(3, train=False)
    np.testing.assert_allclose(images, (written[3][0] - mean)[:, :, 1:7, 1:7], atol=1e-4)
    assert data.get_batch(1, train=True, epoch=0)[0].shape == (7, 3, 6, 6)


def test_single_batch_needs_explicit_ranges(tmp_path):
    make_batches(tmp_path, batches=(5,))
    with pytest.raises(DataError, match="give --train-range and --test-range"):
        provider(tmp_path)
    data = provider(tmp_path, train_range=[5], test_range=[5])
    assert data.train_batches == data.test_batches == [5]


def test_non_square_num_vis(tmp_path):
    make_batches(tmp_path)
    (tmp_path / "batches.meta").write_bytes(pickle.dumps(
        {"data_mean": np.zeros((50, 1)), "num_vis": 50, "label_names": ["a"]}))
    with pytest.raises(DataError, match="num_vis=50 is neither"):
        provider(tmp_path)


def test_data_mean_wrong_size(tmp_path):
    make_batches(tmp_path)
    (tmp_path / "batches.meta").write_bytes(pickle.dumps(
        {"data_mean": np.zeros((10, 1)), "num_vis": 192, "label_names": ["a"]}))
    with pytest.raises(DataError, match="'data_mean' should hold num_vis=192 numbers"):
        provider(tmp_path)


def test_meta_missing_keys(tmp_path):
    make_batches(tmp_path)
    (tmp_path / "batches.meta").write_bytes(pickle.dumps({"label_names": ["a"]}))
    with pytest.raises(DataError, match=r"batches.meta: missing key\(s\) 'data_mean', 'num_vis'"):
        provider(tmp_path)


def test_batch_with_wrong_pixel_count(tmp_path):
    make_batches(tmp_path)
    (tmp_path / "data_batch_2").write_bytes(pickle.dumps(
        {"data": np.zeros((100, 4), np.uint8), "labels": [0, 1, 2, 3]}))
    with pytest.raises(DataError, match=r"data_batch_2: 'data' should be a 192 x N array .* "
                                        r"found \(100, 4\)"):
        provider(tmp_path).get_batch(2, train=True, epoch=0)


def test_range_naming_missing_batch(tmp_path):
    make_batches(tmp_path)
    with pytest.raises(DataError, match=r"train range names batch 4 .* available batches: 1-3"):
        provider(tmp_path, train_range=[1, 2, 3, 4])
