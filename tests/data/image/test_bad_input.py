"""Untrusted JPEG batches and meta files: each bad input gets its own error, naming where."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
import simplejpeg

from convnet.data import DataOptions, make_provider
from convnet.data.safe_pickle import load_pickle
from convnet.errors import DataError
from tests.support.jpeg_batches import (class_images, encode_jpeg, write_batch, write_image_set,
                                        write_meta)

SIZE = 16


def provider(folder, **options):
    options.setdefault("train_range", [0])
    options.setdefault("test_range", [1])
    return make_provider("image", str(folder), DataOptions(**options))


def with_sof_size(jpeg: bytes, height: int, width: int) -> bytes:
    """The JPEG with its SOF header declaring another size (the data left as it is)."""
    at = jpeg.index(b"\xff\xc0") + 5  # marker, length (2), precision (1)
    return jpeg[:at] + struct.pack(">HH", height, width) + jpeg[at + 4:]


def set_with(tmp_path, bad: bytes, case: int = 2):
    """Batches 0 and 1 of 4 cases in sub-batches of 2; batch 0's ``case`` replaced by ``bad``."""
    labels = np.arange(4) % 3
    jpegs = [encode_jpeg(p) for p in class_images(labels, SIZE, 0)]
    write_meta(tmp_path, SIZE, 3)
    write_batch(tmp_path, 1, jpegs, labels.tolist(), sub_batch=2)
    jpegs[case] = bad
    write_batch(tmp_path, 0, jpegs, labels.tolist(), sub_batch=2)
    return tmp_path / "data_batch_0" / "data_batch_0.1"


def good_jpeg(size=SIZE) -> bytes:
    return encode_jpeg(class_images(np.array([1]), size, 3)[0])


@pytest.mark.parametrize("bad, words", [
    (good_jpeg()[:-40], "cannot decode the JPEG"),
    (good_jpeg()[:len(good_jpeg()) // 4], "not a readable JPEG"),
    (b"\x00" * 300, "not a readable JPEG"),
    (b"", "not a readable JPEG"),
])
def test_a_truncated_or_corrupt_jpeg_names_the_file_and_case(tmp_path, bad, words):
    where = set_with(tmp_path, bad, case=2)
    with pytest.raises(DataError) as caught:
        provider(tmp_path).get_batch(0, train=True, epoch=1)
    message = str(caught.value)
    assert message.startswith(f"{where}, case 0: {words}"), message
    assert "--skip-bad-images" in message


def test_skip_bad_images_leaves_them_out_and_counts_them(tmp_path):
    where = set_with(tmp_path, b"\x00" * 300, case=3)
    p = provider(tmp_path, skip_bad_images=True)
    good = provider(tmp_path, test_range=[1]).get_batch(1, train=False)
    images, labels = p.get_batch(0, train=False)
    assert len(images) == 3 and p.num_cases(0) == 3
    np.testing.assert_array_equal(images, good[0][:3])
    np.testing.assert_array_equal(labels, good[1][:3])
    p.get_batch(0, train=True, epoch=2)  # the same image again: counted once
    assert list(p.skipped) == [f"{where}, case 1"]


def test_a_batch_with_a_bad_image_is_decoded_again_only_the_first_time(tmp_path, monkeypatch):
    """The first time a batch is served its good images are decoded twice (the windows
    are drawn for the cases left); later epochs leave the bad one out first, and serve
    what a fresh provider would."""
    set_with(tmp_path, b"\x00" * 300, case=3)
    decoded = []
    real = simplejpeg.decode_jpeg
    monkeypatch.setattr(simplejpeg, "decode_jpeg",
                        lambda data, *a, **k: decoded.append(1) or real(data, *a, **k))
    p = provider(tmp_path, skip_bad_images=True, decode_threads=1)
    p.get_batch(0, train=True, epoch=1)
    first = len(decoded)
    again = p.get_batch(0, train=True, epoch=2)
    assert len(decoded) - first == 3  # the three good images, once
    fresh = provider(tmp_path, skip_bad_images=True, decode_threads=1)
    for mine, theirs in zip(again, fresh.get_batch(0, train=True, epoch=2)):
        np.testing.assert_array_equal(mine, theirs)
    assert len(p.skipped) == 1


def test_a_batch_with_no_readable_image_is_an_error_even_when_skipping(tmp_path):
    write_meta(tmp_path, SIZE, 3)
    write_batch(tmp_path, 0, [b"junk", b"junk"], [0, 1], sub_batch=None)
    write_batch(tmp_path, 1, [good_jpeg()], [0], sub_batch=None)
    with pytest.raises(DataError, match="none of its 2 images can be decoded"):
        provider(tmp_path, skip_bad_images=True).get_batch(0, train=False)


def test_absurd_header_dimensions_are_refused_before_decoding(tmp_path, monkeypatch):
    where = set_with(tmp_path, with_sof_size(good_jpeg(), 60000, 60000), case=2)
    decoded = []
    real = simplejpeg.decode_jpeg
    monkeypatch.setattr(simplejpeg, "decode_jpeg",
                        lambda data, *a, **k: decoded.append(len(data)) or real(data, *a, **k))
    with pytest.raises(DataError, match=rf"^{where}, case 0: the JPEG header declares "
                                        r"60000x60000 pixels, but the batches hold 16x16 "
                                        r"images .*refused before decoding"):
        provider(tmp_path, decode_threads=1).get_batch(0, train=False)
    assert len(decoded) == 3  # the three good images only


def test_an_image_of_another_size_than_num_vis_says_is_an_error(tmp_path):
    where = set_with(tmp_path, good_jpeg(20), case=1)
    with pytest.raises(DataError, match=rf"{where.parent / 'data_batch_0.0'}, case 1: the JPEG "
                                        r"header declares 20x20 pixels, but the batches hold "
                                        r"16x16"):
        provider(tmp_path).get_batch(0, train=False)


def test_safe_unpickler_reads_lists_of_bytes_and_of_label_lists_and_nothing_more(tmp_path):
    path = tmp_path / "batch"
    batch = {"data": [b"\xff\xd8\xff", b"", b"\x00"], "labels": [[1, 2], [0], 1]}
    for protocol in range(6):
        path.write_bytes(pickle.dumps(batch, protocol=protocol))
        assert load_pickle(path) == batch
    path.write_bytes(pickle.dumps({"data": [bytearray(b"\xff\xd8")], "labels": [0]}, protocol=2))
    with pytest.raises(DataError, match="refuses to load code: the pickle names "
                                        "'__builtin__.bytearray'"):
        load_pickle(path)
    # bytes(N) would allocate N zero bytes: only bytes() (an empty string) is allowed
    path.write_bytes(b"\x80\x02c__builtin__\nbytes\nJ\x00\xe1\xf5\x05\x85R.")
    with pytest.raises(DataError, match="bytes.. with arguments"):
        load_pickle(path)
    path.write_bytes(pickle.dumps({"data": [bytearray(b"\xff\xd8")], "labels": [0]}, protocol=2))
    with pytest.raises(DataError, match="refuses to load code: the pickle names "
                                        "'__builtin__.bytearray'"):
        load_pickle(path)


def test_data_that_is_not_a_list_of_jpeg_strings_is_refused(tmp_path):
    write_meta(tmp_path, SIZE, 3)
    write_batch(tmp_path, 1, [good_jpeg()], [0], sub_batch=None)
    write_batch(tmp_path, 0, [good_jpeg(), 7], [0, 1], sub_batch=None)
    with pytest.raises(DataError, match=r"data_batch_0, case 1: 'data' should hold JPEG byte "
                                        r"strings, found int"):
        provider(tmp_path).get_batch(0, train=False)
    write_batch(tmp_path, 0, [good_jpeg()], [0, 1], sub_batch=None)
    with pytest.raises(DataError, match=r"'labels' should be a list .* for 1 images; found 2 "
                                        r"labels"):
        provider(tmp_path).get_batch(0, train=False)


@pytest.mark.parametrize("labels, message", [
    ([0, 3], r"data_batch_0, case 1: label 3 is not a class index in 0..2 \(batches.meta has "
             r"3 label_names\)"),
    ([[0], [1, 5]], r"data_batch_0, case 1: label 5 is not a class index in 0..2"),
    ([[0], []], r"data_batch_0, case 1: the image has an empty list of labels"),
    ([0, "cat"], r"data_batch_0, case 1: label 'cat' is not a label id"),
    ([0, 1.5], r"data_batch_0, case 1: label 1.5 is not a label id"),
])
def test_bad_labels_name_the_case(tmp_path, labels, message):
    write_meta(tmp_path, SIZE, 3)
    write_batch(tmp_path, 1, [good_jpeg()], [0], sub_batch=None)
    write_batch(tmp_path, 0, [good_jpeg(), good_jpeg()], labels, sub_batch=None)
    with pytest.raises(DataError, match=message):
        provider(tmp_path).get_batch(0, train=False)


def test_a_label_offset_that_moves_labels_out_of_range_is_named(tmp_path):
    write_image_set(tmp_path, [0, 1], cases=3, size=SIZE)
    write_meta(tmp_path, SIZE, 3, label_offset=2)
    with pytest.raises(DataError, match=r"label [2-4] \([0-2] \+ label_offset 2\) is not a "
                                        r"class index"):
        provider(tmp_path).get_batch(0, train=False)


@pytest.mark.parametrize("changes, message", [
    ({"num_vis": 3 * 16 * 15}, r"num_vis=720 is not 3 x S x S"),
    ({"data_mean": np.zeros((3 * 15 * 15, 1))}, r"'data_mean' should hold num_vis=768 numbers "
                                                r"\(a flat column or 3x16x16\), found shape "
                                                r"675x1"),
    ({"data_mean": np.zeros((16, 16, 3))}, r"'data_mean' should hold .* found shape 16x16x3"),
    ({"data_mean": np.full(768, np.nan)}, r"'data_mean' holds NaN"),
    ({"color_pca": (np.ones(3), np.eye(4))}, r"'color_pca' should hold 3 standard deviations "
                                             r"and a 3x3 matrix of eigenvectors, found shapes 3 "
                                             r"and 4x4"),
    ({"color_pca": np.ones(3)}, r"'color_pca' should be \(standard deviations, eigenvectors\)"),
    ({"label_offset": 0.5}, r"'label_offset' should be a whole number"),
    ({"batch_size": -3}, r"'batch_size' should be a positive whole number"),
    ({"label_names": []}, r"'label_names' should be a non-empty list"),
])
def test_a_meta_file_that_disagrees_with_itself_gets_a_specific_error(tmp_path, changes,
                                                                      message):
    write_image_set(tmp_path, [0, 1], cases=2, size=SIZE)
    write_meta(tmp_path, SIZE, 3, **changes)
    with pytest.raises(DataError, match=r"batches.meta: " + message):
        provider(tmp_path)


def test_a_meta_size_that_disagrees_with_the_batches_names_the_first_image(tmp_path):
    write_image_set(tmp_path, [0, 1], cases=2, size=SIZE)
    write_meta(tmp_path, 8, 3)  # batches of 16 x 16 images, a meta file of 8 x 8
    with pytest.raises(DataError, match=r"data_batch_0.0, case 0: the JPEG header declares "
                                        r"16x16 pixels, but the batches hold 8x8 images "
                                        r"\(num_vis in batches.meta\)"):
        provider(tmp_path).get_batch(0, train=True, epoch=1)


def test_a_batch_folder_without_sub_batches_is_not_a_batch(tmp_path):
    write_image_set(tmp_path, [0], cases=2, size=SIZE)
    (tmp_path / "data_batch_1").mkdir()
    (tmp_path / "data_batch_1" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=r"the test range names batch 1 .*available batches: 0"):
        provider(tmp_path)


def test_a_batch_folder_without_sub_batches_is_named_as_such(tmp_path):
    """An interrupted copy leaves ``data_batch_0/`` empty: not 'a folder, not a regular
    file' (a batch may be a folder), but a folder without the sub-batch files."""
    set_with(tmp_path, encode_jpeg(class_images(np.array([0]), SIZE, 0)[0]))
    for sub in (tmp_path / "data_batch_0").iterdir():
        sub.unlink()
    with pytest.raises(DataError, match=r"data_batch_0\), which is a folder without "
                                        r"sub-batch files \(data_batch_0\.0, \.\.\.\)"):
        provider(tmp_path)
