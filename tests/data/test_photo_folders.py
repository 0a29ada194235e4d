"""``--data-provider image`` on a folder of class folders: the pixels make-data's batches
would give, straight from the photos."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.data import DataOptions, make_provider
from convnet.data.photos.provider import PhotoFolderProvider
from convnet.errors import DataError
from tests.support.image_trees import image_bytes, make_data, mixed_tree


def _cases(provider, batches):
    """Every case of ``batches`` as (label, pixel bytes), sorted: the same multiset
    whatever order the batches hold them in."""
    minus_mean = provider.test_cases_from_pixels(np.zeros((1, 3, 16, 16), np.float32))
    rows = []
    for batch in batches:
        images, labels = provider.get_batch(batch, train=False)[:2]
        pixels = np.rint(images - minus_mean).astype(np.uint8)
        rows += [(int(label), image.tobytes()) for image, label in zip(pixels, labels[:, 0])]
    return sorted(rows)


def test_a_class_tree_serves_what_make_data_and_the_image_provider_serve(tmp_path):
    mixed_tree(tmp_path / "photos")
    options = DataOptions(data_path=str(tmp_path / "photos"), image_size=16, seed=3,
                          skip_bad_images=True)
    direct = make_provider("image", options=options)
    assert isinstance(direct, PhotoFolderProvider)
    assert make_data(tmp_path / "photos", tmp_path / "batches", "--val-fraction", "0.2",
                     "--seed", "3")[0] == 0
    batches = make_provider("image", options=DataOptions(data_path=str(tmp_path / "batches")))
    try:
        assert direct.label_names == batches.label_names == ["cat", "dog", "emu"]
        assert direct.data_dims == {0: (3, 16, 16), 1: (1,)}
        assert batches.data_dims[0] == (3, 16, 16)
        assert len(direct.test_batches) == 1 and direct.num_cases(1000) == 2
        assert _cases(direct, direct.train_batches) == _cases(batches, batches.train_batches)
        assert _cases(direct, direct.test_batches) == _cases(batches, batches.test_batches)
        assert [name.endswith("dog/broken.jpg") for name in direct.skipped] == [True]
    finally:
        direct.close()
        batches.close()


def test_train_and_val_folders_are_the_split(tmp_path):
    for part, count in (("train", 3), ("val", 1)):
        for label in ("a", "b"):
            for k in range(count):
                path = tmp_path / "photos" / part / label / f"{k}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(image_bytes(24, 20, k + 10 * (label == "b")))
    provider = make_provider("image", options=DataOptions(data_path=str(tmp_path / "photos"),
                                                          image_size=8))
    try:
        assert provider.train_batches == [0] and provider.test_batches == [1000]
        assert provider.num_cases(0) == 6 and provider.num_cases(1000) == 2
        assert provider.get_batch(0, train=True, epoch=1)[0].shape == (6, 3, 8, 8)
    finally:
        provider.close()


def test_an_unreadable_photo_names_its_file(tmp_path):
    mixed_tree(tmp_path / "photos")
    provider = make_provider("image", options=DataOptions(data_path=str(tmp_path / "photos"),
                                                          image_size=16))
    try:
        with pytest.raises(DataError, match=r"dog/broken.jpg: .*--skip-bad-images"):
            for batch in provider.train_batches + provider.test_batches:
                provider.get_batch(batch, train=False)
    finally:
        provider.close()


def test_other_providers_on_a_class_tree_point_to_the_image_provider(tmp_path):
    mixed_tree(tmp_path / "photos")
    with pytest.raises(DataError, match="a folder of class folders, not 'cifar' batches: "
                                        "train from it with --data-provider image"):
        make_provider("cifar", options=DataOptions(data_path=str(tmp_path / "photos")))


def test_an_unreadable_folder_is_left_to_the_provider_asked_for(tmp_path, monkeypatch):
    """Whether ``--data-path`` is a class tree is asked of every provider's folder; one
    that cannot be listed is not taken for a tree (the provider then says what is
    wrong), rather than the question ending the run in a traceback."""
    from convnet.data.photos import provider

    (tmp_path / "cats").mkdir()
    assert provider.is_class_tree(str(tmp_path))

    def unreadable(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(provider.os, "scandir", unreadable)
    assert not provider.is_class_tree(str(tmp_path))
