"""Properties of the batch numbering and of the pixel sums."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from convnet.make_data.layout import first_test_batch, plan_batches
from convnet.data.photos.sources import DataSet, ImageRef
from convnet.make_data.statistics import PixelSums


def _data(train: int, test: int) -> DataSet:
    refs = [ImageRef(f"image{k}", f"image{k}") for k in range(train + test)]
    return DataSet(refs[:train], [k % 7 for k in range(train)], refs[train:],
                   [k % 7 for k in range(test)], [f"c{k}" for k in range(7)], [], "")


@given(st.integers(1, 2500), st.integers(0, 300), st.integers(1, 700), st.integers(0, 3))
@settings(max_examples=40, deadline=None)
def test_every_image_in_exactly_one_batch_numbered_as_the_original(train, test, batch_size,
                                                                     seed):
    data = _data(train, test)
    plans = plan_batches(data, batch_size, seed, shuffle_test=True)
    train_plans = [p for p in plans if p.train]
    test_plans = [p for p in plans if not p.train]
    assert [p.number for p in train_plans] == list(range(len(train_plans)))
    start = first_test_batch(len(train_plans))
    assert start % 1000 == 0 and start >= len(train_plans)
    assert [p.number for p in test_plans] == list(range(start, start + len(test_plans)))
    assert all(len(p.refs) == batch_size for p in plans[:len(train_plans) - 1])
    for plans_of_a_set, refs, labels in ((train_plans, data.train, data.train_labels),
                                         (test_plans, data.test, data.test_labels)):
        pairs = sorted((r.name, l) for p in plans_of_a_set for r, l in zip(p.refs, p.labels))
        assert pairs == sorted((r.name, l) for r, l in zip(refs, labels))
    assert plans == plan_batches(data, batch_size, seed, shuffle_test=True)


def test_the_original_ilsvrc_numbering():
    # 1,281,167 training images in batches of 3072: 0-417, validation from 1000
    assert -(-1_281_167 // 3072) == 418 and first_test_batch(418) == 1000
    assert first_test_batch(1000) == 1000 and first_test_batch(1001) == 2000


@given(st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=12), st.integers(1, 4))
@settings(max_examples=30, deadline=None)
def test_pixel_sums_do_not_depend_on_how_the_images_are_split(seeds, pieces):
    size = 6
    images = [np.random.default_rng(s).integers(0, 256, (size + s % 3, size + s % 5, 3),
                                                  dtype=np.uint8) for s in seeds]
    whole = PixelSums(size)
    for image in images:
        whole.add_image(image)
    merged = PixelSums(size)
    for start in range(pieces):
        part = PixelSums(size)
        for image in images[start::pieces]:
            part.add_image(image)
        merged.merge(part)
    assert merged.images == whole.images == len(images)
    for a, b in ((merged.per_pixel, whole.per_pixel), (merged.colour, whole.colour),
                 (merged.products, whole.products)):
        assert np.array_equal(a, b)
    centres = np.stack([image[(image.shape[0] - size) // 2:][:size,
                              (image.shape[1] - size) // 2:][:, :size] for image in images])
    pixels = centres.reshape(-1, 3).astype(np.int64)
    assert np.array_equal(whole.products, pixels.T @ pixels)
