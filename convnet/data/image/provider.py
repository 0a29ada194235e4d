"""The ``image`` provider: a folder of JPEG batches in cuda-convnet2's ImageNet format.

The folder holds ``batches.meta`` (see :mod:`convnet.data.image.meta`) and
``data_batch_N`` for any N >= 0 (see :mod:`convnet.data.image.batch_files`).
Images are 3 x S x S in 0..255 after decoding; the mean subtracted is the
meta file's ``data_mean`` (or ``--scalar-mean``), and crops, mirrors and
multiview tests are the shared pipeline's.  Two things follow the original's
ImageNet provider rather than the other providers:

* ``--color-noise s``: each training case gets ``s * (z * stdevs) @ vectors.T``
  added to every pixel (``z ~ N(0, I)``, ``color_pca`` from the meta file) and
  is then scaled by ``1 / (1 + s)``, so that training images keep about the
  test images' scale;
* labels: a case may hold a list of label ids.  Column 1 then serves one of
  them drawn at random per case (seeded by (seed, epoch, batch) in training
  and by (seed, batch) in tests), and column 2 the cases x classes matrix with
  a 1 at each of the case's labels.  Column 2 exists when the first batch of
  the run (the first training batch, else the first test batch) stores lists.

Default ranges (when none are given): every batch but the highest-numbered
for training, the highest for testing, as for ``convnet-batches``.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from convnet.data.base import DataProvider
from convnet.data.batch_checks import cases_to_keep
from convnet.data.options import DataOptions
from convnet.data.cifar import check_folder
from convnet.data.image.batch_files import (RawBatch, available_batches, batch_files,
                                             count_cases, read_batch)
from convnet.data.image.decode import JpegDecoder
from convnet.data.image.labels import LabelSets, label_sets
from convnet.data.image.meta import read_meta
from convnet.data.safe_pickle import load_dict
from convnet.errors import DataError

_LABEL_STREAM = 5  # the random label of multi-label cases, apart from augmentation's


class ImageProvider(DataProvider):
    name = "image"
    reports_data_wait = True

    def __init__(self, options: DataOptions):
        self.folder = check_folder(options.data_path, self.name)
        self.meta = read_meta(self.folder)
        available = available_batches(self.folder)
        if (options.train_range is None or options.test_range is None) and len(available) < 2:
            raise DataError(f"{self.folder}: found {len(available)} data_batch_N batch(es); "
                            "give --train-range and --test-range explicitly")
        size = self.meta.size
        super().__init__(options, where=self.folder, image_shape=(3, size, size),
                         label_names=self.meta.label_names, available=available,
                         default_train=available[:-1], default_test=available[-1:])
        if options.color_noise > 0 and self.meta.pca_stdevs is None:
            raise DataError(f"{self.meta.path}: --color-noise needs 'color_pca' (the colour "
                            "standard deviations and eigenvectors), which the file lacks")
        self._decoder = JpegDecoder(options.decode_threads)
        self._skipped_lock = threading.Lock()
        #: batch -> its cases that cannot be decoded (with --skip-bad-images), found
        #: the first time it was served: later epochs leave them out before decoding
        self._undecodable: dict[int, list[tuple[int, str]]] = {}
        first = (self.train_batches or self.test_batches or [None])[0]
        if first is not None and self._stores_label_lists(first):
            self.data_dims[2] = (self.num_classes,)

    def close(self) -> None:
        self._decoder.close()

    # -- the interface -----------------------------------------------------------

    def load_batch(self, batch_id: int, train: bool, epoch: int = 0,
                   empty=np.empty) -> list:
        """The batch with column 0 as the decoding threads leave it: each image's window
        (random in training, central in tests), uint8 and channels-last, with the draws
        of its mirror and colour noise (see the base class)."""
        batch, sets = self._read_files(batch_id)
        jpegs, size, inner = batch.jpegs, self.meta.size, self._inner or self.meta.size
        known = self._undecodable.get(batch_id)
        if known:  # left out before decoding, the windows drawn for the cases left
            keep = self._keep(batch, known, batch_id)
            jpegs, sets = [j for j, k in zip(jpegs, keep.tolist()) if k], sets.subset(keep)
        offsets, flips, rng = self._windows(len(jpegs), batch_id, train, epoch)
        pixels, bad = self._decoder.decode(jpegs, size, inner, offsets,
                                           empty((len(jpegs), inner, inner, 3), np.uint8))
        if bad and not known:  # found now, the first time: served without them
            self._undecodable[batch_id] = bad
            return self.load_batch(batch_id, train, epoch, empty)
        self._counts[batch_id] = len(jpegs)
        labels = sets.pick(self._label_rng(batch_id, train, epoch)).reshape(-1, 1)
        return [self._stored_images(pixels, offsets, flips, rng, channels_last=True), labels] \
            + self._matrix(sets)

    def get_test_views(self, batch_id: int) -> list[np.ndarray]:
        raw, sets = self._read(batch_id)
        return self._serve_views(raw, sets.pick(self._label_rng(batch_id, False, 0))) \
            + self._matrix(sets)

    def num_cases(self, batch_id: int) -> int:
        """Counted from the pickles, without decoding (skipped images are known only
        once a batch was served)."""
        if batch_id not in self._counts:
            self._check_available(batch_id)
            self._counts[batch_id] = count_cases(self._batch_source(batch_id), batch_id)
        return self._counts[batch_id]

    # -- what the shared pipeline asks for ---------------------------------------

    def _batch_source(self, batch_id: int) -> str:
        return os.path.join(self.folder, f"data_batch_{batch_id}")

    def _why_missing(self, batch_id: int) -> str:
        """A batch may be a folder of sub-batches: an empty one (an interrupted copy)
        is said to be that, not "a folder, not a regular file"."""
        if os.path.isdir(self._batch_source(batch_id)):
            return f"is a folder without sub-batch files (data_batch_{batch_id}.0, ...)"
        return super()._why_missing(batch_id)

    def _pixel_mean(self) -> np.ndarray:
        return self.meta.data_mean

    def _colour_noise(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.float32]:
        """The original's colour noise: the shifts, and the scale ``1 / (1 + s)``."""
        scale = self.options.color_noise
        shift = (rng.standard_normal((n, 3)) * self.meta.pca_stdevs) @ self.meta.pca_vectors.T
        return (scale * shift).astype(np.float32), np.float32(1.0 / (1.0 + scale))

    # -- reading -----------------------------------------------------------------

    def _read_files(self, batch_id: int) -> tuple[RawBatch, LabelSets]:
        """The batch's JPEGs and checked labels, as its files hold them."""
        self._check_available(batch_id)
        batch = read_batch(self._batch_source(batch_id), batch_id)
        return batch, label_sets(batch.labels, self.meta.label_offset, self.num_classes,
                                 batch.where)

    def _read(self, batch_id: int) -> tuple[np.ndarray, LabelSets]:
        """The batch's whole images ``(N, 3, S, S)`` uint8 (a channel-major view of the
        decoded rows) and its labels, bad images left out when asked to skip them."""
        batch, sets = self._read_files(batch_id)
        pixels, bad = self._decoder.decode(batch.jpegs, self.meta.size)
        if bad:
            keep = self._keep(batch, bad, batch_id)
            pixels, sets = pixels[keep], sets.subset(keep)
        self._counts[batch_id] = len(pixels)
        return pixels.transpose(0, 3, 1, 2), sets

    def _keep(self, batch: RawBatch, bad: list[tuple[int, str]], batch_id: int) -> np.ndarray:
        """Which cases are left once the images that cannot be decoded are left out (with
        ``--skip-bad-images``; without it the first ends the run)."""
        located = [(c, batch.where(c), p) for c, p in bad]
        keep = cases_to_keep(len(batch.jpegs), located, self.options.skip_bad_images,
                             self._batch_source(batch_id), "images can be decoded")
        with self._skipped_lock:
            self.skipped.update((where, p) for _, where, p in located)
        return keep

    def _label_rng(self, batch_id: int, train: bool, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.options.seed, _LABEL_STREAM, int(train),
                                      epoch if train else 0, batch_id])

    def _matrix(self, sets: LabelSets) -> list[np.ndarray]:
        """Column 2, the label matrix, when the run serves it."""
        if 2 in self.data_dims:
            return [sets.matrix(self.num_classes)]
        return []

    def _stores_label_lists(self, batch_id: int) -> bool:
        """Whether the first pickle of ``batch_id`` stores lists of labels."""
        self._check_available(batch_id)
        first = batch_files(self._batch_source(batch_id), batch_id)[0]
        labels = load_dict(first, ("labels",))["labels"]
        return isinstance(labels, (list, tuple)) and \
            any(isinstance(label, (list, tuple)) for label in labels)
