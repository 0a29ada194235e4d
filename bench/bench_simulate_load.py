"""How far ``--simulate``'s prediction moves when the machine's load changes between runs.

Runs ``--print-plan=json --simulate`` on a config ``--repeat`` times with the machine as
it is and as often with ``--load N`` busy processes (``python -c 'while 1: pass'``)
beside it, alternately (as it is, loaded, as it is, ...), each in its own process, and
prints every run's predicted step with the load average before it, then the largest
prediction over the smallest (the target: within 1.15).  The runs share a store of
side-by-side figures of their own (``CONVNET_CACHE_DIR``, a new temporary folder: what
a machine's first runs see), so that a run whose workers could not run side by side
takes the earlier runs' (``convnet.app.prediction.side_by_side``); ``--loaded-first``
starts with a loaded run, which has no earlier figures to take.  By default the CIFAR-10
reference config (``examples/cuda-convnet2/layers-cifar10-11pct.cfg`` on dummy data,
``--gpu 0,1 --mini 128``) and the digits data-parallel config:

    flock /work/bench.lock .venv/bin/python bench/bench_simulate_load.py --load 2 --repeat 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_simulate_time import data_args, simulation  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "cifar10-11pct": (ROOT / "examples/cuda-convnet2/layers-cifar10-11pct.cfg",
                      ROOT / "examples/cuda-convnet2/layer-params-cifar10-11pct.cfg", True),
    "digits-data": (ROOT / "examples/digits-data.cfg", ROOT / "examples/digits-params.cfg",
                    False),
}


def busy_processes(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]


def stop(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        p.terminate()
    for p in processes:
        p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=2, help="busy processes in a loaded run")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each kind")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--loaded-first", action="store_true",
                        help="start each config with a loaded run (default: as it is)")
    parser.add_argument("--verbose", action="store_true",
                        help="each run's profile figures (run share, contention, wake-ups)")
    args = parser.parse_args()
    print(f"--print-plan --simulate --gpu 0,1 --mini 128, alternately as the machine is and "
          f"with {args.load} busy process(es) beside it")
    for name in args.configs:
        os.environ["CONVNET_CACHE_DIR"] = tempfile.mkdtemp(prefix="side-by-side-")
        layer_def, params, dummy = CONFIGS[name]
        extra = ["--gpu", "0,1"] + (data_args(layer_def) if dummy else [])
        predicted = []
        cells = []
        for i in range(2 * args.repeat):
            loaded = i % 2 == (0 if args.loaded_first else 1)
            busy = busy_processes(args.load) if loaded else []
            try:
                before = os.getloadavg()[0]
                _, sim = simulation(layer_def, params, extra)
            finally:
                stop(busy)
            ms = 1000 * sim["step_seconds"]
            predicted.append(ms)
            cells.append(f"{ms:.1f} ({'+' + str(args.load) if loaded else 'as is'}, "
                         f"load {before:.1f})")
            if args.verbose:
                print(f"  {name} run {i + 1}: ran {sim.get('profile_run_share', 1):.2f} of its "
                      f"runnable time, contention {sim['contention_median']:.2f} (side by side "
                      f"in {sim['side_by_side_rounds']} round(s), with "
                      f"{sim['earlier_side_by_side_profiles']} earlier), wake-ups "
                      f"{1000 * sim['start_wake_seconds']:.2f} / {1000 * sim['wake_seconds']:.2f}"
                      f" ms, profiled step {1000 * min(sim['profiled_step_seconds']):.1f} ms, "
                      f"dispatch {1e6 * sim['dispatch_seconds_per_task']:.0f} us")
        print(f"{name:<15} " + "  ".join(cells) +
              f"  max/min {max(predicted) / min(predicted):.2f}")


if __name__ == "__main__":
    main()
