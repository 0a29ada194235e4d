"""A folder of class folders, trained from directly: ``--data-provider image --data-path
photos`` where ``photos`` holds ``cat/*.jpg``, ``dog/*.png``, ... instead of batches.

The tree is read as ``python -m convnet.make_data`` reads it (:mod:`.sources`: the
classes sorted by name are the labels, hostile entries left out), and each photo
becomes exactly the pixels the image provider would serve from make-data's batches:
resized to ``--image-size`` S on its short side, its centre S x S square cut out and
stored as a JPEG of quality 95 (:func:`.convert.square_jpeg`), then decoded as the image
provider decodes (:func:`convnet.data.image.decode.decode_one`).  The shared pipeline
then subtracts the per-pixel mean of the training images and crops and mirrors as for
any provider.  So training straight from the folder and training from make-data's
batches of it see the same cases, pixel for pixel.

The test images are ``photos/val`` (or ``photos/test``) when the folder holds exactly
``train`` and one of those, each a class-folder tree; otherwise
:data:`TEST_FRACTION` of every class (at least one of a class of two or more), chosen
by ``--seed``.  The images, shuffled by ``--seed`` (the tree lists them class by class),
are cut into batches of :data:`BATCH_IMAGES`, numbered from 0 for training and from
1000 for testing, as make-data numbers them.

A photo is converted the first time its batch is asked for and kept (uint8), so later
epochs cost no decoding; a tree whose converted images would take more than
:data:`MAX_KEPT_BYTES` is refused with a pointer to make-data, which writes batches to
disk instead.  Converting needs Pillow (the ``make-data`` extra).
"""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from convnet.data.base import DataProvider
from convnet.data.batch_checks import cases_to_keep
from convnet.data.options import DataOptions
from convnet.data.image.decode import decode_one, default_threads
from convnet.data.photos.sources import SkippedSource, folder_dataset, read_image_bytes
from convnet.errors import DataError

BATCH_IMAGES = 256
FIRST_TEST_BATCH = 1000
TEST_FRACTION = 0.2
#: The most memory the converted photos may take: beyond, make-data's batches on disk.
MAX_KEPT_BYTES = 4 * 2**30
TEST_FOLDERS = ("val", "test")
_ORDER_STREAM = 4  # the shuffle of the images into batches, apart from other seeded draws


def is_class_tree(path: str | None) -> bool:
    """Whether ``path`` is a folder of class folders rather than a folder of batches:
    no ``batches.meta``, at least one visible folder inside, and none of them a batch
    (``data_batch_N``, make-data's sub-batch folders)."""
    if not path or not os.path.isdir(path) or os.path.exists(os.path.join(path, "batches.meta")):
        return False
    try:
        with os.scandir(path) as entries:
            folders = [e.name for e in entries if e.is_dir() and not e.name.startswith(".")]
    except OSError:  # unreadable: the provider asked for says so in its own words
        return False
    return bool(folders) and not any(re.fullmatch(r"data_batch_\d+", f) for f in folders)


def image_size_unread(provider: str, path: str | None) -> str | None:
    """Why ``--image-size`` would be ignored by this data (it sizes the photos of a
    class-folder tree only), or None where it is read."""
    if provider != "image":
        return f"the '{provider}' data has its own"
    if path and os.path.isfile(os.path.join(path, "batches.meta")):
        return f"{path} holds batches, whose images have the size make-data's --size gave"
    return None


def _split_folders(folder: str) -> tuple[str, str | None]:
    """(training tree, test tree or None): ``train`` and ``val``/``test`` when the folder
    holds exactly those, else the folder itself."""
    with os.scandir(folder) as entries:
        inside = sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
    for test in TEST_FOLDERS:
        if inside == sorted(["train", test]):
            return os.path.join(folder, "train"), os.path.join(folder, test)
    return folder, None


class PhotoFolderProvider(DataProvider):
    name = "image"
    reports_data_wait = True

    def __init__(self, options: DataOptions):
        self.folder = options.data_path
        self.size = options.image_size
        source, test_dir = _split_folders(self.folder)
        data = folder_dataset(source, test_dir, 0.0 if test_dir else TEST_FRACTION,
                              options.seed)
        if not data.train:
            raise DataError(f"{self.folder}: a folder of class folders without a training "
                            "image in them")
        kept = (len(data.train) + len(data.test)) * 3 * self.size ** 2
        if kept > MAX_KEPT_BYTES:
            raise DataError(f"{self.folder}: its {len(data.train) + len(data.test):,} photos "
                            f"at {self.size}x{self.size} would take {kept / 2**30:.1f} GiB "
                            "in memory; write them as batches with python -m "
                            "convnet.make_data (docs/IMAGENET.md) and train from those")
        self._batches = {}
        rng = np.random.default_rng([options.seed, _ORDER_STREAM])
        for first, refs, labels in ((0, data.train, data.train_labels),
                                    (FIRST_TEST_BATCH, data.test, data.test_labels)):
            order = rng.permutation(len(refs))  # the tree lists the images class by class
            refs, labels = [refs[i] for i in order], [labels[i] for i in order]
            for k, lo in enumerate(range(0, len(refs), BATCH_IMAGES)):
                self._batches[first + k] = (refs[lo:lo + BATCH_IMAGES],
                                            labels[lo:lo + BATCH_IMAGES])
        train = [b for b in self._batches if b < FIRST_TEST_BATCH]
        test = [b for b in self._batches if b >= FIRST_TEST_BATCH]
        super().__init__(options, where=self.folder, image_shape=(3, self.size, self.size),
                         label_names=data.label_names, available=sorted(self._batches),
                         default_train=train, default_test=test)
        self._kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._kept_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _batch_source(self, batch_id: int) -> str:
        return f"{self.folder} (batch {batch_id})"

    def _load(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        with self._kept_lock:
            kept = self._kept.get(batch_id)
        if kept is None:
            kept = self._convert(batch_id)
            with self._kept_lock:
                self._kept[batch_id] = kept
        return kept

    def _convert(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        """The batch's photos as (N, 3, S, S) uint8, unreadable ones left out when
        asked to skip them (else the first is an error naming the file)."""
        from convnet.optional import require_pillow

        require_pillow("--data-provider image on a folder of class folders")
        refs, labels = self._batches[batch_id]
        out = np.empty((len(refs), self.size, self.size, 3), np.uint8)
        with self._kept_lock:  # the training and the test loaders convert at once
            if self._pool is None:
                self._pool = ThreadPoolExecutor(default_threads(), thread_name_prefix="photos")
            pool = self._pool
        problems = list(pool.map(lambda i: self._convert_one(refs[i], out[i]),
                                 range(len(refs))))
        bad = [(i, refs[i].name, why) for i, why in enumerate(problems) if why]
        keep = np.ones(len(refs), bool)
        if bad:
            keep = cases_to_keep(len(refs), bad, self.options.skip_bad_images,
                                 self._batch_source(batch_id), "photos can be read")
            with self._kept_lock:
                self.skipped.update((name, why) for _, name, why in bad)
        return (np.ascontiguousarray(out[keep].transpose(0, 3, 1, 2)),
                np.asarray(labels, np.float32)[keep])

    def _convert_one(self, ref, out: np.ndarray) -> str | None:
        """One photo into ``out`` ((S, S, 3) uint8) as make-data stores it and the image
        provider decodes it; what is wrong with it, or None."""
        from convnet.data.photos.convert import UnreadableImage, square_jpeg

        try:
            jpeg = square_jpeg(read_image_bytes(ref), self.size)
        except (OSError, SkippedSource, UnreadableImage) as error:
            return str(error) or type(error).__name__
        return decode_one(jpeg, self.size, out)
