"""Two devices in one process against one device in each of two MPI processes.

    python bench/bench_mpi.py [--net cifar10-11pct|resnet20] [--rounds 5] [--steps 8]
                              [--mini 128] [--size 32]

The net is the CIFAR-10 reference config (or ``--net resnet20``, ResNet-20 with
batch normalisation) made data-parallel over two logical devices, as in
``bench/bench_training.py`` (``gpu=0`` becomes ``gpu=0,1``), on dummy images,
minibatches of 128.  The same plan runs

* as ``1 process x 2 devices``: ``python bench_mpi.py --worker`` with
  ``--gpu 0,1`` (two worker threads, in-process copies);
* as ``2 processes x 1 device``: ``mpiexec -n 2 python bench_mpi.py
  --worker`` with ``--gpu 0`` per rank (the all-reduce's gradient and weight
  slices go between the processes over MPI).

Each round starts both once, in turn; each run takes two warm-up steps,
then ``--steps`` timed ones, and reports its median step.  The table gives
the median over rounds of images/s and the spread (lowest and highest run),
the ratio of the two medians, and the bytes one process sends to the other
per step, counted at the communicator and as the plan predicts.  The
machine may be shared with other work: compare the spread before reading
much into a small difference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ONE_PROCESS = "1 process x 2 devices"
TWO_PROCESSES = "2 processes x 1 device"


def worker(args) -> None:
    """Time ``args.steps`` training steps as this process's part of the run; rank 0
    prints one JSON line."""
    from bench_training import load, make_batch
    from convnet.plan.planner import make_plan
    from convnet.plan.ranks import rank_totals
    from convnet.runtime.processes.cluster import Cluster, cluster_devices, connect
    from convnet.runtime.step.executor import Executor

    comm, hosts = connect()
    gpus = (0,) if comm.size == 2 else (0, 1)
    cluster = Cluster(comm, len(gpus), hosts)
    sent = [0]
    if comm.size > 1:
        isend = comm.isend

        def counting_isend(array, dest, tag):
            sent[0] += array.nbytes
            return isend(array, dest, tag)

        comm.isend = counting_isend
    with tempfile.TemporaryDirectory() as folder:
        net = load(args.net, 2, args.size, Path(folder))
    plan = make_plan(net, gpus * comm.size, args.mini)
    executor = Executor(net, plan, cluster_devices(cluster, gpus, "cpu"), seed=0,
                        cluster=cluster)
    batch = make_batch(args.mini, args.size)
    try:
        for _ in range(2):
            executor.step(batch)
        sent[0] = 0
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            executor.step(batch)
            times.append(time.perf_counter() - start)
    finally:
        executor.close()
    if comm.rank == 0:
        planned = rank_totals(plan, 1, hosts)[0].sent_bytes
        print(json.dumps({"step": statistics.median(times), "sent": sent[0] / args.steps,
                          "planned": planned}), flush=True)


def _mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else "mpiexec"


def _run(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", default="cifar10-11pct", choices=["cifar10-11pct", "resnet20"])
    ap.add_argument("--rounds", type=int, default=5, help="runs of each (default 5)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per run (default 8)")
    ap.add_argument("--mini", type=int, default=128)
    ap.add_argument("--size", type=int, default=32, help="image side (default 32)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    me = [sys.executable, str(Path(__file__).resolve()), "--worker", "--net", args.net,
          "--steps", str(args.steps),
          "--mini", str(args.mini), "--size", str(args.size)]
    commands = {ONE_PROCESS: me, TWO_PROCESSES: [_mpiexec(), "-n", "2"] + me}
    results: dict[str, list[dict]] = {label: [] for label in commands}
    for _ in range(args.rounds):
        for label, command in commands.items():
            results[label].append(_run(command))
    from bench_training import NETS

    print(f"{NETS[args.net][2]}, data-parallel over 2 logical CPU devices, minibatch "
          f"{args.mini}, {args.rounds} runs of {args.steps} steps each")
    print(f"{'':<24} {'img/s (median)':>15} {'spread (min-max)':>18}")
    medians = {}
    for label, runs in results.items():
        rates = [args.mini / r["step"] for r in runs]
        medians[label] = statistics.median(rates)
        print(f"{label:<24} {medians[label]:>15.0f} {min(rates):>8.0f} - {max(rates):<8.0f}")
    print(f"ratio {TWO_PROCESSES} / {ONE_PROCESS}: "
          f"{medians[TWO_PROCESSES] / medians[ONE_PROCESS]:.2f}")
    two = results[TWO_PROCESSES][0]
    print(f"bytes sent per step by rank 0 to rank 1: {two['sent'] / 1024:.1f} KiB measured, "
          f"{two['planned'] / 1024:.1f} KiB planned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
