"""Stored images: the float32 images a batch becomes equal the float pipeline's, bitwise.

Providers serve training images as stored (uint8 windows with the draws of their
augmentation, :class:`~convnet.kernels.images.StoredImages`) and the device makes them
float.  What is compared here: for a given seed, epoch and batch, the float32 images
of ``get_batch`` and of ``load_batch`` made float on the host, against the float
pipeline every provider ran before (the whole image made float32, the mean subtracted,
``--inner-size`` windows cut and mirrored, colour noise added, scaled), kept below as
the reference: same crops, mirrors and colour noise, bit for bit, for the ``image``
provider (with and without ``--skip-bad-images`` leaving a case out), ``cifar``,
``digits`` and ``dummy`` data, in training and in tests.
"""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest

from convnet.data import DataOptions, make_provider
from convnet.data.augment import centre_windows
from convnet.kernels.images import StoredImages, images_to_float
from numpy.lib.stride_tricks import sliding_window_view
from tests.data.image.test_provider import pillow_decode, stored
from tests.data.test_cifar import make_cifar
from tests.support.jpeg_batches import write_image_set, write_pickle


# ---------------------------------------------------------------- the reference

def previous_crops(images, inner, rng):
    """The random crops and mirrors of the float pipeline (float32 images)."""
    n, size = images.shape[0], images.shape[-1]
    oy = rng.integers(0, size - inner + 1, n)
    ox = rng.integers(0, size - inner + 1, n)
    flip = rng.integers(0, 2, n).astype(bool)
    out = sliding_window_view(images, (inner, inner), axis=(2, 3))[np.arange(n), :, oy, ox]
    out[flip] = out[flip][..., ::-1]
    return out


def previous_pipeline(provider, raw, batch_id, train, epoch, image_noise=False):
    """Float images as every provider served them before stored images."""
    images = raw.astype(np.float32)
    images -= provider._mean_value()
    inner, scale = provider._inner, provider.options.color_noise
    if train:
        rng = np.random.default_rng([provider.options.seed, 1, epoch, batch_id])
        if inner:
            images = previous_crops(images, inner, rng)
        if scale > 0 and image_noise:  # the image provider: the original's noise and scale
            meta = provider.meta
            shift = (rng.standard_normal((len(images), 3)) * meta.pca_stdevs) \
                @ meta.pca_vectors.T
            images += (scale * shift).astype(np.float32)[:, :, None, None]
            images *= np.float32(1.0 / (1.0 + scale))
        elif scale > 0:
            shift = scale * rng.standard_normal((len(images), images.shape[1])) \
                @ provider._colour_basis().T
            images += shift.astype(images.dtype)[:, :, None, None]
    elif inner:
        start = (images.shape[-1] - inner) // 2
        images = images[:, :, start:start + inner, start:start + inner]
    return np.ascontiguousarray(images, dtype=np.float32)


def assert_same_bits(got, want):
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# ---------------------------------------------------------------- the providers

@pytest.fixture(scope="module")
def image_set(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stored")
    write_image_set(folder, [0, 1], cases=9, size=16)
    return folder


def decoded(folder, batch_id):
    return np.stack([pillow_decode(j) for j in stored(folder, batch_id)[0]]).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("inner, noise, train", [(12, 0.3, True), (16, 0.0, True),
                                                 (0, 0.2, True), (12, 0.3, False)])
def test_image_batches_are_the_float_pipelines_bitwise(image_set, inner, noise, train):
    p = make_provider("image", str(image_set), DataOptions(
        train_range=[0], test_range=[1], inner_size=inner, color_noise=noise, seed=3,
        decode_threads=2))
    want = previous_pipeline(p, decoded(image_set, 0), 0, train, 4, image_noise=True)
    column = p.load_batch(0, train=train, epoch=4)[0]
    assert isinstance(column, StoredImages) and column.pixels.dtype == np.uint8
    assert column.channels_last and column.shape == want.shape
    assert_same_bits(column.to_float(), want)
    assert_same_bits(p.get_batch(0, train=train, epoch=4)[0], want)
    p.close()


def test_skipping_a_bad_image_draws_the_crops_of_the_cases_left(image_set, tmp_path):
    shutil.copytree(image_set, tmp_path / "set")
    part = tmp_path / "set" / "data_batch_0" / "data_batch_0.0"
    content = pickle.loads(part.read_bytes())
    content["data"][2] = content["data"][2][:40]  # truncated
    write_pickle(part, content)
    p = make_provider("image", str(tmp_path / "set"), DataOptions(
        train_range=[0], test_range=[1], inner_size=12, color_noise=0.3, seed=3,
        skip_bad_images=True))
    got = p.get_batch(0, train=True, epoch=2)[0]
    raw = np.delete(decoded(image_set, 0), 2, axis=0)
    assert_same_bits(got, previous_pipeline(p, raw, 0, True, 2, image_noise=True))
    assert len(p.skipped) == 1
    p.close()


def test_cifar_digits_and_dummy_batches_are_the_float_pipelines_bitwise(tmp_path):
    make_cifar(tmp_path / "cifar")
    cases = [("cifar", str(tmp_path / "cifar"), dict(inner_size=24, color_noise=0.2), 2),
             ("digits", None, dict(inner_size=6, color_noise=0.1), 3),
             ("dummy", None, dict(inner_size=8, color_noise=0.2, cases_per_batch=20,
                                  data_dims={0: (3, 12, 12)}), 1),
             ("dummy", None, dict(cases_per_batch=20, data_dims={0: (3, 12, 12)},
                                  scalar_mean=0.5), 1)]
    for name, path, options, batch_id in cases:
        p = make_provider(name, path, DataOptions(seed=5, **options))
        raw = p.raw_batch(batch_id)[0]
        for train in (True, False):
            got = p.get_batch(batch_id, train=train, epoch=3)[0]
            assert_same_bits(got, previous_pipeline(p, raw, batch_id, train, 3))
        stored = p.load_batch(batch_id, True, 3)[0]
        assert stored.pixels.dtype == (np.uint8 if name == "cifar" else np.float32)
        # one mean array for every batch: a device uploads it once (it keeps it by identity)
        assert p.load_batch(batch_id, False, 4)[0].mean is stored.mean


# ---------------------------------------------------------------- the kernel

def test_the_kernel_reads_either_layout_and_mirrors_the_mean_window_with_the_pixels():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (4, 3, 5, 6), dtype=np.uint8)
    mean = rng.random((3, 8, 9), dtype=np.float32) * 100
    offsets = np.array([[0, 0], [3, 3], [1, 2], [2, 0]], np.int32)
    flips = np.array([False, True, True, False])
    shifts = rng.standard_normal((4, 3)).astype(np.float32)
    got = images_to_float(pixels, mean, offsets, flips, shifts, np.float32(0.5), False)
    for n, ((top, left), flip) in enumerate(zip(offsets, flips)):
        case = pixels[n].astype(np.float32) - mean[:, top:top + 5, left:left + 6]
        case = (case[..., ::-1] if flip else case) + shifts[n][:, None, None]
        np.testing.assert_array_equal(got[n], case * np.float32(0.5))
    last = images_to_float(np.ascontiguousarray(pixels.transpose(0, 2, 3, 1)), mean, offsets,
                           flips, shifts, np.float32(0.5), True)
    np.testing.assert_array_equal(last, got)
    every = images_to_float(pixels, mean, offsets, np.ones(4, bool), None, None, False)
    np.testing.assert_array_equal(
        every[0], (pixels[0].astype(np.float32) - mean[:, :5, :6])[..., ::-1])
    assert images_to_float(pixels[:0], mean, offsets[:0], flips[:0], None, None,
                           False).shape == (0, 3, 5, 6)
    whole = StoredImages(pixels, np.asarray(np.float32(2)), *centre_windows(4, 5, 5))
    np.testing.assert_array_equal(whole.to_float(), pixels - np.float32(2))
    assert whole[1:3].shape == (2, 3, 5, 6) and len(whole[1:3]) == 2
