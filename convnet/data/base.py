"""The data-provider interface that the training loop is written against.

A provider serves numbered batches of labelled images, like cuda-convnet2's
data providers, so that ``--train-range=1-5 --test-range=6`` mean the same
thing here.  Every provider (see :mod:`convnet.data` for the names)
has:

``data_dims: dict[int, tuple]``
    per-case shape of each data column: ``{0: (C, S, S), 1: (1,)}`` (images
    after cropping, labels).  A data layer with ``dataIdx=i`` reads column i.
``num_classes: int``, ``label_names: list[str]``
``train_batches``, ``test_batches: list[int]``
    the batch numbers the run uses, after applying the train/test ranges.
``num_views: int``
    how many test views :meth:`DataProvider.get_test_views` returns (1
    unless ``multiview_test``; see below).
``get_batch(batch_id, train, epoch) -> [images, labels]``
    images float32 ``(N, C, S, S)`` C-contiguous, mean-subtracted; labels
    float32 ``(N, 1)`` holding class indices.  With ``train=True`` the
    augmentation (random crops, mirrors, colour noise) is drawn from a
    generator seeded by ``(seed, epoch, batch_id)`` only, so a resumed run or
    a run on another number of devices sees exactly the same data.  With
    ``train=False`` the result never depends on ``epoch``.
``load_batch(batch_id, train, epoch, empty) -> [images, labels]``
    the same batch with the images as stored, for the device that trains on them
    to make float (:class:`~convnet.kernels.images.StoredImages`: the windows cut,
    the augmentation drawn; the training loop loads this).
``get_test_views(batch_id) -> [views, labels]``
    views float32 ``(V, N, C, S, S)``; average the predictions over axis 0.
    A provider with more columns (``data_dims[2]`` and up) appends them, in
    order, to what both methods return.
``test_cases_from_pixels(raw) -> images``
    raw images ``(N, C, S, S)`` at the stored size, in the provider's pixel units,
    made into what column 0 of ``get_batch(train=False)`` holds (mean subtracted,
    the centre ``inner_size`` window), or into the ``(V, N, C, s, s)`` views of
    ``get_test_views`` when there are several: images from elsewhere (a photo to
    classify) get exactly the preprocessing of a test case.
``pixel_max: float | None``
    the value of a white pixel in the provider's units (255, or 1 for digits);
    None where the columns are not images an image file could give (dummy data).
``num_cases(batch_id) -> int``
``check_dims(expected)``
    raise a :class:`DataError` unless the config's expected shapes match.
``skipped: dict[str, str]``
    cases left out as unreadable (``"FILE, case K"`` -> why); only a provider
    asked to skip bad input fills it.
``close()``
    end any threads the provider started (it may be used again afterwards).

Pixel values keep each source's own units before mean subtraction (0..255 for
CIFAR and cuda-convnet batches, as in cuda-convnet2, whose configs' ``initW``
values assume that scale; 0..1 for digits), and ``scalar_mean`` is in the same
units: one outside 0..``pixel_max`` is refused (``--scalar-mean 128`` from a CIFAR
recipe would shift every 0..1 digit by 128).

Augmentation follows cuda-convnet2's CIFAR provider:

* ``inner_size = 0``: no augmentation; images are served whole.
* ``inner_size = k > 0``: training cases get a uniformly random k x k window
  and are mirrored left-right with probability 1/2 (so ``k = S`` means mirrors
  only); test cases get the centre window.
* ``multiview_test`` with ``inner_size > 0``: ten test views, the centre and
  four corner windows and their mirror images (two views when ``k = S``).
  View 0 is the centre crop that ``get_batch(train=False)`` returns.
* ``color_noise = s > 0``: each training case gets one random colour added to
  all its pixels, drawn along the principal axes of the training images'
  colour covariance with ``s`` standard deviations (the PCA noise of
  Krizhevsky et al. 2012, without cuda-convnet2's rescaling of the image).
  The covariance is estimated from (the first 1,000 cases of) the first
  training batch.

Providers are safe to call from a background thread (see
:mod:`convnet.data.prefetch`): lazily computed statistics are built under a
lock, and batches are never cached mutable.  Raw batches are checked as they are
read (:mod:`convnet.data.batch_checks`).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from convnet.data import augment
from convnet.data.batch_checks import check_finite, check_pixel_range, checked_batch
from convnet.data.options import DataOptions
from convnet.data.ranges import format_range
from convnet.errors import DataError
from convnet.filekind import not_a_regular_file
from convnet.kernels.images import StoredImages

_AUGMENT_STREAM = 1  # keeps augmentation noise apart from other seeded streams


def as_float(columns: list) -> list[np.ndarray]:
    """A batch's columns with :class:`~convnet.kernels.images.StoredImages` made float32
    on the host (what ``get_batch`` serves)."""
    return [c.to_float() if isinstance(c, StoredImages) else c for c in columns]


def format_shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


class DataProvider:
    """The shared pipeline: load a raw batch, check it, subtract the mean, augment.

    Subclasses call ``__init__`` with what they found on disk and implement
    :meth:`_load` (raw images ``(N, *image_shape)`` of any real dtype and
    labels ``(N,)``) and :meth:`_batch_source` (a path for error messages);
    they may override :meth:`_pixel_mean` (default: per-pixel mean of the
    training batches).
    """

    name = ""
    pixel_max: float | None = 255.0
    #: Whether a run ends by saying how long it waited for this provider's batches:
    #: for providers that do real work per batch (decoding), not for in-memory data,
    #: whose runs then print the same lines whatever the machine's load.
    reports_data_wait = False

    def __init__(self, options: DataOptions, *, where: str, image_shape: tuple[int, ...],
                 label_names: list[str], available: list[int] | None,
                 default_train: list[int], default_test: list[int]):
        self.options = options
        self.where = where
        self.image_shape = tuple(image_shape)
        self.label_names = list(label_names)
        self.num_classes = len(self.label_names)
        self._available = available
        self._available_set = frozenset(available or ())
        self.train_batches = self._select(options.train_range, default_train, "train")
        self.test_batches = self._select(options.test_range, default_test, "test")
        self._inner = self._check_inner_size(options.inner_size)
        self._check_numbers(options)
        shape = (self.image_shape[0], self._inner, self._inner) if self._inner else self.image_shape
        self.data_dims: dict[int, tuple[int, ...]] = {0: shape, 1: (1,)}
        if options.multiview_test and self._inner:
            self.num_views = 2 * len(augment.view_positions(self.image_shape[-1], self._inner))
        else:
            self.num_views = 1
        self._lock = threading.Lock()
        self._mean: np.ndarray | np.float32 | None = None
        self._basis: np.ndarray | None = None
        self._counts: dict[int, int] = {}
        self.skipped: dict[str, str] = {}

    def close(self) -> None:
        """Nothing to end here; providers with threads of their own end them."""

    # -- what subclasses provide -------------------------------------------------

    def _load(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _batch_source(self, batch_id: int) -> str:
        raise NotImplementedError

    def _pixel_mean(self) -> np.ndarray | float:
        if not self.train_batches:
            raise DataError(f"{self.where}: the per-pixel mean is taken over the training "
                            "batches, but the train range is empty; give --scalar-mean instead")
        total = np.zeros(self.image_shape, np.float64)
        count = 0
        for batch_id in self.train_batches:
            images, _ = self._checked_load(batch_id)
            total += images.sum(axis=0, dtype=np.float64)
            count += len(images)
        return total / max(count, 1)

    # -- the interface -----------------------------------------------------------

    def get_batch(self, batch_id: int, train: bool, epoch: int = 0) -> list[np.ndarray]:
        return as_float(self.load_batch(batch_id, train, epoch))

    def load_batch(self, batch_id: int, train: bool, epoch: int = 0,
                   empty=np.empty) -> list:
        """:meth:`get_batch`'s batch with images (C, S, S) as stored (see the module
        docstring; other data float32); ``empty(shape, dtype)`` allocates the arrays a
        provider decodes into (pinned memory for a GPU)."""
        raw, labels = self._checked_load(batch_id)
        return self._stored(raw, labels, batch_id, train, epoch)

    def get_test_views(self, batch_id: int) -> list[np.ndarray]:
        raw, labels = self._checked_load(batch_id)
        return self._serve_views(raw, labels)

    def raw_batch(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        """A batch's images as stored, ``(N, *image_shape)`` in this provider's pixel
        units (before the mean is subtracted or a window cut: what
        :meth:`test_cases_from_pixels` takes), and its labels."""
        return self._checked_load(batch_id)

    def test_cases_from_pixels(self, raw: np.ndarray) -> np.ndarray:
        """Test-mode inputs for raw images ``(N, *image_shape)`` in this provider's pixel
        units (others are refused): what column 0 of ``get_batch(train=False)`` holds
        for them (mean subtracted, centre crop), or of ``get_test_views`` (``(V, N,
        ...)``) when ``num_views > 1``.  For predicting on images that are in no batch."""
        raw = np.asarray(raw)
        if raw.shape[1:] != self.image_shape:  # the whole shape: N may be what is missing
            one = (" (one image: give it as a batch of one, images[None])"
                   if raw.shape == self.image_shape else "")
            raise DataError(f"{self.where}: images to test should be N x "
                            f"{format_shape(self.image_shape)}, found "
                            f"{format_shape(raw.shape)}{one}")
        check_finite(raw, "the images to test")
        check_pixel_range(raw, self.pixel_max, "the images to test")
        labels = np.zeros(len(raw), np.float32)
        if self.num_views > 1:
            return self._serve_views(raw, labels)[0]
        return as_float(self._stored(raw, labels, 0, train=False, epoch=0))[0]

    def _stored(self, raw: np.ndarray, labels: np.ndarray, batch_id: int, train: bool,
                epoch: int) -> list:
        """Checked raw images and labels as ``load_batch`` serves them."""
        if len(self.image_shape) != 3:  # not images: no windows, float32 at once
            return list(self._centred(raw, labels))
        labels = labels.astype(np.float32).reshape(-1, 1)
        offsets, flips, rng = self._windows(len(raw), batch_id, train, epoch)
        pixels = augment.cut_windows(raw, self._inner, offsets) if self._inner else raw
        if pixels.dtype != np.uint8:  # a copy of the batch's own pixels, or of the windows
            pixels = pixels.astype(np.float32, copy=pixels is raw)
        return [self._stored_images(pixels, offsets, flips, rng), labels]

    def _windows(self, n: int, batch_id: int, train: bool,
                 epoch: int) -> tuple[np.ndarray, np.ndarray, np.random.Generator | None]:
        """Each case's window (top, left) and mirror, and the training generator the
        colour noise draws from next (None in tests): the crops of ``--inner-size``, or
        the whole image."""
        size = self.image_shape[-1]
        if not train:
            offsets, flips = augment.centre_windows(n, size, self._inner or size)
            return offsets, flips, None
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        rng = np.random.default_rng([self.options.seed, _AUGMENT_STREAM, epoch, batch_id])
        if self._inner:
            offsets, flips = augment.random_windows(n, size, self._inner, rng)
        else:
            offsets, flips = augment.centre_windows(n, size, size)
        return offsets, flips, rng

    def _stored_images(self, pixels: np.ndarray, offsets: np.ndarray, flips: np.ndarray,
                       rng: np.random.Generator | None,
                       channels_last: bool = False) -> StoredImages:
        """Stored windows with their recipe: the mean, the mirrors, and under
        ``--color-noise`` the shifts drawn next from a training ``rng``."""
        shifts = scale = None
        if rng is not None and self.options.color_noise > 0:
            shifts, scale = self._colour_noise(len(pixels), rng)
        return StoredImages(pixels, np.asarray(self._mean_value(), np.float32), offsets, flips,
                            shifts, scale, channels_last)

    def _serve_views(self, raw: np.ndarray, labels: np.ndarray) -> list[np.ndarray]:
        """Checked raw images and labels as ``get_test_views`` serves them."""
        if self.num_views == 1:
            images, labels = as_float(DataProvider._stored(self, raw, labels, 0, train=False,
                                                           epoch=0))
            return [images[None], labels]
        images, labels = self._centred(raw, labels)
        return [augment.multiview_crops(images, self._inner), labels]

    def _colour_noise(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, None]:
        """``--color-noise``'s shifts of ``n`` training cases, and no scale."""
        return augment.colour_shifts(n, self._colour_basis(), self.options.color_noise,
                                     rng), None

    def resident_bytes(self) -> int:
        """Bytes of the arrays the provider keeps for the whole run (its per-pixel mean,
        float32, unless a scalar mean is given), for :mod:`convnet.data.memory`."""
        return 0 if self.options.scalar_mean is not None else 4 * math.prod(
            self.image_shape)

    def num_cases(self, batch_id: int) -> int:
        if batch_id not in self._counts:
            self._checked_load(batch_id)
        return self._counts[batch_id]

    def check_dims(self, expected: dict[int, tuple[int, ...]]) -> None:
        """Raise :class:`DataError` unless every expected column has the provider's shape.

        A one-element expected shape ``(D,)`` also matches images of D values in
        total (a data layer read by an fc layer knows only its width).
        """
        for index, want in sorted(expected.items()):
            want = tuple(int(d) for d in want)
            have = self.data_dims.get(index)
            if have is None:
                raise DataError(f"{self.where}: the config reads data column {index} "
                                f"(dataIdx={index}) but the '{self.name}' provider has only "
                                f"columns {', '.join(map(str, sorted(self.data_dims)))}")
            if want == have or (len(want) == 1 and want[0] == math.prod(have)):
                continue
            hint = ""
            if (index == 0 and len(want) == 3 and want[0] == self.image_shape[0]
                    and want[1] == want[2] <= self.image_shape[-1] and want != have):
                hint = f"; pass --inner-size={want[1]} to crop the {format_shape(self.image_shape)} images"
            raise DataError(f"{self.where}: the config expects data column {index} of shape "
                            f"{format_shape(want)} but the '{self.name}' provider gives "
                            f"{format_shape(have)}{hint}")

    # -- the pipeline ------------------------------------------------------------

    def _centred(self, raw: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Full-size float32 images minus the mean, and the label column."""
        images = raw.astype(np.float32)
        images -= self._mean_value()
        return images, labels.astype(np.float32).reshape(-1, 1)

    def _check_available(self, batch_id: int) -> None:
        if self._available is not None and batch_id not in self._available_set:
            raise DataError(f"{self.where}: there is no batch {batch_id} "
                            f"({self._batch_source(batch_id)} {self._why_missing(batch_id)}); "
                            "available batches: "
                            f"{format_range(self._available) or 'none'}")

    def _checked_load(self, batch_id: int) -> tuple[np.ndarray, np.ndarray]:
        self._check_available(batch_id)
        images, labels = self._load(batch_id)
        labels = checked_batch(images, labels, self._batch_source(batch_id), self.num_classes)
        self._counts[batch_id] = len(images)
        return images, labels

    def _mean_value(self) -> np.ndarray:
        """The mean the images are centred on, kept: one array, whose identity is how a
        device knows it holds it already (a 0-d array for ``--scalar-mean``)."""
        with self._lock:
            if self._mean is None:
                if self.options.scalar_mean is not None:
                    self._mean = np.array(self.options.scalar_mean, np.float32)
                else:
                    self._mean = np.asarray(self._pixel_mean(), dtype=np.float32)
            return self._mean

    def _colour_basis(self) -> np.ndarray:
        mean = self._mean_value()
        with self._lock:
            if self._basis is None:
                if not self.train_batches:
                    raise DataError(f"{self.where}: colour noise is estimated from the first "
                                    "training batch, but the train range is empty")
                raw, _ = self._checked_load(self.train_batches[0])
                self._basis = augment.colour_basis(raw.astype(np.float32) - mean)
            return self._basis

    # -- option checks -----------------------------------------------------------

    def _select(self, chosen: list[int] | None, default: list[int], kind: str) -> list[int]:
        batches = list(default if chosen is None else chosen)
        if self._available is not None:
            missing = [b for b in batches if b not in self._available_set]
            if missing:
                raise DataError(f"{self.where}: the {kind} range names batch {missing[0]} "
                                f"({self._batch_source(missing[0])}), which "
                                f"{self._why_missing(missing[0])}; "
                                f"available batches: {format_range(self._available) or 'none'}")
        return batches

    def _why_missing(self, batch_id: int) -> str:
        """Why a batch is not available: "does not exist", "is a folder, not a regular file", ..."""
        return not_a_regular_file(self._batch_source(batch_id)) or "is not a batch file"

    def _check_inner_size(self, inner: int) -> int:
        if not inner:
            return 0
        if len(self.image_shape) != 3:
            raise DataError(f"{self.where}: --inner-size needs images, but the data is "
                            f"{format_shape(self.image_shape)} per case")
        if not 0 < inner <= self.image_shape[-1]:
            raise DataError(f"{self.where}: --inner-size={inner} does not fit the "
                            f"{format_shape(self.image_shape)} images (1..{self.image_shape[-1]})")
        return int(inner)

    def _check_numbers(self, options: DataOptions) -> None:
        if options.color_noise < 0 or not math.isfinite(options.color_noise):
            raise DataError(f"--color-noise must be >= 0, got {options.color_noise}")
        if options.color_noise > 0 and len(self.image_shape) != 3:
            raise DataError(f"{self.where}: --color-noise needs images, but the data is "
                            f"{format_shape(self.image_shape)} per case")
        if options.seed < 0:
            raise DataError(f"the data seed must be >= 0, got {options.seed}")
        mean = options.scalar_mean
        if mean is not None and self.pixel_max is not None and not 0 <= mean <= self.pixel_max:
            raise DataError(f"{self.where}: --scalar-mean {mean:g} is outside "
                            f"0..{self.pixel_max:g}, the range of the '{self.name}' pixels it "
                            "is subtracted from: give it in the data's units (0..1 for "
                            "digits, 0..255 for CIFAR and image batches)")
