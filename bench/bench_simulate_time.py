"""How long ``--print-plan --simulate`` takes on every reference config, and how far its
prediction moves between runs and with the profile size.

For each reference config (``examples/cuda-convnet2`` and ``examples/cuda-convnet-v1``
by default, or ``--configs DIR``: every ``layers-*.cfg`` with its
``layer-params-*.cfg``), on dummy data of the config's image size (ImageNet
3x224x224 and 1000 classes, the CIFAR nets 3x24x24 or 3x32x32 and 10 classes)
at ``--mini 128``, the command runs ``--repeat`` times in its own process; the
table gives each run's wall time (the target: under 30 s) and predicted step,
and the largest step over the smallest (the target: within 1.10).  ``--extrapolation``
instead predicts digits and the CIFAR-10 net at ``--mini 128`` from a profile at
the whole minibatch and from the automatic (small) one, alternately, and prints
how far apart they are:

    .venv/bin/python bench/bench_simulate_time.py --repeat 2
    .venv/bin/python bench/bench_simulate_time.py --extrapolation --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIRS = [ROOT / "examples" / "cuda-convnet2", ROOT / "examples" / "cuda-convnet-v1"]


def data_args(layer_def: Path) -> list[str]:
    if "imagenet" in layer_def.name:
        dims, classes = "3x224x224", "1000"
    else:
        text = layer_def.read_text()
        dims = "3x24x24" if re.search(r"^\s*type\s*=\s*local", text, re.M) else "3x32x32"
        classes = "10"
    return ["--data-provider", "dummy", "--data-dims", dims, "--num-classes", classes,
            "--dummy-cases", "128"]


def predict(layer_def: Path, params: Path, extra: list[str]) -> tuple[float, float]:
    """(wall seconds, predicted step seconds) of one --print-plan=json --simulate run."""
    command = [sys.executable, str(ROOT / "convnet.py"), "--layer-def", str(layer_def),
               "--layer-params", str(params), "--mini", "128", "--print-plan=json",
               "--simulate", *extra]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{layer_def.name}: {done.stderr.strip().splitlines()[-1]}")
    return seconds, json.loads(done.stdout)["simulation"]["step_seconds"]


def pairs(folders) -> list[tuple[Path, Path]]:
    out = []
    for folder in folders:
        for layer_def in sorted(Path(folder).glob("layers-*.cfg")):
            params = layer_def.with_name("layer-params-" + layer_def.name[len("layers-"):])
            if params.exists():
                out.append((layer_def, params))
    return out


def timing(folders, repeat: int) -> None:
    print(f"--print-plan --simulate at --mini 128 (load average {os.getloadavg()[0]:.1f})")
    print(f"{'config':<34} {'wall s':>14}  {'predicted ms':>22}  max/min")
    for layer_def, params in pairs(folders):
        runs = [predict(layer_def, params, data_args(layer_def)) for _ in range(repeat)]
        walls = " ".join(f"{w:.1f}" for w, _ in runs)
        steps = [s for _, s in runs]
        print(f"{layer_def.stem:<34} {walls:>14}  "
              f"{' '.join(f'{1000 * s:.1f}' for s in steps):>22}  {max(steps) / min(steps):.2f}")
    print(f"(load average {os.getloadavg()[0]:.1f} at the end)")


def extrapolation(repeat: int) -> None:
    examples = ROOT / "examples"
    nets = [("digits", examples / "digits-single.cfg", examples / "digits-params.cfg", []),
            ("cifar10-11pct", examples / "cuda-convnet2" / "layers-cifar10-11pct.cfg",
             examples / "cuda-convnet2" / "layer-params-cifar10-11pct.cfg",
             data_args(examples / "cuda-convnet2" / "layers-cifar10-11pct.cfg"))]
    print(f"predicted step at --mini 128: profile at 128 against the automatic size "
          f"(load average {os.getloadavg()[0]:.1f})")
    for name, layer_def, params, extra in nets:
        full, small = [], []
        for _ in range(repeat):  # alternately, so that the machine's phases hit both
            full.append(predict(layer_def, params, extra + ["--profile-mini", "128"])[1])
            small.append(predict(layer_def, params, extra)[1])
        f, s = statistics.median(full), statistics.median(small)
        print(f"{name:<16} whole minibatch {1000 * f:8.1f} ms, automatic size "
              f"{1000 * s:8.1f} ms: automatic / whole {s / f:.2f}")
    print(f"(load average {os.getloadavg()[0]:.1f} at the end)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", type=Path, nargs="*", default=DIRS)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--extrapolation", action="store_true")
    args = ap.parse_args()
    if args.extrapolation:
        extrapolation(args.repeat)
    else:
        timing(args.configs, args.repeat)


if __name__ == "__main__":
    main()
