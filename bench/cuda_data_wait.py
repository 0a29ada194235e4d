"""The share of a real ``--data-provider image`` run on the CUDA backend spent waiting
for data, on JPEG batches this script writes.

    python bench/cuda_data_wait.py [--batches 4] [--cases 512] [--size 256] [--inner 224]
                                   [--mini 128] [--epochs 2] [--gpu 0,0] [--backend cuda]
                                   [--json FILE]

Writes ``--batches`` training batches and one test batch of ``--cases`` photo-like
JPEGs (bench/bench_data.py's writer, as make-data writes them) in a temporary folder,
trains cuda-convnet2's ``layers-imagenet-2gpu-data.cfg`` on them for ``--epochs``
epochs with ``--backend cuda`` (two logical devices on GPU 0 by default), and reads
the run's own lines: the images/s of its last epoch and ``waited X s for training
data: Y% of Z s`` (the whole run: the first batch, which nothing loads ahead, counts
too, so a longer run shows the steady state better).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_data import LAYERS, PARAMS, TEST_BATCH, write_set  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--cases", type=int, default=512)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--inner", type=int, default=224)
    ap.add_argument("--mini", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--gpu", default="0,0")
    ap.add_argument("--backend", default="cuda", help="cuda (cpu to try the script out)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    result = {"config": LAYERS.name, "backend": args.backend, "gpus": args.gpu,
              "images": args.batches * args.cases * args.epochs}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "batches"
        write_set(folder, args.batches, args.cases, args.size)
        proc = subprocess.run(
            [sys.executable, str(ROOT / "convnet.py"), "--data-path", str(folder),
             "--data-provider", "image", "--train-range", f"0-{args.batches - 1}",
             "--test-range", str(TEST_BATCH), "--inner-size", str(args.inner),
             "--layer-def", str(LAYERS), "--layer-params", str(PARAMS), "--backend",
             args.backend, "--gpu", args.gpu, "--mini", str(args.mini), "--epochs",
             str(args.epochs), "--no-progress"],
            capture_output=True, text=True)
    print(proc.stdout + proc.stderr, end="")
    waited = re.search(r"waited ([\d.]+) s for training data: ([\d.]+)% of ([\d.]+) s",
                       proc.stdout)
    speed = re.findall(r"([\d.]+)\s+img/s", proc.stdout)
    if proc.returncode != 0 or waited is None:
        result["error"] = (f"exit {proc.returncode}: "
                           f"{(proc.stderr.strip() or proc.stdout.strip())[-300:]}")
    else:
        result.update(wait_seconds=float(waited.group(1)), wait_percent=float(waited.group(2)),
                      train_seconds=float(waited.group(3)) - float(waited.group(1)),
                      images_per_s=float(speed[-1]) if speed else None)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
