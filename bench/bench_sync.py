"""How the ``--sync`` modes trade accuracy for wall time: sync, local SGD and async.

    python bench/bench_sync.py --part digits   [--seeds 0 1 2] [--epochs 10] [--slow 3]
    python bench/bench_sync.py --part digits4  [--seeds 0 1 2] [--epochs 10]
    python bench/bench_sync.py --part digits-mpi [--seeds 0 1 2] [--epochs 10] [--slow 3]
    python bench/bench_sync.py --part digits-layers [--seeds 0 1 2] [--epochs 10] [--slow 3]
    python bench/bench_sync.py --part cifar    [--seeds 0] [--epochs 3] [--slow 3]
                               [--conditions normal slowed moving] [--test-freq N]
                               [--json FILE]

Every run is the real command line (``convnet.py``) in its own process, with a
test after every data batch (``--test-freq 1``, or every N batches) so that the
log has a test error curve.  From each run's ``log.csv`` the script reads the final test
error, the wall time of the run (``cumulative_time``: training and the
tests) and the wall time at which the test error first reached the final
test error of the ``sync`` run of the same seed and condition.  The reference
is that ``sync`` run: every figure is also given as a ratio to it, and the
modes take turns within each seed (one round per seed), so the machine's load
touches them alike.

Parts:

* ``digits``: ``examples/digits-data.cfg`` (the digits net, data parallel on
  two devices, its ``digits-params.cfg``: momentum 0.9) on the bundled digits,
  with sync, local:4, local:16 and async (S = 4), each normally and with
  device 1 made ``--slow`` times slower (``--slow-device 1:F``, a test-only
  option: the device sleeps F-1 times what each of its tasks took), and with the
  ``moving`` condition, ``--slow-device any:F``: at every step one device drawn
  at random is F times slower (a straggler that moves between devices, where
  replicas that run apart between averages gain over lockstep steps).
* ``digits4``: the same net on four devices (``gpu=0,1,2,3`` in a temporary
  copy; four logical devices on however many cores there are), sync against
  local:8 and async: the local:8 target is a final test error within one
  percentage point of sync's, mean over the seeds, after the same epochs (so
  the same cases seen).
* ``digits-mpi``: the ``digits`` part's net in two MPI processes of one device
  each (``mpiexec -n 2 ... --gpu 0``, the mpich wheel's ``mpiexec`` beside this
  Python), with sync, local:4 and async (S = 4), each normally and with rank 1's
  device (logical device 1) made ``--slow`` times slower.
* ``digits-layers``: the ``digits`` part's net with sync, local:8, and
  ``conv-sync+fc-local:8``: ``--sync sync`` with
  ``examples/digits-local-fc-params.cfg``, whose ``sync=local:8`` keys make the
  three fc layers average every 8 steps while the convolutions all-reduce
  every step.  Its all-reduces are counted per layer (5 weight layers: sync
  does 5 per step), as ``--print-plan`` counts them.
* ``cifar``: cuda-convnet2's CIFAR-10 reference net (``layers-cifar10-11pct.cfg``,
  its ``gpu=0`` lines made ``gpu=0,1``: data parallel on two devices) on dummy
  3x32x32 data, 4 training batches of 256 cases and a test batch of 256, with
  the learning rates (``epsW``, ``epsB``) 50 times the reference file's so that
  it learns within 3 epochs: small enough to run in minutes on two cores.  The
  dummy classes are separable, so the runs that learn end at or near 0% test
  error; the time to reach sync's final error is then the figure to compare.

All-reduces are counted per replicated weight layer set: ``sync`` all-reduces
the gradients every step; ``local:K`` averages the weights every K-th step;
``async`` runs none (each shard's update increments go from its replica to the
R-1 others instead: for two replicas as many bytes as a ring all-reduce, but
no replica waits for another).  A run "diverged" when it stopped with
"training diverged" (NaN or inf); it "did not learn" when it ended with a test
error above 80% (10 classes: chance is 90%).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXAMPLES = ROOT / "examples"
REF = EXAMPLES / "cuda-convnet2"
NOT_LEARNED_ERROR = 0.80
#: Condition -> its extra arguments ({:g}: the --slow factor).
CONDITIONS = {"normal": [], "slowed": ["--slow-device", "1:{:g}"],
              "moving": ["--slow-device", "any:{:g}"]}


def _copy_with_gpus(src: Path, out: Path, gpus: str, replace: str) -> Path:
    """``src`` with its ``gpu=`` lines that equal ``replace`` set to ``gpus``."""
    text = src.read_text()
    out.write_text(re.sub(rf"^gpu={re.escape(replace)}$", f"gpu={gpus}", text, flags=re.M))
    return out


def _scaled_rates(src: Path, out: Path, factor: float) -> Path:
    text = re.sub(r"^(eps[WB]=)([0-9.eE+-]+)$",
                  lambda m: f"{m.group(1)}{float(m.group(2)) * factor:g}", src.read_text(),
                  flags=re.M)
    out.write_text(text)
    return out


def _steps(args: list[str], processes: int = 1) -> int:
    """Training steps (minibatches) of a run (of ``processes`` processes): what its data
    batches cut into."""
    from convnet.app.command_line.parser import build_parser
    from convnet.app.options import resolve_options
    from convnet.app.run.assembly import make_data_provider
    from convnet.app.run.minibatches import minibatch_bounds

    opts = resolve_options(build_parser().parse_args(args))
    provider = make_data_provider(opts)
    shards = len(opts.gpu) * processes  # every net here is data parallel on all devices
    per_epoch = sum(len(minibatch_bounds(provider.num_cases(b), opts.mini, shards))
                    for b in provider.train_batches)
    return per_epoch * opts.epochs


def _run(args: list[str], folder: Path, processes: int = 1, test_freq: int = 1) -> dict:
    """One training run (under ``mpiexec -n processes`` when more than one); its final
    figures and its log's test curve."""
    launcher = ([str(Path(sys.executable).parent / "mpiexec"), "-n", str(processes)]
                if processes > 1 else [])
    command = [*launcher, sys.executable, str(ROOT / "convnet.py"), *args, "--no-progress",
               "--test-freq", str(test_freq), "--save-path", str(folder), "--overwrite"]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    seconds = time.perf_counter() - start
    diverged = "training diverged" in proc.stderr
    if proc.returncode != 0 and not diverged:
        raise SystemExit(f"run failed ({' '.join(args)}):\n{proc.stderr}")
    rows = []
    log = folder / "log.csv"
    if log.exists():
        with open(log, newline="") as f:
            rows = [(float(r["cumulative_time"]), float(r["test_error"]))
                    for r in csv.DictReader(f)]
    final = rows[-1][1] if rows and not diverged else float("nan")
    return {"rows": rows, "final_error": final, "wall": rows[-1][0] if rows else seconds,
            "process_seconds": seconds, "diverged": diverged,
            "not_learned": not diverged and final > NOT_LEARNED_ERROR}


def _time_to(rows, target: float) -> float | None:
    return next((t for t, err in rows if err <= target + 1e-12), None)


def _layer_all_reduces(args: list[str], steps: int) -> int:
    """All-reduces of a run's replicated layers in ``steps`` steps, each layer's counted
    (its gradients every step, or its weights every K-th step under local:K): what
    ``--print-plan`` counts per minibatch, times the steps."""
    from convnet.app.command_line.parser import build_parser
    from convnet.app.options import resolve_options
    from convnet.app.run.assembly import build_net_and_plan
    from convnet.config.values.typed import local_sgd_period
    from convnet.plan.ops import AllReduce
    from convnet.runtime.step.tasks import local_periods

    opts = resolve_options(build_parser().parse_args(args))
    net, plan = build_net_and_plan(opts)
    periods = local_periods(plan, net, local_sgd_period(opts.sync))
    return sum(steps // periods.get(op.layer, 1) for op in plan.ops if isinstance(op, AllReduce))


def _all_reduces(mode: str, steps: int) -> int:
    if mode == "sync":
        return steps
    if mode.startswith("local:"):
        return steps // int(mode.split(":")[1])
    return 0


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def run_part(name: str, base: list[str], modes: list[str], seeds: list[int],
             conditions: list[tuple[str, list[str]]], work: Path, processes: int = 1,
             mode_args: dict[str, list[str]] | None = None, test_freq: int = 1) -> dict:
    """Every mode under every condition for every seed, the modes taking turns.
    ``mode_args`` gives a mode's own arguments (default ``--sync MODE``); with it the
    all-reduces are counted per layer (:func:`_layer_all_reduces`)."""
    results: dict = {}
    args_of = {mode: (mode_args or {}).get(mode, ["--sync", mode]) for mode in modes}
    steps = _steps(base + args_of[modes[0]], processes)
    all_reduces = ({mode: _layer_all_reduces(base + args_of[mode], steps) for mode in modes}
                   if mode_args else {mode: _all_reduces(mode, steps) for mode in modes})
    for seed in seeds:
        for cond, extra in conditions:
            for mode in modes:
                folder = work / f"{name}-{cond}-{mode.replace(':', '')}-{seed}"
                run = _run([*base, *extra, *args_of[mode], "--seed", str(seed)], folder,
                           processes, test_freq)
                results.setdefault((cond, mode), []).append(run)
                print(f"  {name} {cond:<7} {mode:<9} seed {seed}: test error "
                      f"{100 * run['final_error']:5.2f}%  wall {run['wall']:6.2f} s", flush=True)
    table = {"steps": steps, "rows": []}
    for cond, _ in conditions:
        syncs = results[(cond, "sync")]
        for mode in modes:
            runs = results[(cond, mode)]
            reach = [_time_to(r["rows"], s["final_error"]) for r, s in zip(runs, syncs)]
            ratios = [r["wall"] / s["wall"] for r, s in zip(runs, syncs)]
            reach_ratio = [t / s["wall"] if t is not None else None
                           for t, s in zip(reach, syncs)]
            errors = [r["final_error"] for r in runs if r["final_error"] == r["final_error"]]
            table["rows"].append({
                "condition": cond, "mode": mode, "seeds": len(runs),
                "test_error_mean": statistics.mean(errors) if errors else None,
                "error_minus_sync_pp": (100 * (statistics.mean(errors) - statistics.mean(
                    [s["final_error"] for s in syncs])) if errors else None),
                "wall_median": _median([r["wall"] for r in runs]),
                "wall_vs_sync": _median(ratios),
                "reach_sync_error_median": _median(reach),
                "reach_vs_sync_wall": _median(reach_ratio),
                "reached": sum(t is not None for t in reach),
                "all_reduces": all_reduces[mode],
                "all_reduces_saved": all_reduces[modes[0]] - all_reduces[mode],
                "diverged": sum(r["diverged"] for r in runs),
                "not_learned": sum(r["not_learned"] for r in runs),
            })
    return table


def print_table(title: str, table: dict) -> None:
    print(f"\n{title} ({table['steps']} steps per run)")
    print("| condition | mode | test error (mean) | vs sync | wall s (median) | wall / sync "
          "| time to sync's error / sync's wall | all-reduces (saved) | diverged | did not learn |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in table["rows"]:
        pct = lambda v: "-" if v is None else f"{100 * v:.2f}%"
        num = lambda v, f="{:.2f}": "-" if v is None else f.format(v)
        reach = (f"{num(row['reach_vs_sync_wall'])} ({row['reached']}/{row['seeds']} reached)")
        print(f"| {row['condition']} | {row['mode']} | {pct(row['test_error_mean'])} | "
              f"{num(row['error_minus_sync_pp'], '{:+.2f} pp')} | {num(row['wall_median'])} | "
              f"{num(row['wall_vs_sync'])}x | {reach} | {row['all_reduces']} "
              f"({row['all_reduces_saved']}) | {row['diverged']}/{row['seeds']} | "
              f"{row['not_learned']}/{row['seeds']} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("digits", "digits4", "digits-mpi", "digits-layers",
                                           "cifar"),
                        required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--slow", type=float, default=3.0,
                        help="slowdown factor of the slowed device (slowed: device 1; "
                             "moving: one drawn at random each step)")
    parser.add_argument("--conditions", nargs="+", choices=tuple(CONDITIONS),
                        default=["normal", "slowed"],
                        help="run only these conditions (digits4 has only normal)")
    parser.add_argument("--test-freq", type=int, default=1,
                        help="training batches between tests (default 1: a test error "
                             "curve point after every batch)")
    parser.add_argument("--json", type=Path, default=None, help="also write the tables here")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores", flush=True)
    conditions = [(name, [arg.format(args.slow) for arg in extra])
                  for name, extra in CONDITIONS.items() if name in args.conditions]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.part == "digits":
            base = ["--layer-def", str(EXAMPLES / "digits-data.cfg"), "--layer-params",
                    str(EXAMPLES / "digits-params.cfg"), "--gpu", "0,1",
                    "--epochs", str(args.epochs or 10)]
            table = run_part("digits", base, ["sync", "local:4", "local:16", "async"],
                             args.seeds or [0, 1, 2], conditions, work,
                             test_freq=args.test_freq)
            title = "digits, 2 devices"
        elif args.part == "digits-layers":
            base = ["--layer-def", str(EXAMPLES / "digits-data.cfg"), "--gpu", "0,1",
                    "--epochs", str(args.epochs or 10)]
            params = ["--layer-params", str(EXAMPLES / "digits-params.cfg")]
            table = run_part("digits-layers", base, ["sync", "local:8", "conv-sync+fc-local:8"],
                             args.seeds or [0, 1, 2], conditions, work, mode_args={
                                 "sync": [*params, "--sync", "sync"],
                                 "local:8": [*params, "--sync", "local:8"],
                                 "conv-sync+fc-local:8": [
                                     "--layer-params",
                                     str(EXAMPLES / "digits-local-fc-params.cfg"),
                                     "--sync", "sync"]}, test_freq=args.test_freq)
            title = "digits, 2 devices, per-layer sync keys (all-reduces per layer)"
        elif args.part == "digits-mpi":
            base = ["--layer-def", str(EXAMPLES / "digits-data.cfg"), "--layer-params",
                    str(EXAMPLES / "digits-params.cfg"), "--gpu", "0",
                    "--epochs", str(args.epochs or 10)]
            table = run_part("digits-mpi", base, ["sync", "local:4", "async"],
                             args.seeds or [0, 1, 2], conditions, work, processes=2,
                             test_freq=args.test_freq)
            title = "digits, 2 processes x 1 device"
        elif args.part == "digits4":
            layer_def = _copy_with_gpus(EXAMPLES / "digits-data.cfg", work / "digits-4.cfg",
                                        "0,1,2,3", "0,1")
            base = ["--layer-def", str(layer_def), "--layer-params",
                    str(EXAMPLES / "digits-params.cfg"), "--gpu", "0,1,2,3",
                    "--epochs", str(args.epochs or 10)]
            table = run_part("digits4", base, ["sync", "local:8", "async"],
                             args.seeds or [0, 1, 2], [("normal", [])], work,
                             test_freq=args.test_freq)
            title = "digits, 4 devices"
        else:
            layer_def = _copy_with_gpus(REF / "layers-cifar10-11pct.cfg", work / "cifar-2.cfg",
                                        "0,1", "0")
            params = _scaled_rates(REF / "layer-params-cifar10-11pct.cfg",
                                   work / "cifar-params-x50.cfg", 50.0)
            base = ["--layer-def", str(layer_def), "--layer-params", str(params),
                    "--gpu", "0,1", "--data-provider", "dummy", "--data-dims", "3x32x32",
                    "--num-classes", "10", "--train-range", "1-4", "--test-range", "9",
                    "--dummy-cases", "256", "--mini", "128", "--epochs", str(args.epochs or 3)]
            table = run_part("cifar", base, ["sync", "local:4", "local:16", "async"],
                             args.seeds or [0], conditions, work, test_freq=args.test_freq)
            title = "CIFAR-10 reference net on dummy data, 2 devices"
    print_table(title, table)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
