"""make-data on a class-folder tree in every colour mode: the batches, the meta file
and the log are what the original's reader and ours expect."""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from convnet.data.safe_pickle import load_dict
from convnet.data.photos.convert import square_jpeg
from tests.support import ROOT
from tests.support.image_trees import load_batches, make_data, mixed_tree

SIZE = 16


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A mixed tree with a tenth of every class held out, made into batches."""
    root = tmp_path_factory.mktemp("tree")
    classes = mixed_tree(root / "src")
    code, _ = make_data(root / "src", root / "out", "--val-fraction", "0.3")
    assert code == 0
    return root, classes


def _decode(jpeg: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(jpeg)) as image:
        assert image.format == "JPEG" and image.mode == "RGB"
        return np.asarray(image)


def test_every_readable_image_is_stored_once_as_a_square_jpeg_with_its_label(made):
    root, classes = made
    expected = {}  # the conversion of each source image -> its label
    for label, name in enumerate(sorted(classes)):
        for file in classes[name]:
            expected[square_jpeg((root / "src" / name / file).read_bytes(), SIZE)] = label
    batches = load_batches(root / "out")
    stored = [(jpeg, labels) for parts in batches.values() for part in parts
              for jpeg, labels in zip(part["data"], part["labels"])]
    assert sorted(jpeg for jpeg, _ in stored) == sorted(expected)
    for jpeg, labels in stored:
        assert labels == [expected[jpeg]]
        assert _decode(jpeg).shape == (SIZE, SIZE, 3)


def test_batches_are_numbered_as_the_original_numbers_them(made):
    root, _ = made
    batches = load_batches(root / "out")
    # 12 image files (4, 5 and 3 per class), round(0.3 * n) of each held out (1, 2, 1):
    # 8 training images in two batches of 4 from 0, 4 test images in batch 1000, less
    # the unreadable one, which is in the one or the other
    sizes = {n: [len(part["data"]) for part in parts] for n, parts in batches.items()}
    assert sizes in ({0: [2, 2], 1: [2, 2], 1000: [2, 1]}, {0: [2, 2], 1: [2, 1], 1000: [2, 2]})


def test_the_meta_file_holds_what_the_original_reads(made):
    root, classes = made
    meta = load_dict(root / "out" / "batches.meta",
                     ("data_mean", "color_pca", "num_vis", "batch_size", "label_names"))
    assert meta["num_vis"] == 3 * SIZE * SIZE and meta["batch_size"] == 4
    assert meta["label_names"] == sorted(classes)
    assert meta["data_mean"].dtype == np.float32 and meta["data_mean"].shape == (3 * SIZE ** 2, 1)
    stdevs, vectors = meta["color_pca"]
    assert stdevs.shape == (3,) and vectors.shape == (3, 3)


def test_data_mean_and_color_pca_match_a_direct_computation(made):
    root, _ = made
    batches = load_batches(root / "out")
    images = np.stack([_decode(jpeg) for n, parts in batches.items() if n < 1000
                       for part in parts for jpeg in part["data"]]).astype(np.float64)
    meta = load_dict(root / "out" / "batches.meta", ("data_mean", "color_pca"))
    direct_mean = images.mean(axis=0).transpose(2, 0, 1).reshape(-1, 1)  # channel-major
    np.testing.assert_allclose(meta["data_mean"], direct_mean, rtol=1e-6)
    eigenvalues, eigenvectors = np.linalg.eigh(np.cov(images.reshape(-1, 3).T, bias=True))
    stdevs, vectors = meta["color_pca"]
    np.testing.assert_allclose(stdevs, np.sqrt(eigenvalues), rtol=1e-9)
    for k in range(3):  # an eigenvector's sign is free
        assert abs(abs(vectors[:, k] @ eigenvectors[:, k]) - 1) < 1e-9
    assert np.all(np.diff(stdevs) > 0)


def _opcodes(data: bytes) -> list[tuple[str, object]]:
    return [(op.name, arg) for op, arg, _ in pickletools.genops(data)]


def test_sub_batches_are_pickled_as_the_originals_python_2_wrote_them(made):
    root, _ = made
    for path in (root / "out").glob("data_batch_*/*"):
        data = path.read_bytes()
        opcodes = _opcodes(data)
        assert opcodes[0] == ("PROTO", 2), path
        assert not [op for op, _ in opcodes if "GLOBAL" in op or op == "REDUCE"], path
        strings = [arg for op, arg in opcodes if op in ("SHORT_BINSTRING", "BINSTRING")]
        loaded = pickle.loads(data, encoding="bytes")  # the keys are text, the JPEGs bytes
        assert loaded["data"] == [s.encode("latin1") for s in strings] and strings


def test_the_meta_file_is_a_protocol_2_pickle_of_arrays_and_plain_values(made):
    root, _ = made
    data = (root / "out" / "batches.meta").read_bytes()
    assert _opcodes(data)[0] == ("PROTO", 2)
    named = {arg for op, arg in _opcodes(data) if op == "GLOBAL"}
    assert named <= {"_codecs encode", "numpy.core.multiarray _reconstruct",
                     "numpy._core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}, named
    assert set(pickle.loads(data)) == {"data_mean", "color_pca", "num_vis", "batch_size",
                                       "label_names"}


def test_the_batches_read_as_the_originals_provider_reads_them(made):
    """The original's ImageDataProvider: the sub-batches of a folder in name order, one
    label picked from each image's list, the mean cut from a (3, S, S) view."""
    root, _ = made
    meta = pickle.loads((root / "out" / "batches.meta").read_bytes(), encoding="latin1")
    side = int(np.sqrt(meta["num_vis"] / 3))
    inner, border = 12, (side - 12) // 2
    mean_crop = meta["data_mean"].reshape((3, side, side))[
        :, border:border + inner, border:border + inner].reshape((1, 3 * inner ** 2))
    assert mean_crop.shape == (1, 3 * inner ** 2)
    folder = root / "out" / "data_batch_0"
    parts = [pickle.loads((folder / name).read_bytes(), encoding="latin1")
             for name in sorted(os.listdir(folder), key=lambda n: int(n.rsplit(".", 1)[1]))]
    labels = [label for part in parts for label in part["labels"]]
    picked = [(l[np.random.randint(len(l))] if len(l) > 0 else -1) for l in labels]
    assert all(0 <= p < len(meta["label_names"]) for p in picked)
    assert all(isinstance(jpeg, str) for part in parts for jpeg in part["data"])


def test_the_log_lists_the_unreadable_image_and_the_file_that_is_no_image(made):
    root, _ = made
    lines = (root / "out" / "make-data.log").read_text().splitlines()
    entries = [line.split("\t") for line in lines if not line.startswith("#")]
    assert [(e[0].startswith("data_batch_"), e[1].endswith("broken.jpg")) for e in entries
            if e[0] != "ignored"] == [(True, True)]
    assert [e[1].endswith("notes.txt") for e in entries if e[0] == "ignored"] == [True]


def test_the_command_on_two_processes_writes_the_same_bytes_as_one(made, tmp_path):
    root, _ = made
    proc = subprocess.run([sys.executable, "-m", "convnet.make_data", "--src-dir",
                           str(root / "src"), "--tgt-dir", str(tmp_path / "out"), "--size",
                           str(SIZE), "--batch-size", "4", "--sub-batch-size", "2",
                           "--val-fraction", "0.3", "--workers", "2"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
    assert proc.stdout.splitlines()[-1].endswith("--train-range 0-1 --test-range 1000")
    one = {p.relative_to(root / "out"): p.read_bytes() for p in (root / "out").rglob("*")
           if p.is_file()}
    two = {p.relative_to(tmp_path / "out"): p.read_bytes() for p in (tmp_path / "out").rglob("*")
           if p.is_file()}
    assert one == two  # the batches, the meta file, the log and the settings


def test_a_separate_test_folder_gives_the_test_batches(tmp_path):
    classes = mixed_tree(tmp_path / "train")
    mixed_tree(tmp_path / "test")
    code, _ = make_data(tmp_path / "train", tmp_path / "out", "--val-dir", str(tmp_path / "test"))
    assert code == 0
    batches = load_batches(tmp_path / "out")
    readable = sum(len(files) for files in classes.values())
    train = sum(len(p["data"]) for n, parts in batches.items() if n < 1000 for p in parts)
    test = sum(len(p["data"]) for n, parts in batches.items() if n >= 1000 for p in parts)
    assert (train, test) == (readable, readable)
    assert min(n for n in batches if n >= 1000) == 1000


def test_keep_borders_stores_whole_images_and_the_mean_of_their_centres(tmp_path):
    classes = mixed_tree(tmp_path / "src")
    assert make_data(tmp_path / "src", tmp_path / "out", "--keep-borders")[0] == 0
    images = [_decode(jpeg) for parts in load_batches(tmp_path / "out").values()
              for part in parts for jpeg in part["data"]]
    assert len(images) == sum(len(files) for files in classes.values())
    assert all(min(image.shape[:2]) == SIZE for image in images)
    assert any(image.shape[0] != image.shape[1] for image in images)
    centres = [image[(image.shape[0] - SIZE) // 2:][:SIZE, (image.shape[1] - SIZE) // 2:][:, :SIZE]
               for image in images]
    meta = load_dict(tmp_path / "out" / "batches.meta", ("data_mean", "num_vis"))
    assert meta["num_vis"] == 3 * SIZE * SIZE
    np.testing.assert_allclose(meta["data_mean"], np.mean(centres, axis=0).transpose(2, 0, 1)
                               .reshape(-1, 1), rtol=1e-6)
