"""What make-data reads: references to source images with their labels.

A source image is a byte range of a file (:class:`ImageRef`): a whole file in a
class-folder tree, or one member of the ILSVRC-2012 tars, which are read in
place (an uncompressed tar stores each member's bytes contiguously), never
extracted.  This module scans a class-folder tree ``SRC/CLASS/...``: the
classes, sorted by folder name, are the label ids 0, 1, ... and their names the
``label_names``; image files are found by their extension, in every folder
below a class folder.

A photo tree may hold anything, so only regular files are read, none larger
than :data:`MAX_FILE_BYTES` (checked before reading: a FIFO would block the run
and a link to ``/dev/zero`` never end), and links are followed but every folder
is read once: a link back into a folder being read (a loop) or to one already
read is left out.  Whatever is left out (hidden entries and files beside the class
folders too) is listed in the log with its reason.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import NamedTuple

import numpy as np

from convnet.errors import DataError, UsageError

#: File name endings taken as images (case-insensitive); anything else in a class
#: folder is listed in the log as ignored.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif", ".webp", ".tif",
                    ".tiff", ".ppm", ".pgm", ".pbm", ".pnm")

#: Folder names of the parts of a data set; class folders all named so, each holding
#: folders of images, are a tree read one level too high.
SPLIT_NAMES = ("train", "training", "val", "valid", "validation", "test", "testing")

#: The largest source file read (256 MiB, what an image at Pillow's 89-megapixel
#: decompression-bomb limit takes decoded); a larger one is skipped unread.
MAX_FILE_BYTES = 256 * 2 ** 20


class SkippedSource(Exception):
    """A source that is not read at all (not a regular file, or too large); the
    message says why, for the log."""


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
    ignored: list[tuple[str, str]]
    fingerprint: str


def read_image_bytes(ref: ImageRef) -> bytes:
    """The bytes of one source image: ``OSError`` if the file cannot be read, and
    :class:`SkippedSource` if it is not a regular file or larger than
    :data:`MAX_FILE_BYTES` (both found before reading: opening does not wait for a
    FIFO's writer)."""
    descriptor = os.open(ref.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(descriptor, "rb") as file:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise SkippedSource(f"not a regular file ({_file_kind(info.st_mode)})")
        size = info.st_size if ref.size < 0 else ref.size
        if size > MAX_FILE_BYTES:
            raise SkippedSource(f"{_mib(size)}, larger than the {_mib(MAX_FILE_BYTES)} an "
                                f"image file may be: not read")
        file.seek(ref.offset)
        data = file.read(size + 1 if ref.size < 0 else size)  # + 1: a file that grew
    if ref.size < 0 and len(data) > size:
        raise SkippedSource("the file grew while it was read: not read")
    if ref.size >= 0 and len(data) != ref.size:
        raise OSError(f"the file ends {ref.size - len(data)} bytes early")
    return data


def _mib(size: int) -> str:
    return f"{size / 2 ** 20:.0f} MiB" if size >= 2 ** 20 else f"{size} bytes"


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISDIR, "a folder"))
    return next((name for test, name in kinds if test(mode)), "not a file")


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


def _visible_entries(folder: str) -> tuple[list[os.DirEntry], list[tuple[str, str]]]:
    """The entries of ``folder`` but the hidden ones, by name, and the hidden ones as
    entries left out (``OSError`` if the folder cannot be read)."""
    with os.scandir(folder) as entries:
        ordered = sorted(entries, key=lambda e: e.name)
    return ([e for e in ordered if not e.name.startswith(".")],
            [(e.path, _HIDDEN) for e in ordered if e.name.startswith(".")])


def _folder_error(folder: str, error: OSError) -> DataError:
    return DataError(f"{folder}: cannot read the folder ({error.strerror or error})")


class _Entry(NamedTuple):
    """What a folder entry is, its links followed: ``"folder"`` (``key`` tells it
    apart from every other folder), ``"file"`` (a regular file) or ``"other"``
    (``why`` it is left out)."""

    kind: str
    key: tuple[int, int] | None = None
    why: str = ""


def _entry(path: str) -> _Entry:
    try:
        info = os.stat(path)  # follows links; a loop of links is ELOOP
    except OSError as error:
        return _Entry("other", why=f"cannot read it ({error.strerror or error})")
    if stat.S_ISDIR(info.st_mode):
        return _Entry("folder", (info.st_dev, info.st_ino))
    if stat.S_ISREG(info.st_mode):
        return _Entry("file")
    return _Entry("other", why=f"not a regular file ({_file_kind(info.st_mode)})")


_READ_BEFORE = "a link to a folder read before (a loop, or a second link to it): not read again"
_HIDDEN = "hidden (its name starts with '.')"


def _class_folders(root: str, seen: set) -> tuple[list[str], list[tuple[str, str]]]:
    """The class folders of ``root`` (their folders added to ``seen``) and the entries
    beside them left out, with why."""
    if not os.path.exists(root):
        raise DataError(f"{root}: the folder does not exist")
    if not os.path.isdir(root):
        raise DataError(f"{root}: not a folder")
    seen.add(_entry(root).key)
    classes = []
    try:
        entries, left_out = _visible_entries(root)
    except OSError as error:
        raise _folder_error(root, error) from None
    for entry in entries:
        found = _entry(entry.path)
        if found.kind != "folder":
            left_out.append((entry.path, "not in a class folder"))
            continue
        if found.key in seen:
            left_out.append((entry.path, _READ_BEFORE))
            continue
        seen.add(found.key)
        classes.append(entry.name)
    if not classes:
        raise DataError(f"{root}: no class folders: put each class's images in a folder of "
                        f"its own ({os.path.join(root, 'CLASS', 'image.jpg')}), or give the "
                        f"folder holding the ILSVRC-2012 tars")
    return classes, left_out


def _class_files(folder: str, seen: set) -> tuple[list[ImageRef], list[tuple[str, str]]]:
    """Image files below one class folder, in sorted path order, and the entries left
    out with why (``seen``: the folders read so far, to which this adds)."""
    images = []
    entries, others = _visible_entries(folder)
    for entry in entries:
        found = _entry(entry.path)
        if found.kind == "folder":
            if found.key in seen:
                others.append((entry.path, _READ_BEFORE))
                continue
            seen.add(found.key)
            try:
                more_images, more_others = _class_files(entry.path, seen)
            except OSError as error:
                others.append((entry.path, f"cannot read the folder ({error.strerror or error})"))
                continue
            images += more_images
            others += more_others
        elif not _is_image_name(entry.name):
            others.append((entry.path, "not an image file name"))
        elif found.kind == "file":
            images.append(ImageRef(entry.path, entry.path))
        else:
            others.append((entry.path, found.why))
    return images, others


def scan_class_tree(root: str, classes: list[str] | None = None
                    ) -> tuple[list[str], list[list[ImageRef]], list[tuple[str, str]]]:
    """(class names, each class's images, the entries left out with why) of ``root``.
    With ``classes`` (the training classes), ``root`` is a test tree: each of its class
    folders must be one of them, and a class may be missing."""
    seen: set = set()
    names, ignored = _class_folders(root, seen)
    if classes is not None:
        unknown = [name for name in names if name not in classes]
        if unknown:
            raise DataError(f"{os.path.join(root, unknown[0])}: a test class that the training "
                            f"folder does not have (its classes: {_some(classes)})")
    per_class = []
    for name in names:
        try:
            images, others = _class_files(os.path.join(root, name), seen)
        except OSError as error:
            raise _folder_error(os.path.join(root, name), error) from None
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
    if len(names) == 1:
        raise DataError(_one_class(src, names[0], per_class[0]))
    if all(name.lower() in SPLIT_NAMES for name in names):
        inner = [_inner_folders(os.path.join(src, n), refs) for n, refs in zip(names, per_class)]
        if all(inner):
            raise DataError(
                f"{src}: its folders {', '.join(names)} hold class folders "
                f"({_some(sorted(set().union(*inner)))}): they are the parts of a data set, "
                f"not classes; give the training part's folder (make-data: --src-dir with "
                f"--val-dir for the test part; --data-path: a folder holding only train and "
                f"val or test)")
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


def _one_class(src: str, name: str, images: list[ImageRef]) -> str:
    """Why a tree of one class is refused: every label would be 0, so a net learns
    nothing; most often the classes are one level down (``photos/dataset/cat``)."""
    folder = os.path.join(src, name)
    inner = _inner_folders(folder, images)
    hint = (f"; its folders {_some(inner)} may be the classes: read {folder}"
            if len(inner) > 1 else "")
    return (f"{src} holds one class folder, '{name}': a classifier needs two or more, one "
            f"folder of images for each class{hint}")


def _inner_folders(folder: str, images: list[ImageRef]) -> list[str]:
    """The folders inside ``folder`` that hold its images, or [] when any image lies
    in ``folder`` itself (then it is a class folder as meant)."""
    places = [os.path.relpath(ref.path, folder).split(os.sep) for ref in images]
    if any(len(place) == 1 for place in places):
        return []
    return sorted({place[0] for place in places})


def _held_out(count: int, fraction: float, rng: np.random.Generator) -> set[int]:
    if fraction <= 0 or count < 2:
        return set()
    take = min(count - 1, max(1, int(round(fraction * count))))
    return set(rng.choice(count, size=take, replace=False).tolist())
