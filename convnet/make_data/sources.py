"""What make-data reads: references to source images with their labels.

A source image is a byte range of a file (:class:`ImageRef`): a whole file in a
class-folder tree, or one member of the ILSVRC-2012 tars, which are read in
place (an uncompressed tar stores each member's bytes contiguously), never
extracted.  This module scans a class-folder tree ``SRC/CLASS/...``: the
classes, sorted by folder name, are the label ids 0, 1, ... and their names the
``label_names``; image files are found by their extension, in every folder
below a class folder.
"""

from __future__ import annotations

import hashlib
import os
from typing import NamedTuple

import numpy as np

from convnet.errors import DataError, UsageError

#: File name endings taken as images (case-insensitive); anything else in a class
#: folder is listed in the log as ignored.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif", ".webp", ".tif",
                    ".tiff", ".ppm", ".pgm", ".pbm", ".pnm")


class ImageRef(NamedTuple):
    """One source image: ``size`` bytes at ``offset`` of the file ``path`` (``size``
    -1: the whole file); ``name`` is what the log calls it."""

    name: str
    path: str
    offset: int = 0
    size: int = -1


class DataSet(NamedTuple):
    """The images to convert: training and test images with their label ids, the
    class names, the files that were not taken as images, and ``fingerprint``, which
    changes whenever the sources do (names, sizes, labels)."""

    train: list[ImageRef]
    train_labels: list[int]
    test: list[ImageRef]
    test_labels: list[int]
    label_names: list[str]
    ignored: list[str]
    fingerprint: str


def read_image_bytes(ref: ImageRef) -> bytes:
    """The bytes of one source image (``OSError`` if the file cannot be read)."""
    with open(ref.path, "rb") as file:
        if ref.size < 0:
            return file.read()
        file.seek(ref.offset)
        data = file.read(ref.size)
    if len(data) != ref.size:
        raise OSError(f"the file ends {ref.size - len(data)} bytes early")
    return data


def fingerprint(names: list[str], refs: list[ImageRef], labels: list[int],
                label_names: list[str]) -> str:
    """A digest of the images' ``names`` (paths inside the sources, so that the same
    sources elsewhere, or named another way, give the same digest), sizes and labels: a
    rerun resumes only onto the output of the same sources."""
    digest = hashlib.sha256()
    for name, ref, label in zip(names, refs, labels):
        size = ref.size if ref.size >= 0 else _file_size(ref.path)
        digest.update(f"{name}\0{size}\0{label}\n".encode("utf-8", "surrogateescape"))
    digest.update("\0".join(label_names).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1  # unreadable now; the conversion skips and logs it


def _is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def _visible_entries(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted((e for e in entries if not e.name.startswith(".")),
                          key=lambda e: e.name)
    except OSError as error:
        raise DataError(f"{folder}: cannot read the folder ({error.strerror or error})") from None


def _class_folders(root: str) -> list[str]:
    if not os.path.exists(root):
        raise DataError(f"{root}: the folder does not exist")
    if not os.path.isdir(root):
        raise DataError(f"{root}: not a folder")
    classes = [e.name for e in _visible_entries(root) if e.is_dir()]
    if not classes:
        raise DataError(f"{root}: no class folders: put each class's images in a folder of "
                        f"its own ({os.path.join(root, 'CLASS', 'image.jpg')}), or give the "
                        f"folder holding the ILSVRC-2012 tars")
    return classes


def _class_files(folder: str) -> tuple[list[ImageRef], list[str]]:
    """Image files and other files below one class folder, in sorted path order."""
    images, others = [], []
    for entry in _visible_entries(folder):
        if entry.is_dir():
            more_images, more_others = _class_files(entry.path)
            images += more_images
            others += more_others
        elif _is_image_name(entry.name):
            images.append(ImageRef(entry.path, entry.path))
        else:
            others.append(entry.path)
    return images, others


def scan_class_tree(root: str, classes: list[str] | None = None
                    ) -> tuple[list[str], list[list[ImageRef]], list[str]]:
    """(class names, each class's images, ignored files) of ``root``.  With
    ``classes`` (the training classes), ``root`` is a test tree: each of its class
    folders must be one of them, and a class may be missing."""
    names = _class_folders(root)
    if classes is not None:
        unknown = [name for name in names if name not in classes]
        if unknown:
            raise DataError(f"{os.path.join(root, unknown[0])}: a test class that the training "
                            f"folder does not have (its classes: {_some(classes)})")
    per_class, ignored = [], []
    for name in names:
        images, others = _class_files(os.path.join(root, name))
        if not images:
            raise DataError(f"{os.path.join(root, name)}: the class folder holds no image files "
                            f"({', '.join(IMAGE_EXTENSIONS)}); add images or remove the folder")
        per_class.append(images)
        ignored += others
    return names, per_class, ignored


def _some(names: list[str], count: int = 5) -> str:
    return ", ".join(names[:count]) + (", ..." if len(names) > count else "")


def folder_dataset(src: str, test_dir: str | None, test_fraction: float, seed: int) -> DataSet:
    """The images of a class-folder tree, the test images from ``test_dir`` (a tree
    with the same class names) or, with ``test_fraction`` > 0, that share of every
    class (at least one image of a class with two or more), chosen by ``seed``."""
    if test_dir is not None and test_fraction > 0:
        raise UsageError("--val-dir and --val-fraction both choose the test images: give one")
    names, per_class, ignored = scan_class_tree(src)
    train, train_labels, test, test_labels = [], [], [], []
    rng = np.random.default_rng([seed, 2])
    for label, images in enumerate(per_class):
        held = _held_out(len(images), test_fraction, rng)
        for index, ref in enumerate(images):
            (test if index in held else train).append(ref)
            (test_labels if index in held else train_labels).append(label)
    inside = [os.path.relpath(ref.path, src) for ref in train + test]
    if test_dir is not None:
        test_names, test_per_class, test_ignored = scan_class_tree(test_dir, names)
        ignored += test_ignored
        for name, images in zip(test_names, test_per_class):
            test += images
            test_labels += [names.index(name)] * len(images)
            inside += [os.path.join("--val-dir", os.path.relpath(ref.path, test_dir))
                       for ref in images]
    # test labels enter the digest negated, so moving an image between the sets counts
    refs, labels = train + test, train_labels + [-1 - label for label in test_labels]
    return DataSet(train, train_labels, test, test_labels, names, ignored,
                   fingerprint(inside, refs, labels, names))


def _held_out(count: int, fraction: float, rng: np.random.Generator) -> set[int]:
    if fraction <= 0 or count < 2:
        return set()
    take = min(count - 1, max(1, int(round(fraction * count))))
    return set(rng.choice(count, size=take, replace=False).tolist())
