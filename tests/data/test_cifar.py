"""The ``cifar`` provider on small folders in the real CIFAR-10 python-version format."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from convnet.data import DataOptions, make_provider
from convnet.errors import DataError
from tests.data.test_safe_pickle import py2_dumps

LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck"]
CASES = 12


def make_cifar(folder, cases=CASES, dumps=pickle.dumps, seed=0):
    """Write data_batch_1..5, test_batch and batches.meta; return {batch: (rows, labels)}."""
    rng = np.random.default_rng(seed)
    folder.mkdir(exist_ok=True)
    batches = {}
    for batch in range(1, 7):
        rows = rng.integers(0, 256, (cases, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, cases)]
        name = "test_batch" if batch == 6 else f"data_batch_{batch}"
        (folder / name).write_bytes(dumps({"batch_label": f"batch {batch}", "data": rows,
                                           "labels": labels, "filenames": ["x.png"] * cases}))
        batches[batch] = (rows, labels)
    (folder / "batches.meta").write_bytes(dumps({"label_names": LABEL_NAMES,
                                                 "num_cases_per_batch": cases, "num_vis": 3072}))
    return batches


def cifar(folder, **options):
    return make_provider("cifar", str(folder), DataOptions(**options))


def full_images(rows):
    return rows.reshape(-1, 3, 32, 32).astype(np.float32)


def training_mean(batches):
    return np.concatenate([full_images(batches[b][0]) for b in range(1, 6)]).mean(axis=0)


@pytest.mark.parametrize("dumps", [pickle.dumps, py2_dumps,
                                   lambda d: pickle.dumps({k.encode(): v for k, v in d.items()},
                                                          protocol=2)],
                         ids=["python3", "python2", "bytes-keys"])
def test_reads_pixels_labels_and_subtracts_training_mean(tmp_path, dumps):
    batches = make_cifar(tmp_path, dumps=dumps)
    provider = cifar(tmp_path)
    assert provider.data_dims == {0: (3, 32, 32), 1: (1,)}
    assert provider.label_names == LABEL_NAMES and provider.num_classes == 10
    assert provider.train_batches == [1, 2, 3, 4, 5] and provider.test_batches == [6]
    images, labels = provider.get_batch(6, train=False, epoch=0)
    rows, expected_labels = batches[6]
    assert images.dtype == np.float32 and images.flags.c_contiguous
    assert labels.dtype == np.float32 and labels.shape == (CASES, 1)
    np.testing.assert_array_equal(labels[:, 0], expected_labels)
    np.testing.assert_allclose(images, full_images(rows) - training_mean(batches), atol=1e-4)
    assert provider.num_cases(3) == CASES


def test_rows_are_red_green_blue_planes(tmp_path):
    make_cifar(tmp_path)
    row = np.concatenate([np.full(1024, 10), np.full(1024, 20), np.full(1024, 30)])
    row[0] = 99
    (tmp_path / "test_batch").write_bytes(pickle.dumps({"data": row[None].astype(np.uint8),
                                                        "labels": [0]}))
    images, _ = cifar(tmp_path, scalar_mean=0.0).get_batch(6, train=False)
    assert images[0, 0, 0, 0] == 99 and images[0, 0, 0, 1] == 10
    assert np.all(images[0, 1] == 20) and np.all(images[0, 2] == 30)


def test_scalar_mean_replaces_pixel_mean(tmp_path):
    batches = make_cifar(tmp_path)
    images, _ = cifar(tmp_path, scalar_mean=128.0).get_batch(2, train=False)
    np.testing.assert_array_equal(images, full_images(batches[2][0]) - 128)


def test_crops_flips_and_views(tmp_path):
    batches = make_cifar(tmp_path)
    provider = cifar(tmp_path, inner_size=24, multiview_test=True, seed=5)
    assert provider.data_dims[0] == (3, 24, 24)
    full = full_images(batches[1][0]) - training_mean(batches)

    test_images, _ = provider.get_batch(1, train=False, epoch=3)
    np.testing.assert_allclose(test_images, full[:, :, 4:28, 4:28], atol=1e-4)

    train_images, _ = provider.get_batch(1, train=True, epoch=3)
    assert train_images.shape == (CASES, 3, 24, 24) and train_images.flags.c_contiguous
    seen = set()
    for case in range(CASES):
        windows = {(y, x, flip): full[case, :, y:y + 24, x:x + 24][..., ::-1 if flip else 1]
                   for y in range(9) for x in range(9) for flip in (False, True)}
        match = [k for k, w in windows.items() if np.allclose(w, train_images[case], atol=1e-4)]
        assert len(match) == 1, f"case {case} is not a window of its image"
        seen.add(match[0])
    assert len(seen) > 3 and {flip for _, _, flip in seen} == {False, True}

    again, _ = cifar(tmp_path, inner_size=24, seed=5).get_batch(1, train=True, epoch=3)
    np.testing.assert_array_equal(again, train_images)
    assert not np.array_equal(provider.get_batch(1, True, epoch=4)[0], train_images)
    assert not np.array_equal(cifar(tmp_path, inner_size=24, seed=6).get_batch(1, True, 3)[0],
                              train_images)

    views, labels = provider.get_test_views(1)
    assert provider.num_views == 10 and views.shape == (10, CASES, 3, 24, 24)
    np.testing.assert_array_equal(views[0], test_images)
    np.testing.assert_allclose(views[1], full[:, :, :24, :24], atol=1e-4)
    np.testing.assert_allclose(views[4], full[:, :, 8:, 8:], atol=1e-4)
    np.testing.assert_array_equal(views[5:], views[:5, ..., ::-1])
    np.testing.assert_array_equal(labels[:, 0], batches[1][1])


def test_inner_size_equal_to_image_mirrors_only(tmp_path):
    batches = make_cifar(tmp_path)
    provider = cifar(tmp_path, inner_size=32, multiview_test=True)
    full = full_images(batches[2][0]) - training_mean(batches)
    train_images, _ = provider.get_batch(2, train=True, epoch=0)
    for case in range(CASES):
        assert (np.allclose(train_images[case], full[case], atol=1e-4)
                or np.allclose(train_images[case], full[case][..., ::-1], atol=1e-4))
    assert provider.num_views == 2
    views, _ = provider.get_test_views(2)
    np.testing.assert_array_equal(views[1], views[0][..., ::-1])


def test_colour_noise_adds_one_colour_per_case(tmp_path):
    make_cifar(tmp_path)
    plain, _ = cifar(tmp_path).get_batch(3, train=True, epoch=1)
    noisy, _ = cifar(tmp_path, color_noise=0.5).get_batch(3, train=True, epoch=1)
    shift = noisy - plain
    assert np.abs(shift).max() > 1.0
    np.testing.assert_allclose(shift, shift[:, :, :1, :1] * np.ones_like(shift), atol=1e-3)
    again, _ = cifar(tmp_path, color_noise=0.5).get_batch(3, train=True, epoch=1)
    np.testing.assert_array_equal(again, noisy)
    test_images, _ = cifar(tmp_path, color_noise=0.5).get_batch(3, train=False)
    np.testing.assert_array_equal(test_images, plain)


def test_check_dims(tmp_path):
    make_cifar(tmp_path)
    provider = cifar(tmp_path)
    provider.check_dims({0: (3, 32, 32), 1: (1,)})
    provider.check_dims({0: (3072,)})
    with pytest.raises(DataError, match=r"expects data column 0 of shape 3x24x24 but .* gives "
                                        r"3x32x32; pass --inner-size=24"):
        provider.check_dims({0: (3, 24, 24)})
    with pytest.raises(DataError, match="column 2"):
        provider.check_dims({2: (1,)})


def test_missing_folder_and_meta(tmp_path):
    with pytest.raises(DataError, match="data folder does not exist"):
        cifar(tmp_path / "nowhere")
    with pytest.raises(DataError, match="needs --data-path"):
        make_provider("cifar")
    with pytest.raises(DataError, match="batches.meta: file does not exist"):
        cifar(tmp_path)


def test_range_naming_missing_batch(tmp_path):
    make_cifar(tmp_path)
    (tmp_path / "data_batch_4").unlink()
    with pytest.raises(DataError, match=r"train range names batch 4 \(.*data_batch_4\), which "
                                        r"does not exist; available batches: 1-3,5-6"):
        cifar(tmp_path)
    with pytest.raises(DataError, match="test range names batch 7"):
        cifar(tmp_path, train_range=[1], test_range=[7])
    with pytest.raises(DataError, match="there is no batch 9"):
        cifar(tmp_path, train_range=[1]).get_batch(9, train=False)


def _replace(folder, name, content):
    (folder / name).write_bytes(content)


@pytest.mark.parametrize("content, message", [
    (b"\x80\x04\x95", "truncated"),
    (pickle.dumps({"data": np.zeros((2, 3000), np.uint8), "labels": [0, 1]}),
     "'data' should be an N x 3072 array .* found \\(2, 3000\\)"),
    (pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1, 2]}),
     "2 images but 3 labels"),
    (pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}),
     "label 10 is not a class index in 0..9"),
    (pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, -1]}),
     "label -1 is not a class index"),
    (pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": ["a", "b"]}),
     "labels are <U1, not class indices"),
    (pickle.dumps({"data": [[1, 2, 3]], "labels": [0]}), "found list"),
    (pickle.dumps({"data": np.zeros((2, 3072), np.uint8)}), "missing key"),
    (pickle.dumps({"data": np.zeros((0, 3072), np.uint8), "labels": []}),
     "holds no images"),
], ids=["truncated", "rows", "count", "label-high", "label-negative", "label-text",
        "not-array", "no-labels", "empty"])
def test_bad_batch_file(tmp_path, content, message):
    make_cifar(tmp_path)
    _replace(tmp_path, "test_batch", content)
    provider = cifar(tmp_path)
    with pytest.raises(DataError, match=message) as info:
        provider.get_batch(6, train=False)
    assert str(tmp_path / "test_batch") in str(info.value)


def test_bad_training_batch_fails_mean(tmp_path):
    make_cifar(tmp_path)
    _replace(tmp_path, "data_batch_2", b"not a pickle at all")
    with pytest.raises(DataError, match="data_batch_2"):
        cifar(tmp_path).get_batch(6, train=False)


@pytest.mark.parametrize("options, message", [
    ({"inner_size": 33}, "--inner-size=33 does not fit"),
    ({"inner_size": -1}, "--inner-size=-1 does not fit"),
    ({"color_noise": -0.1}, "--color-noise must be >= 0"),
])
def test_bad_options(tmp_path, options, message):
    make_cifar(tmp_path)
    with pytest.raises(DataError, match=message):
        cifar(tmp_path, **options)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_pixel_is_blamed_on_its_own_batch(tmp_path, bad):
    """The training mean spreads one NaN of batch 2 into every batch; the error must name
    batch 2's file, not the first batch that happens to be trained."""
    batches = make_cifar(tmp_path)
    rows = batches[2][0].astype(np.float32)
    rows[3, 100] = bad
    (tmp_path / "data_batch_2").write_bytes(pickle.dumps({"data": rows,
                                                          "labels": batches[2][1]}))
    provider = cifar(tmp_path)
    with pytest.raises(DataError, match=r"data_batch_2: pixel data holds NaN or inf values "
                                        r"\(first in case 3\)"):
        provider.get_batch(1, train=True, epoch=1)
    with pytest.raises(DataError, match="data_batch_2"):
        cifar(tmp_path, scalar_mean=128.0).get_batch(2, train=False)
    cifar(tmp_path, scalar_mean=128.0).get_batch(1, train=False)  # batch 1 itself is fine
