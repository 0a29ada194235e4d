"""``batches.meta`` of a JPEG batch folder, read and checked once.

The original's meta file holds ``data_mean`` (3*S*S values, channel-major, a
flat column or a (3, S, S) array), ``color_pca`` (the standard deviations and
eigenvectors of the training pixels' colours), ``num_vis`` (3*S*S),
``batch_size``, ``label_names`` and optionally ``label_offset`` (added to every
stored label id).  Every field that disagrees with another gets its own error
here, before any batch is read.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from convnet.data.cifar import read_label_names
from convnet.data.convnet_batches import whole_positive
from convnet.data.safe_pickle import load_dict
from convnet.errors import DataError


@dataclass(frozen=True)
class ImageMeta:
    """What ``batches.meta`` says: image side S, the mean, the colour PCA, the labels."""

    path: str
    size: int
    data_mean: np.ndarray  # (3, S, S) float64
    pca_stdevs: np.ndarray | None  # (3,) float64
    pca_vectors: np.ndarray | None  # (3, 3) float64, one eigenvector per column
    label_names: list[str]
    label_offset: int
    batch_size: int | None


def read_meta(folder: str) -> ImageMeta:
    path = os.path.join(folder, "batches.meta")
    meta = load_dict(path, ("data_mean", "num_vis", "label_names"))
    num_vis = whole_positive(meta["num_vis"], f"{path}: 'num_vis'")
    side = math.isqrt(num_vis // 3)
    if num_vis % 3 or side * side * 3 != num_vis:
        raise DataError(f"{path}: num_vis={num_vis} is not 3 x S x S (the JPEG batches hold "
                        "square colour images)")
    mean = np.asarray(meta["data_mean"])
    if not np.issubdtype(mean.dtype, np.number) or mean.size != num_vis \
            or mean.shape not in ((num_vis,), (num_vis, 1), (1, num_vis), (3, side, side)):
        raise DataError(f"{path}: 'data_mean' should hold num_vis={num_vis} numbers (a flat "
                        f"column or 3x{side}x{side}), found shape "
                        f"{'x'.join(map(str, mean.shape)) or 'scalar'} of {mean.dtype}")
    mean = mean.reshape(3, side, side).astype(np.float64)
    if not np.isfinite(mean).all():
        raise DataError(f"{path}: 'data_mean' holds NaN or inf values")
    stdevs, vectors = _colour_pca(meta.get("color_pca"), path)
    offset = meta.get("label_offset", 0)
    if isinstance(offset, (bool, np.bool_)) or not isinstance(offset, (int, np.integer)):
        raise DataError(f"{path}: 'label_offset' should be a whole number, found {offset!r}")
    batch_size = meta.get("batch_size")
    if batch_size is not None:
        batch_size = whole_positive(batch_size, f"{path}: 'batch_size'")
    return ImageMeta(path, side, mean, stdevs, vectors, read_label_names(folder), int(offset),
                     batch_size)


def _colour_pca(value, path: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``color_pca`` = (standard deviations, eigenvectors): 3 numbers and a 3 x 3 matrix
    whose columns are the eigenvectors; absent is allowed (only --color-noise needs it)."""
    if value is None:
        return None, None
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise DataError(f"{path}: 'color_pca' should be (standard deviations, eigenvectors), "
                        f"found {type(value).__name__}")
    stdevs, vectors = (np.asarray(v) for v in value)
    if not (np.issubdtype(stdevs.dtype, np.number) and stdevs.size == 3
            and np.issubdtype(vectors.dtype, np.number) and vectors.shape == (3, 3)):
        raise DataError(f"{path}: 'color_pca' should hold 3 standard deviations and a 3x3 "
                        f"matrix of eigenvectors, found shapes "
                        f"{'x'.join(map(str, stdevs.shape)) or 'scalar'} and "
                        f"{'x'.join(map(str, vectors.shape)) or 'scalar'}")
    stdevs = stdevs.reshape(3).astype(np.float64)
    vectors = vectors.astype(np.float64)
    if not (np.isfinite(stdevs).all() and np.isfinite(vectors).all()) or (stdevs < 0).any():
        raise DataError(f"{path}: 'color_pca' holds negative standard deviations or NaN/inf")
    return stdevs, vectors
