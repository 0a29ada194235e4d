"""How fast ``python -m convnet.make_data`` converts photos, against decoding them alone.

Makes a class-folder tree of photo-like JPEGs of ImageNet's typical size (500 x 375,
quality 90, with noise so that they compress like photos), then times

* the reference: Pillow decoding every source JPEG, in this one process, the least
  any converter must do;
* make-data writing 256-pixel batches (``--size 256``, the defaults otherwise) on
  one and on two worker processes.

It prints images per second, each against the reference's, and what that means for
the 1,331,167 images of ILSVRC-2012 (training and validation).

    python bench/bench_make_data.py [--images 400] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from convnet.make_data.run import MakeDataOptions, make_data

ILSVRC_IMAGES = 1_331_167


def photo_jpeg(seed: int, width: int = 500, height: int = 375) -> bytes:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / width
    smooth = np.stack([127 + 90 * np.sin(rng.uniform(2, 9) * x + rng.uniform(2, 9) * y
                                         + rng.uniform(0, 6)) for _ in range(3)], axis=-1)
    pixels = np.clip(smooth + rng.normal(0, 12, smooth.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def make_tree(root: Path, images: int, classes: int = 10) -> list[Path]:
    paths = []
    for k in range(images):
        path = root / f"class{k % classes:02d}" / f"{k:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(photo_jpeg(k))
        paths.append(path)
    return paths


def decode_rate(paths: list[Path]) -> float:
    start = time.perf_counter()
    for path in paths:
        with Image.open(path) as image:
            image.convert("RGB").load()
    return len(paths) / (time.perf_counter() - start)


def make_data_rate(src: Path, tgt: Path, images: int, workers: int) -> float:
    start = time.perf_counter()
    make_data(MakeDataOptions(str(src), str(tgt), workers=workers, progress=False))
    return images / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--workers", default="1,2", help="worker counts to time, e.g. 1,2,8")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        paths = make_tree(root / "src", args.images)
        reference = decode_rate(paths)
        print(f"{args.images} photos of 500 x 375, to 256 x 256 batches")
        print(f"reference, Pillow decoding the sources in one process: {reference:8.1f} img/s")
        for workers in (int(w) for w in args.workers.split(",")):
            rate = make_data_rate(root / "src", root / f"out{workers}", args.images, workers)
            hours = ILSVRC_IMAGES / rate / 3600
            print(f"make-data, {workers} worker(s): {rate:8.1f} img/s = "
                  f"{rate / reference:.2f} x the reference; ILSVRC-2012 in {hours:.1f} h")


if __name__ == "__main__":
    main()
