"""The ``image`` provider on generated JPEG batches: format, mean, labels, augmentation."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from PIL import Image

from convnet.data import BatchPrefetcher, DataOptions, make_provider
from convnet.errors import DataError
from tests.support.jpeg_batches import (class_images, encode_jpeg, write_batch, write_image_set,
                                        write_meta)

SIZE = 16


def provider(folder, **options):
    options.setdefault("train_range", [0, 1])
    options.setdefault("test_range", [1000])
    return make_provider("image", str(folder), DataOptions(**options))


def pillow_decode(jpeg: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))


@pytest.fixture(scope="module")
def image_set(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    write_image_set(folder, [0, 1, 1000], cases=10, size=SIZE)
    return folder


@pytest.fixture(scope="module")
def multi_label_set(tmp_path_factory):
    folder = tmp_path_factory.mktemp("multi")
    write_image_set(folder, [0, 1, 1000], cases=40, size=SIZE, multi_label=True)
    return folder


def stored(folder, batch_id):
    """The JPEGs and labels of a batch, read back with plain pickle (the test's own files)."""
    path = folder / f"data_batch_{batch_id}"
    parts = sorted(path.iterdir(), key=lambda p: int(p.name.rsplit(".", 1)[1]))
    dicts = [pickle.loads(p.read_bytes()) for p in parts]
    return [j for d in dicts for j in d["data"]], [l for d in dicts for l in d["labels"]]


def test_serves_the_decoded_images_minus_the_meta_mean_and_the_labels(image_set):
    jpegs, labels = stored(image_set, 0)
    images, column = provider(image_set).get_batch(0, train=False)
    expected = np.stack([pillow_decode(j) for j in jpegs]).transpose(0, 3, 1, 2) - 120.0
    assert images.shape == (10, 3, SIZE, SIZE) and images.dtype == np.float32
    assert images.flags.c_contiguous
    np.testing.assert_array_equal(images, expected.astype(np.float32))
    np.testing.assert_array_equal(column.ravel(), labels)


def test_sub_batches_are_joined_in_the_order_of_their_numbers_and_one_pickle_reads_the_same(
        tmp_path):
    """Twelve sub-batches of one case: by name .10 and .11 would come before .2."""
    labels = np.arange(12) % 3
    jpegs = [encode_jpeg(p) for p in class_images(labels, SIZE, 0)]
    write_meta(tmp_path / "split", SIZE, 3)
    write_meta(tmp_path / "whole", SIZE, 3)
    write_batch(tmp_path / "split", 0, jpegs, labels.tolist(), sub_batch=1)
    write_batch(tmp_path / "whole", 0, jpegs, labels.tolist(), sub_batch=None)
    split = provider(tmp_path / "split", train_range=[0], test_range=[0]).get_batch(0, False)
    whole = provider(tmp_path / "whole", train_range=[0], test_range=[0]).get_batch(0, False)
    for a, b in zip(split, whole):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(split[1].ravel(), labels)


def test_python2_strings_are_read_as_the_same_bytes(tmp_path):
    labels = [0, 1, 2]
    jpegs = [encode_jpeg(p) for p in class_images(np.array(labels), SIZE, 0)]
    write_meta(tmp_path / "a", SIZE, 3)
    write_meta(tmp_path / "b", SIZE, 3)
    write_batch(tmp_path / "a", 0, jpegs, labels, sub_batch=None)
    write_batch(tmp_path / "b", 0, [j.decode("latin1") for j in jpegs], labels, sub_batch=None)
    a = provider(tmp_path / "a", train_range=[0], test_range=[0]).get_batch(0, False)[0]
    b = provider(tmp_path / "b", train_range=[0], test_range=[0]).get_batch(0, False)[0]
    np.testing.assert_array_equal(a, b)


def test_num_cases_and_dims(image_set):
    p = provider(image_set, inner_size=12)
    assert p.num_cases(1000) == 10
    assert p.data_dims == {0: (3, 12, 12), 1: (1,)}  # ints: no label matrix
    assert p.image_shape == (3, SIZE, SIZE) and p.num_classes == 3


def test_ranges_naming_missing_batches_are_refused_like_the_other_providers(image_set):
    with pytest.raises(DataError, match=r"the train range names batch 2 .*data_batch_2.*"
                                        r"available batches: 0-1,1000"):
        provider(image_set, train_range=[0, 1, 2])


def test_augmentation_depends_only_on_seed_epoch_and_batch(image_set):
    """Decoding threads, prefetching and the order of requests change nothing."""
    one = provider(image_set, inner_size=12, color_noise=0.2, decode_threads=1)
    three = provider(image_set, inner_size=12, color_noise=0.2, decode_threads=3)
    first = one.get_batch(1, train=True, epoch=2)
    three.get_batch(0, train=True, epoch=5)
    with BatchPrefetcher(three, [0, 1], train=True, epoch=2) as loader:
        again = dict(loader)[1]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    other = one.get_batch(1, train=True, epoch=3)[0]
    assert not np.array_equal(first[0], other)
    one.close(), three.close()


def test_test_mode_is_the_centre_crop_and_multiview_gives_ten_views(image_set):
    p = provider(image_set, inner_size=12, multiview_test=True)
    whole = provider(image_set).get_batch(1000, train=False)[0]
    centre = p.get_batch(1000, train=False, epoch=7)[0]
    np.testing.assert_array_equal(centre, whole[:, :, 2:14, 2:14])
    views = p.get_test_views(1000)[0]
    assert views.shape == (10, 10, 3, 12, 12)
    np.testing.assert_array_equal(views[0], centre)
    np.testing.assert_array_equal(views[5], centre[..., ::-1])
    np.testing.assert_array_equal(views[1], whole[:, :, :12, :12])


def test_test_cases_from_pixels_match_the_test_batch(image_set):
    jpegs, _ = stored(image_set, 1000)
    raw = np.stack([pillow_decode(j) for j in jpegs]).transpose(0, 3, 1, 2)
    for multiview in (False, True):
        p = provider(image_set, inner_size=12, multiview_test=multiview)
        served = p.get_test_views(1000)[0] if multiview else p.get_batch(1000, False)[0]
        np.testing.assert_array_equal(p.test_cases_from_pixels(raw), served)
    with pytest.raises(DataError, match=r"should be N x 3x16x16, found \d+x3x8x8"):
        p.test_cases_from_pixels(raw[:, :, :8, :8])


def test_colour_noise_is_one_shift_per_case_and_channel_then_scaled_as_the_original(image_set):
    scale = 0.5
    p = provider(image_set, color_noise=scale)
    centred = provider(image_set).get_batch(0, train=False)[0]
    noisy = p.get_batch(0, train=True, epoch=1)[0]
    shift = noisy * (1 + scale) - centred  # the original scales by 1 / (1 + s) after adding
    per_case = shift.reshape(10, 3, -1)
    np.testing.assert_allclose(per_case, per_case[:, :, :1].repeat(SIZE * SIZE, axis=2),
                               atol=1e-3)
    colour = per_case[:, :, 0] / scale  # = (z * stdevs) @ vectors.T
    z = colour @ p.meta.pca_vectors / p.meta.pca_stdevs
    assert np.abs(z).max() < 6 and z.std() > 0.3  # standard normal draws along each axis


def test_colour_noise_needs_color_pca(tmp_path):
    write_image_set(tmp_path, [0, 1], cases=2, size=SIZE)
    write_meta(tmp_path, SIZE, 3, color_pca=None)
    with pytest.raises(DataError, match="--color-noise needs 'color_pca'"):
        provider(tmp_path, train_range=[0], test_range=[1], color_noise=0.1)
    provider(tmp_path, train_range=[0], test_range=[1])  # without noise it is not needed


def test_label_lists_give_a_random_label_per_case_and_the_label_matrix(multi_label_set):
    p = provider(multi_label_set)
    _, stored_labels = stored(multi_label_set, 0)
    assert p.data_dims[2] == (3,)
    images, column, matrix = p.get_batch(0, train=True, epoch=1)
    expected = np.zeros((40, 3), np.float32)
    for case, ids in enumerate(stored_labels):
        expected[case, ids] = 1
        assert int(column[case, 0]) in ids
    np.testing.assert_array_equal(matrix, expected)
    picks = np.stack([p.get_batch(0, train=True, epoch=e)[1].ravel() for e in range(1, 9)])
    first = np.array([ids[0] for ids in stored_labels])
    assert (picks == first).any() and (picks != first).any()  # both labels are drawn
    np.testing.assert_array_equal(picks[0], p.get_batch(0, train=True, epoch=1)[1].ravel())
    test_a = p.get_batch(1000, train=False, epoch=1)[1]
    np.testing.assert_array_equal(test_a, p.get_batch(1000, train=False, epoch=4)[1])
    views = p.get_test_views(1000)
    assert len(views) == 3 and views[2].shape == (40, 3)


def test_label_offset_is_added(tmp_path):
    write_image_set(tmp_path, [0, 1], cases=6, size=SIZE)
    plain = provider(tmp_path, train_range=[0], test_range=[1]).get_batch(0, False)[1]
    for batch_id in (0, 1):
        path = tmp_path / f"data_batch_{batch_id}"
        for part in path.iterdir():
            d = pickle.loads(part.read_bytes())
            d["labels"] = [l + 1 for l in d["labels"]]
            part.write_bytes(pickle.dumps(d, protocol=2))
    write_meta(tmp_path, SIZE, 3, label_offset=-1)
    shifted = provider(tmp_path, train_range=[0], test_range=[1]).get_batch(0, False)[1]
    np.testing.assert_array_equal(plain, shifted)


def test_images_keeping_their_borders_are_centre_cropped_to_the_stored_size(tmp_path):
    """make-data can keep the borders: short side S, long side longer."""
    wide = class_images(np.array([0, 1]), 24, 0)[:, :SIZE]  # 16 rows x 24 columns
    write_meta(tmp_path, SIZE, 3)
    write_batch(tmp_path, 0, [encode_jpeg(w) for w in wide], [0, 1], sub_batch=None)
    p = provider(tmp_path, train_range=[0], test_range=[0], scalar_mean=0)
    images = p.get_batch(0, train=False)[0]
    decoded = np.stack([pillow_decode(encode_jpeg(w)) for w in wide])
    np.testing.assert_array_equal(images, decoded[:, :, 4:20].transpose(0, 3, 1, 2))


def test_scalar_mean_replaces_the_meta_mean(image_set):
    a = provider(image_set).get_batch(0, False)[0]
    b = provider(image_set, scalar_mean=100.0).get_batch(0, False)[0]
    np.testing.assert_allclose(b - a, 20.0)
