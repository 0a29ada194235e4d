"""The memory fit check's estimate against the measured peak, on the reference nets.

Each row trains one reference config of ``examples/cuda-convnet2/`` on ``dummy`` data
(three training batches of four minibatches, one test batch, one epoch) in a child
process, and compares what the run added to the process's peak resident size
(``VmHWM`` less the size after imports, :mod:`tests.support.peak_memory`) with the
host-RAM figure the fit check compares with the machine: the devices' peaks with
their kernels' temporaries and the data pipeline.  The ratio is the reference: the
estimate should be within 0.85-1.15 of the measurement.  Memory does not depend on
the machine's load, so the figures hold on a busy machine.

    python bench/bench_memory.py            # every reference net, two minibatch sizes
    python bench/bench_memory.py --quick    # one size each
    python bench/bench_memory.py --nets imagenet-1gpu --minis 128
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.peak_memory import estimated_peak, measured_peak  # noqa: E402

REF = ROOT / "examples" / "cuda-convnet2"
#: (config, --gpu, minibatch sizes)
NETS = [("cifar10-11pct", "0", (32, 128)),
        ("imagenet-1gpu", "0", (32, 128)),
        ("imagenet-2gpu-data", "0,1", (32, 128)),
        ("imagenet-2gpu-model", "0,1", (32, 128)),
        ("imagenet-4gpu-data", "0,1,2,3", (32, 128)),
        ("imagenet-4gpu-data-model", "0,1,2,3", (32, 128))]


def arguments(name: str, gpus: str, mini: int) -> list[str]:
    dims, classes = ("3x32x32", 10) if name.startswith("cifar") else ("3x224x224", 1000)
    return ["--layer-def", REF / f"layers-{name}.cfg",
            "--layer-params", REF / f"layer-params-{name}.cfg",
            "--data-provider", "dummy", "--data-dims", dims, "--num-classes", classes,
            "--gpu", gpus, "--mini", mini, "--dummy-cases", 4 * mini,
            "--train-range", "1-3", "--test-range", "4", "--epochs", "1", "--no-progress"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smaller minibatch only")
    parser.add_argument("--nets", nargs="+", choices=[name for name, *_ in NETS],
                        help="these configs only")
    parser.add_argument("--minis", nargs="+", type=int, help="these minibatch sizes")
    args = parser.parse_args()
    print(f"{'config':26} {'--gpu':8} {'mini':>5} {'measured MiB':>13} {'estimate MiB':>13} "
          f"{'measured/estimate':>18}")
    for name, gpus, minis in NETS:
        if args.nets and name not in args.nets:
            continue
        for mini in args.minis or (minis[:1] if args.quick else minis):
            argv = arguments(name, gpus, mini)
            measured, _ = measured_peak(argv, timeout=900)
            estimate = estimated_peak(argv)
            print(f"{name:26} {gpus:8} {mini:5} {measured / 2**20:13.0f} "
                  f"{estimate / 2**20:13.0f} {measured / estimate:18.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
