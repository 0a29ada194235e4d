"""A real photo tree holds more than photos: FIFOs, huge or sparse files, links to
devices, link loops, images that decode to far more than their file.  make-data reads
only regular files of a bounded size, reads every folder once, bounds an image's
decoded size before decoding it, and lists whatever it left out with the reason."""

from __future__ import annotations

import io
import os
import tracemalloc

import numpy as np
import pytest
from PIL import Image, ImageFile

from convnet.data.photos import convert
from convnet.data.photos.convert import UnreadableImage, eight_bit_grey, square_jpeg
from convnet.data.photos.sources import MAX_FILE_BYTES
from tests.support.image_trees import load_batches, make_data, mixed_tree
from tests.support.threads import within


def _log(out) -> dict[str, tuple[str, str]]:
    """The log's lines by the entry's path inside the sources: (batch or 'ignored', why)."""
    lines = (out / "make-data.log").read_text().splitlines()[1:]
    return {os.path.relpath(path, out.parent / "src"): (where, why)
            for where, path, why in (line.split("\t") for line in lines)}


READ_BEFORE = "a link to a folder read before (a loop, or a second link to it): not read again"


def _sparse(path) -> None:
    with open(path, "wb") as file:  # takes no disk, nor time to make
        file.truncate(MAX_FILE_BYTES + 44 * 2 ** 20)


#: (what to make in a class folder, its name, whether it stays in a batch, the log's why)
HOSTILE = {
    "fifo": (os.mkfifo, "cat/x.jpg", False, "not a regular file (a FIFO)"),
    "sparse": (_sparse, "cat/sparse.jpg", True,
               "300 MiB, larger than the 256 MiB an image file may be: not read"),
    "dev-zero": (lambda p: p.symlink_to("/dev/zero"), "cat/zero.jpg", False,
                 "not a regular file (a character device)"),
    "loop": (lambda p: p.symlink_to(".."), "cat/loop", False, READ_BEFORE),
    "self-link": (lambda p: p.symlink_to(p.name), "dog/self.png", False,
                  "cannot read it (Too many levels of symbolic links)"),
    "second-link": (lambda p: p.symlink_to("../cat"), "dog/cats", False, READ_BEFORE),
    "hidden": (lambda p: p.write_bytes(b"Finder's"), "dog/.DS_Store", False,
               "hidden (its name starts with '.')"),
    "beside-the-classes": (lambda p: p.write_text("notes"), "README.txt", False,
                           "not in a class folder")}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and links")
@pytest.mark.parametrize("case", list(HOSTILE))
def test_only_regular_files_of_a_bounded_size_are_read_and_the_rest_is_logged(tmp_path, case):
    """A FIFO would block the run, /dev/zero never end, a sparse file fill the memory
    and a loop recurse until the path is too long: each is left out unread."""
    make, name, in_batch, why = HOSTILE[case]
    classes = mixed_tree(tmp_path / "src")
    make(tmp_path / "src" / name)

    code, _ = within(60, lambda: make_data(tmp_path / "src", tmp_path / "out"))

    assert code == 0
    log = _log(tmp_path / "out")
    where, logged_why = log.pop(name)
    assert logged_why == why and where.startswith("data_batch_" if in_batch else "ignored")
    assert sorted(log) == ["dog/broken.jpg", "emu/notes.txt"]
    stored = sum(len(part["data"]) for parts in load_batches(tmp_path / "out").values()
                 for part in parts)
    assert stored == sum(len(files) for files in classes.values())


def test_a_link_to_an_image_file_is_read(tmp_path):
    classes = mixed_tree(tmp_path / "src")
    (tmp_path / "src" / "dog" / "photo.jpg").symlink_to(tmp_path / "src" / "cat" / "a.jpg")
    assert make_data(tmp_path / "src", tmp_path / "out")[0] == 0
    stored = sum(len(part["data"]) for parts in load_batches(tmp_path / "out").values()
                 for part in parts)
    assert stored == sum(len(files) for files in classes.values()) + 1


def _png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def test_deep_grey_is_scaled_to_8_bits_without_a_wide_copy_of_the_whole_image(monkeypatch):
    """The 16-bit pixels are scaled in bands of rows: the only whole-image array made is
    the 8-bit result (numpy's arrays are traced by tracemalloc; Pillow's own are not)."""
    monkeypatch.setattr(convert, "BAND_PIXELS", 4096)
    rng = np.random.default_rng(0)
    deep = rng.integers(0, 65536, (600, 500)).astype(np.uint16)
    image = Image.open(io.BytesIO(_png(deep)))
    image.load()
    assert image.mode == "I;16"
    tracemalloc.start()
    try:
        grey = eight_bit_grey(image)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * deep.size  # the 8-bit result (1 byte a pixel) and small bands
    expected = np.clip(deep * (255.0 / 65535.0), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(grey), expected)
    dim = Image.open(io.BytesIO(_png((deep // 300).astype(np.uint16))))  # all below 256
    np.testing.assert_array_equal(np.asarray(eight_bit_grey(dim)), deep // 300)


@pytest.mark.parametrize("mode, side, refused", [
    ("I", 90, True),  # 8,100 pixels, within the 10,000 pixel limit, but 32,400 bytes
    ("F", 100, True),
    ("I;16", 100, False),  # 10,000 pixels of 2 bytes: within both
    ("RGB", 100, False),   # what the limit was made for: 3 bytes a pixel
    ("L", 100, False)])
def test_the_decoded_size_is_bounded_in_bytes_before_decoding(monkeypatch, mode, side, refused):
    """Pillow's limit (here 10,000 pixels) allows 30,000 bytes, counted by each mode's
    own bytes per pixel; a larger image is refused before anything is decoded."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    picture = Image.new(mode, (side, side))
    out = io.BytesIO()
    picture.save(out, format="TIFF" if mode in ("I", "F") else "PNG")
    real_load = ImageFile.ImageFile.load
    loads = []

    def counted_load(self, *args, **kwargs):
        loads.append(self.size)
        return real_load(self, *args, **kwargs)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counted_load)
    if refused:
        with pytest.raises(UnreadableImage, match=r"decompression bomb\? .* not decoded"):
            square_jpeg(out.getvalue(), 8)
        assert loads == []
    else:
        assert square_jpeg(out.getvalue(), 8)[:2] == b"\xff\xd8"


def test_a_class_folder_whose_name_is_not_utf8_names_its_class(tmp_path):
    """Its bytes come back from ``batches.meta`` as Python named the folder (a lone
    surrogate for the byte that is not UTF-8), which --predict shows escaped."""
    from convnet.app.using.shown_names import shown_name
    from convnet.data.cifar import read_label_names

    mixed_tree(tmp_path / "src")
    os.rename(tmp_path / "src" / "dog", os.fsdecode(bytes(tmp_path / "src") + b"/d\xffg"))
    assert make_data(tmp_path / "src", tmp_path / "out")[0] == 0
    names = read_label_names(str(tmp_path / "out"))
    assert names == ["cat", os.fsdecode(b"d\xffg"), "emu"]
    assert [shown_name(name) for name in names] == ["cat", "d\\xffg", "emu"]
