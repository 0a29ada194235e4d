"""How long ``--print-plan --simulate`` takes on every reference config, and how far its
prediction moves between runs and with the profile size.

For each reference config (``examples/cuda-convnet2`` and ``examples/cuda-convnet-v1``
by default, or ``--configs DIR``: every ``layers-*.cfg`` with its
``layer-params-*.cfg``), on dummy data of the config's image size (ImageNet
3x224x224 and 1000 classes, the CIFAR nets 3x24x24 or 3x32x32 and 10 classes)
at ``--mini 128``, the command runs ``--repeat`` times in its own process; the
table gives each run's wall time (the target: under 30 s) and predicted step,
and the largest step over the smallest (the target: within 1.10).  ``--extrapolation``
instead predicts the nets whose automatic profile is smaller than their minibatch
(ImageNet 1gpu at 224x224 and ``--mini 128``: profiled at 16; CIFAR-10 at ``--mini
1024``: at 512) from that profile and from one at the whole minibatch, alternately,
and prints both beside the step measured at the whole minibatch (the sequential
one-device step the whole profile times, median):

    .venv/bin/python bench/bench_simulate_time.py --repeat 2
    .venv/bin/python bench/bench_simulate_time.py --extrapolation --repeat 2
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


def data_args(layer_def: Path, cases: int = 128) -> list[str]:
    if "imagenet" in layer_def.name:
        dims, classes = "3x224x224", "1000"
    else:
        text = layer_def.read_text()
        dims = "3x24x24" if re.search(r"^\s*type\s*=\s*local", text, re.M) else "3x32x32"
        classes = "10"
    return ["--data-provider", "dummy", "--data-dims", dims, "--num-classes", classes,
            "--dummy-cases", str(cases)]


def simulation(layer_def: Path, params: Path, extra: list[str], mini: int = 128
               ) -> tuple[float, dict]:
    """(wall seconds, the JSON's simulation) of one --print-plan=json --simulate run."""
    command = [sys.executable, str(ROOT / "convnet.py"), "--layer-def", str(layer_def),
               "--layer-params", str(params), "--mini", str(mini), "--print-plan=json",
               "--simulate", *extra]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{layer_def.name}: {done.stderr.strip().splitlines()[-1]}")
    return seconds, json.loads(done.stdout)["simulation"]


def predict(layer_def: Path, params: Path, extra: list[str]) -> tuple[float, float]:
    """(wall seconds, predicted step seconds) of one --print-plan=json --simulate run."""
    seconds, result = simulation(layer_def, params, extra)
    return seconds, result["step_seconds"]


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
    reference = ROOT / "examples" / "cuda-convnet2"
    nets = [("imagenet-1gpu", "imagenet-1gpu", 128), ("cifar10-11pct", "cifar10-11pct", 1024)]
    print(f"predicted step: automatic profile size against a profile at the whole minibatch "
          f"and the step measured there (load average {os.getloadavg()[0]:.1f})")
    for name, stem, mini in nets:
        layer_def, params = reference / f"layers-{stem}.cfg", reference / f"layer-params-{stem}.cfg"
        extra = data_args(layer_def, mini)
        whole, small, measured, size = [], [], [], 0
        for _ in range(repeat):  # alternately, so that the machine's phases hit both
            _, result = simulation(layer_def, params, extra + ["--profile-mini", str(mini)], mini)
            whole.append(result["step_seconds"])
            measured.append(statistics.median(result["profiled_step_seconds"]))
            _, result = simulation(layer_def, params, extra, mini)
            small.append(result["step_seconds"])
            size = int(result["profile_shard_size"])
        w, s, m = (statistics.median(v) for v in (whole, small, measured))
        print(f"{name:<14} --mini {mini:<5} profiled at {size:>4}: {1000 * s:8.1f} ms; at the "
              f"whole minibatch {1000 * w:8.1f} ms; measured {1000 * m:8.1f} ms: "
              f"automatic / whole {s / w:.2f}, automatic / measured {s / m:.2f}")
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
