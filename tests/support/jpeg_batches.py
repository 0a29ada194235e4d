"""Writing small JPEG batch folders in cuda-convnet2's ImageNet format, for tests.

Images are drawn per class (a class colour plus a smooth pattern and noise), so
a net can learn them; they are encoded with Pillow and pickled as the
original's ``make-data.py`` stores them: ``batches.meta`` and ``data_batch_N``
folders of ``data_batch_N.K`` sub-batch pickles (or one pickle per batch).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
from PIL import Image


def class_images(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """``(N, size, size, 3)`` uint8 images: each class its own colour and stripes."""
    rng = np.random.default_rng(seed)
    palette = np.random.default_rng(99).integers(30, 226, (int(labels.max()) + 1, 3))
    rows = np.arange(size)[:, None, None]
    stripes = ((rows // max(1, size // 4) + labels[:, None, None, None]) % 2) * 40 - 20
    noise = rng.normal(0, 12, (len(labels), size, size, 3))
    images = palette[labels][:, None, None, :] + stripes + noise
    return np.clip(images, 0, 255).astype(np.uint8)


def encode_jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=quality)
    return out.getvalue()


def write_pickle(path: Path, obj, protocol: int = 2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=protocol))


def write_meta(folder: Path, size: int, classes: int, **changes) -> dict:
    """``batches.meta`` with a plausible mean and colour PCA; ``changes`` override keys
    (a value of None removes the key)."""
    rng = np.random.default_rng(7)
    vectors, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    meta = {"data_mean": np.full((3 * size * size, 1), 120.0, np.float32),
            "color_pca": (np.array([60.0, 20.0, 8.0], np.float32), vectors.astype(np.float32)),
            "num_vis": 3 * size * size, "batch_size": 3072,
            "label_names": [f"class{k}" for k in range(classes)]}
    meta.update(changes)
    meta = {k: v for k, v in meta.items() if v is not None}
    write_pickle(folder / "batches.meta", meta)
    return meta


def write_batch(folder: Path, batch_id: int, jpegs: list[bytes], labels: list,
                sub_batch: int | None = 4) -> Path:
    """``data_batch_N`` as a folder of sub-batches of ``sub_batch`` cases, or one pickle
    (``sub_batch=None``); returns its path."""
    path = folder / f"data_batch_{batch_id}"
    if sub_batch is None:
        write_pickle(path, {"data": jpegs, "labels": labels})
        return path
    for k, start in enumerate(range(0, len(jpegs), sub_batch)):
        write_pickle(path / f"data_batch_{batch_id}.{k}",
                     {"data": jpegs[start:start + sub_batch],
                      "labels": labels[start:start + sub_batch]})
    return path


def write_image_set(folder: Path, batches: list[int], cases: int = 12, size: int = 16,
                    classes: int = 3, multi_label: bool = False, sub_batch: int | None = 4,
                    seed: int = 0) -> dict[int, np.ndarray]:
    """A folder of JPEG batches and its meta; returns each batch's decoded-source pixels
    (before JPEG compression), for comparisons."""
    folder.mkdir(parents=True, exist_ok=True)
    write_meta(folder, size, classes)
    sources = {}
    for batch_id in batches:
        labels = np.random.default_rng([seed, batch_id]).integers(0, classes, cases)
        pixels = class_images(labels, size, seed + batch_id)
        stored = ([[int(l), int((l + 1) % classes)] for l in labels] if multi_label
                  else [int(l) for l in labels])
        write_batch(folder, batch_id, [encode_jpeg(p) for p in pixels], stored, sub_batch)
        sources[batch_id] = pixels
    return sources
