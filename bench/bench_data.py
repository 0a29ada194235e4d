"""Does JPEG decoding keep up with training?  The ``image`` provider against the ImageNet net.

    python bench/bench_data.py [--cases 128] [--batches 2] [--size 256] [--inner 224]
                               [--mini 32] [--steps 2] [--threads 1,2] [--no-run]

Writes a JPEG batch set in a temporary folder (``--batches`` training batches and
one test batch of ``--cases`` photo-like ``--size`` x ``--size`` images, quality 90,
pickled as make-data pickles them) and measures, in this one process:

1. the reference: training images/s of cuda-convnet2's ``layers-imagenet-2gpu-data.cfg``
   (``--gpu 0,1``, CPU workers) on ``--inner`` x ``--inner`` crops, minibatches of
   ``--mini``: minibatch / median step time over ``--steps`` steps after one warm-up;
2. on each of ``--threads`` decoding threads: decoding alone (whole images), and
   decode+augment: what the training loop's loader makes of a batch
   (``load_batch``: the pickles read, the labels checked, every image decoded and its
   random crop window cut, the mirrors and colour noise drawn), images/s (the best of
   three passes over the training batches), and each as a ratio to (1): above 1 the
   data is ready before the net needs it; then the rest of the augmentation, which
   runs where the images become float32 on the device that trains on them (the mean,
   the mirror, the colour noise: one CUDA kernel on a GPU, numpy on a CPU device's
   worker), as images/s of the numpy form on one core;
3. unless ``--no-run``: a real ``convnet.py --data-provider image`` run of the same
   net over the training batches (one epoch), and the share of its training time
   spent waiting for data, from the line the run prints at its end (target: under 5%).
"""

from __future__ import annotations

import argparse
import io
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REF = ROOT / "examples" / "cuda-convnet2"
LAYERS, PARAMS = REF / "layers-imagenet-2gpu-data.cfg", REF / "layer-params-imagenet-2gpu-data.cfg"
CLASSES = 1000
TEST_BATCH = 1000


def photo_like(rng: np.random.Generator, size: int) -> np.ndarray:
    """Smooth shapes plus fine noise: JPEG sizes like a photo's (about 20-30 KB at 256)."""
    coarse = rng.random((size // 16 + 1, size // 16 + 1, 3)) * 200
    smooth = np.kron(coarse, np.ones((16, 16, 1)))[:size, :size]
    return np.clip(smooth + rng.random((size, size, 3)) * 50, 0, 255).astype(np.uint8)


def write_set(folder: Path, batches: int, cases: int, size: int) -> float:
    """The batch set, pickled as make-data pickles it (JPEGs as Python 2 strings, labels
    as lists of one label); returns the mean JPEG size in KB."""
    from PIL import Image

    from convnet.make_data.writer import pickle_sub_batch, sub_batches

    rng = np.random.default_rng(0)
    sizes = []
    for batch_id in list(range(batches)) + [TEST_BATCH]:
        jpegs = []
        for _ in range(cases):
            out = io.BytesIO()
            Image.fromarray(photo_like(rng, size)).save(out, "JPEG", quality=90)
            jpegs.append(out.getvalue())
        sizes += map(len, jpegs)
        labels = rng.integers(0, CLASSES, cases).tolist()
        part = folder / f"data_batch_{batch_id}"
        part.mkdir(parents=True)
        (part / f"data_batch_{batch_id}.0").write_bytes(
            pickle_sub_batch(sub_batches(jpegs, labels, cases)[0]))
    vectors, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    meta = {"data_mean": np.full((3 * size * size, 1), 110.0, np.float32),
            "color_pca": (np.array([60.0, 20.0, 8.0]), vectors), "num_vis": 3 * size * size,
            "batch_size": cases, "label_names": [f"class{k}" for k in range(CLASSES)]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return float(np.mean(sizes)) / 1024


def training_images_per_second(inner: int, mini: int, steps: int) -> float:
    from convnet.config import load_net
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    net = load_net(LAYERS, PARAMS, data_dims={0: (3, inner, inner), 1: (1,)},
                   num_classes=CLASSES)
    plan = make_plan(net, (0, 1), mini)
    executor = Executor(net, plan, make_devices((0, 1), "cpu"), seed=0, parallel=True)
    rng = np.random.default_rng(0)
    batch = [rng.standard_normal((mini, 3, inner, inner), dtype=np.float32) * 50,
             rng.integers(0, CLASSES, (mini, 1)).astype(np.float32)]
    try:
        executor.step(batch)  # warm-up
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            executor.step(batch)
            times.append(time.perf_counter() - started)
    finally:
        executor.close()
    return mini / statistics.median(times)


def provider_rates(folder: Path, batches: int, inner: int,
                   threads: int) -> tuple[float, float, float, float]:
    """(decode only, decode + augment, the float conversion on a CPU device) images/s, the
    best of three passes over the training batches, and the share of decode+augment's
    CPU time spent in the calling thread (the loader's serial part; with one thread
    everything runs there)."""
    from convnet.data import DataOptions, make_provider
    from convnet.data.image.batch_files import read_batch
    from convnet.data.image.decode import JpegDecoder

    provider = make_provider("image", str(folder), DataOptions(
        train_range=list(range(batches)), test_range=[TEST_BATCH], inner_size=inner,
        color_noise=0.1, decode_threads=threads))
    raws = [read_batch(str(folder / f"data_batch_{b}"), b) for b in provider.train_batches]
    cases = sum(len(r.jpegs) for r in raws)
    decoder = JpegDecoder(threads)
    decode = serve = convert = float("inf")
    own = total = 0.0
    try:
        for _ in range(3):
            started = time.perf_counter()
            for raw in raws:
                decoder.decode(raw.jpegs, provider.meta.size)
            decode = min(decode, time.perf_counter() - started)
            started, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
            loaded = [provider.load_batch(batch_id, train=True, epoch=1)[0]
                      for batch_id in provider.train_batches]
            serve = min(serve, time.perf_counter() - started)
            own += time.thread_time() - thread
            total += time.process_time() - process
            started = time.perf_counter()
            for images in loaded:
                images.to_float()
            convert = min(convert, time.perf_counter() - started)
    finally:
        decoder.close()
        provider.close()
    return cases / decode, cases / serve, cases / convert, own / max(total, 1e-9)


def data_wait(folder: Path, batches: int, inner: int, mini: int) -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "convnet.py"), "--data-path", str(folder),
         "--train-range", f"0-{batches - 1}", "--test-range", str(TEST_BATCH),
         "--data-provider", "image", "--inner-size", str(inner), "--gpu", "0,1",
         "--mini", str(mini), "--color-noise", "0.1", "--layer-def", str(LAYERS),
         "--layer-params", str(PARAMS), "--epochs", "1", "--no-progress"],
        capture_output=True, text=True)
    found = re.search(r"waited .*", proc.stdout)
    if proc.returncode != 0 or not found:
        return f"the run failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
    return found.group(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=128, help="images per batch")
    ap.add_argument("--batches", type=int, default=2, help="training batches")
    ap.add_argument("--size", type=int, default=256, help="stored image side")
    ap.add_argument("--inner", type=int, default=224, help="crop side (--inner-size)")
    ap.add_argument("--mini", type=int, default=32, help="minibatch of the training reference")
    ap.add_argument("--steps", type=int, default=2, help="timed steps of the reference")
    ap.add_argument("--threads", type=lambda text: [int(t) for t in text.split(",")],
                    default=[1, 2], help="decoding threads to measure, e.g. 1,4,8,16")
    ap.add_argument("--no-run", action="store_true", help="skip the real run (step 3)")
    args = ap.parse_args()
    import simplejpeg

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "batches"
        kb = write_set(folder, args.batches, args.cases, args.size)
        print(f"{args.batches} x {args.cases} JPEGs of {args.size}x{args.size} "
              f"(mean {kb:.1f} KB), crops of {args.inner}; simplejpeg {simplejpeg.__version__}")
        net = training_images_per_second(args.inner, args.mini, args.steps)
        print(f"reference: imagenet-2gpu-data trains {net:.1f} images/s "
              f"(--gpu 0,1, minibatch {args.mini})")
        serial = []
        for threads in args.threads:
            decode, serve, convert, share = provider_rates(folder, args.batches, args.inner,
                                                           threads)
            print(f"{threads} decoding thread(s): decode {decode:.0f} images/s "
                  f"({decode / net:.1f}x training), decode+augment {serve:.0f} images/s "
                  f"({serve / net:.1f}x training)")
            if threads > 1:
                serial.append(share)
        if serial:
            f = min(serial)
            print(f"the loader thread's own share of decode+augment's CPU time: {100 * f:.1f}% "
                  f"(the rest on the decoding threads): on N threads at most "
                  f"1/({f:.3f} + {1 - f:.3f}/N) times one thread's rate, "
                  + ", ".join(f"{n}: {1 / (f + (1 - f) / n):.1f}x" for n in (2, 4, 8, 16)))
        print(f"on a CPU device, the float conversion (mean, mirror, colour noise): "
              f"{convert:.0f} images/s on its worker (one CUDA kernel on a GPU)")
        if not args.no_run:
            print("real run: " + data_wait(folder, args.batches, args.inner, args.mini))


if __name__ == "__main__":
    main()
