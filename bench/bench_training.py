"""Training-step benchmark of a CIFAR-10 net: this engine on one and on two CPU devices
against the same network in PyTorch, and the machine's GEMM peak.

    python bench/bench_training.py [--net cifar10-11pct|resnet20] [--rounds 5] [--steps 6]
                                   [--mini 128] [--size 32] [--profile] [--no-torch]
                                   [--no-bound] [--gpus 0 0,1]

The net is cuda-convnet2's ``layers-cifar10-11pct.cfg`` with its
``layer-params-cifar10-11pct.cfg`` (``--net resnet20``: ``examples/resnet20-cifar10.cfg``,
ResNet-20 with batch normalisation, whose statistics the two devices combine) on 3x32x32
dummy images (random normal, 10 classes), minibatches of 128.  The config's ``gpu=``
lines (conv1 and logprob) become ``gpu=0`` or ``gpu=0,1`` in a temporary copy, which
makes the whole net one-device or data-parallel.  A training step is ``Executor.step``: forward,
backward, all-reduce and the momentum update, the same call the command line
makes per minibatch (without data loading, which the command line overlaps).

The row ``2 halves, no sync`` is the bound two devices can reach on these
cores: two one-device executors in one process, each training on half of the
minibatch on its own worker thread at the same time, never meeting (no
all-reduce, no shared weights); its step is the time both halves take.  The
script prints how much of that bound the two-device engine reaches, which
separates what the executor costs from what the machine does to two busy
cores (shared caches and memory bandwidth).  ``--no-bound`` skips it.

The PyTorch column is the same network written with torch ops, PyTorch's
default CPU threads (one per core), float32, ``torch.optim.SGD`` with the
config's momentum, weight decay and per-layer learning rates, and the mean of
``cross_entropy`` as the loss (the engine's softmax + ``cost.logreg``):

* conv: ``conv2d`` on an input padded as the ceiling rule wants (for this net
  the symmetric padding of the config, so ``F.conv2d(padding=2)``);
* pool: ``max_pool2d(3, 2, ceil_mode=True)`` (the ceiling rule's 16 and 8);
* cmrnorm: ``F.local_response_norm(size=9, alpha=scale, beta=pow, k=minDiv)``:
  PyTorch divides alpha by size and sums over channels c-4..c+4 clipped at
  the edges, which is cmrnorm's ``minDiv + scale/size * sum x^2`` exactly;
* local: PyTorch has no locally-connected layer; ``F.unfold`` of the padded
  input and one batched matmul over the 64 output positions
  (``torch.bmm``), weights (positions, filters, C*3*3), bias per output;
* fc, then ``F.cross_entropy`` (log-softmax and the mean negative log
  likelihood in one op).

The torch net is built from the parsed config by ``bench/torch_net.py``, the one
builder every benchmark uses.  Before timing, the script checks that the two
compute the same thing (``bench/agreement.py``): both start from the engine's
initial weights and take one step on the same minibatch, and so does PyTorch in
float64 as the referee; it prints the costs and how many elements of the weight
updates are off the float64 step for the engine and for PyTorch float32 (relu and
max-pool switches within rounding put a few off in both; a different computation,
almost all), and passes when the engine is as close as PyTorch float32.  The
engine takes this step with direct convolutions, and a second line gives the counts
with the Winograd convolutions it is timed with (``bench/agreement.py``).

Every configuration runs in its own process (so that thread settings and the
allocator of one do not affect the others; ``bench/harness.py``), and the processes take turns:
each round runs ``--steps`` steps of each, after one warm-up round.  The table
gives the median step time over all rounds (images/s = minibatch / median)
and the spread (the 10th and 90th percentiles of the per-step images/s).

GFLOP/s counts the GEMM work of the conv, local and fc layers (2 * filters *
weights per filter * outputs per map * cases for a forward pass, times 3 for
forward, weight gradient and input gradient).  The GEMM peak is measured
here: numpy's (OpenBLAS) sgemm on one thread, on two threads with one BLAS
thread each (the engine's two-device arrangement) and PyTorch's ``mm`` with
its default threads, on 2048x2048 float32 matrices.

``--profile`` also prints the engine's per-layer time of each operation
(forward, backward, all-reduce, update, loads and copies), per device, as
mean ms per step; the command line's ``--profile`` prints the same figures
summed over devices.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import agreement  # noqa: E402  (bench/, next to this script)
import harness  # noqa: E402
import torch_net  # noqa: E402

EXAMPLES = ROOT / "examples"
#: --net: (layer-def, layer-params, what it is); both put their gpu= on conv1 and logprob
NETS = {
    "cifar10-11pct": (EXAMPLES / "cuda-convnet2" / "layers-cifar10-11pct.cfg",
                      EXAMPLES / "cuda-convnet2" / "layer-params-cifar10-11pct.cfg",
                      "CIFAR-10 reference net"),
    "resnet20": (EXAMPLES / "resnet20-cifar10.cfg", EXAMPLES / "resnet20-cifar10-params.cfg",
                 "ResNet-20 with batch normalisation (stats=global)"),
}
NUM_CLASSES = 10
BOUND = "2 halves, no sync"  # label of halves_worker's row


# ------------------------------------------------------------------ the net

def layer_def_for(net: str, num_devices: int, folder: Path) -> Path:
    """The net's layer file, with its ``gpu=`` lines made ``gpu=0,1,...`` for the devices."""
    text = NETS[net][0].read_text()
    devices = ",".join(str(i) for i in range(num_devices))
    text, count = re.subn(r"(?m)^gpu=[0-9,]+\s*$", f"gpu={devices}", text)
    assert count == 2, "expected gpu= on conv1 and logprob"
    path = folder / f"{NETS[net][0].stem}-{num_devices}dev.cfg"
    path.write_text(text)
    return path


def load(net: str, num_devices: int, size: int, folder: Path):
    from convnet.config import load_net

    return load_net(layer_def_for(net, num_devices, folder), NETS[net][1],
                    data_dims={0: (3, size, size), 1: (1,)}, num_classes=NUM_CLASSES)


def make_batch(mini: int, size: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.standard_normal((mini, 3, size, size), dtype=np.float32),
            rng.integers(0, NUM_CLASSES, (mini, 1)).astype(np.float32)]


# ------------------------------------------------------------------ workers

def halves_worker(args) -> None:
    """The machine's bound for two devices (:func:`harness.serve_two_halves`)."""
    with tempfile.TemporaryDirectory() as tmp:
        net = load(args.net, 1, args.size, Path(tmp))
    half = args.mini // 2
    harness.serve_two_halves(net, [make_batch(half, args.size, seed) for seed in (0, 1)],
                             {"ready": True}, warmups=2)


def engine_worker(args) -> None:
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor
    from convnet.plan.planner import make_plan

    gpus = tuple(range(args.devices))
    with tempfile.TemporaryDirectory() as tmp:
        net = load(args.net, args.devices, args.size, Path(tmp))
    plan = make_plan(net, gpus, args.mini)
    ex = Executor(net, plan, make_devices(gpus, "cpu"), seed=0, parallel=True)
    batch = make_batch(args.mini, args.size)
    for _ in range(2):
        ex.step(batch)
    harness.reply({"ready": True})
    try:
        harness.serve(lambda: ex.step(batch), lambda k: harness.engine_profile(ex, batch, k))
    finally:
        ex.close()


def torch_worker(args) -> None:
    if args.keep_freed:  # the engine's allocator setting, for comparison
        from convnet.runtime.devices.cpu import keep_freed_memory

        keep_freed_memory()
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        net = load(args.net, 1, args.size, Path(tmp))
    check = agreement.same_net(torch, net, (0,), make_batch(args.mini, args.size, seed=1))
    tnet = torch_net.build(torch, net, agreement.initial_weights(net, (0,), args.mini))
    step = tnet.trainer(torch, *make_batch(args.mini, args.size))
    for _ in range(2):
        step()
    harness.reply({"ready": True, "check": check, "threads": torch.get_num_threads(),
                   "version": torch.__version__})
    harness.serve(step, extra=lambda: {"torch_gemm": torch_gemm_gflops(torch)})


# ---------------------------------------------------------------- GEMM peak

GEMM_N = 2048


def _best_gflops(fn, flops: float, repeat: int = 5) -> float:
    fn()
    best = min(_time(fn) for _ in range(repeat))
    return flops / best / 1e9


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def numpy_gemm_gflops() -> dict:
    """numpy sgemm on one BLAS thread, and on two threads with one BLAS thread each."""
    import threading

    import numpy as np
    from threadpoolctl import threadpool_limits

    n = GEMM_N
    rng = np.random.default_rng(0)
    mats = [(rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32),
             np.empty((n, n), np.float32)) for _ in range(2)]
    flops = 2.0 * n ** 3
    with threadpool_limits(1, user_api="blas"):
        one = _best_gflops(lambda: np.matmul(*mats[0][:2], out=mats[0][2]), flops)
        reps = 4

        def work(i):
            for _ in range(reps):
                np.matmul(*mats[i][:2], out=mats[i][2])

        best = math.inf
        for _ in range(3):
            threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
            t = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            best = min(best, time.perf_counter() - t)
        two = 2 * reps * flops / best / 1e9
    return {"numpy_1thread": one, "numpy_2threads": two}


def torch_gemm_gflops(torch) -> float:
    n = GEMM_N
    a, b = torch.rand(n, n), torch.rand(n, n)
    out = torch.empty(n, n)
    return _best_gflops(lambda: torch.mm(a, b, out=out), 2.0 * n ** 3)


def gemm_worker(args) -> None:
    harness.reply({"ready": True})
    harness.serve(lambda: None, extra=numpy_gemm_gflops)


# ------------------------------------------------------------------- parent

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--net", choices=sorted(NETS), default="cifar10-11pct",
                    help="the net to time (default: cifar10-11pct, the CIFAR-10 reference net)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--steps", type=int, default=6, help="steps per configuration and round")
    ap.add_argument("--mini", type=int, default=128)
    ap.add_argument("--size", type=int, default=32, help="image side (default 32)")
    ap.add_argument("--gpus", nargs="+", default=["0", "0,1"],
                    help="engine device lists to time (default: 0 and 0,1)")
    ap.add_argument("--no-torch", action="store_true")
    harness.add_winograd_option(ap)
    ap.add_argument("--no-bound", action="store_true",
                    help="skip the two-independent-halves bound")
    ap.add_argument("--profile", action="store_true",
                    help="also print the per-layer profile of each engine configuration")
    ap.add_argument("--torch-keep-freed", action="store_true",
                    help="also time PyTorch with the engine's malloc setting "
                         "(convnet.runtime.devices.cpu.keep_freed_memory)")
    child_roles = {"engine": engine_worker, "halves": halves_worker, "torch": torch_worker,
                   "gemm": gemm_worker}
    ap.add_argument("--worker", choices=sorted(child_roles), help=argparse.SUPPRESS)
    ap.add_argument("--devices", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--keep-freed", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    kernel_args = harness.winograd_choice(args)
    if args.worker:  # a child process of the run below
        child_roles[args.worker](args)
        return 0

    import numpy as np

    args.no_torch = harness.without_torch(args.no_torch)
    common = ["--net", args.net, "--mini", str(args.mini), "--size", str(args.size)] + kernel_args
    with tempfile.TemporaryDirectory() as tmp:
        net = load(args.net, 1, args.size, Path(tmp))
    flops = harness.gemm_flops(net, args.mini)
    start_load = os.getloadavg()
    began = time.perf_counter()
    print(f"{NETS[args.net][2]} ({NETS[args.net][0].name}), 3x{args.size}x{args.size} dummy data, "
          f"minibatch {args.mini}, float32; {flops / 1e9:.2f} GFLOP of conv/local/fc GEMMs "
          f"per training step")
    if kernel_args:
        print("engine convolutions: all direct (--no-winograd)")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
          f"Python {platform.python_version()}, numpy {np.__version__}")

    def Worker(label, argv):
        return harness.Worker(label, __file__, argv, str(ROOT))

    gemm = Worker("gemm", ["--worker", "gemm"])
    peaks = [gemm.ask("extra")]
    workers = []
    for g in args.gpus:
        n = len(g.split(","))
        workers.append(Worker(f"engine --gpu {g}", ["--worker", "engine", "--devices", str(n)]
                              + common))
    bound = None
    if not args.no_bound and any(len(g.split(",")) == 2 for g in args.gpus):
        bound = Worker(BOUND, ["--worker", "halves"] + common)
        workers.append(bound)
    if not args.no_torch:
        tw = Worker("PyTorch", ["--worker", "torch"] + common)
        workers.append(tw)
        print(f"PyTorch {tw.hello['version']}, {tw.hello['threads']} threads.  Same net check "
              f"(one step from the engine's weights): {tw.hello['check']['text']}")
        if "winograd" in tw.hello["check"]:
            print(f"  {tw.hello['check']['winograd']}")
        peaks[0]["torch"] = tw.ask("extra")["torch_gemm"]
        if args.torch_keep_freed:
            workers.append(Worker("PyTorch keep-freed", ["--worker", "torch", "--keep-freed"]
                                  + common))

    walls, cpus = harness.take_turns(workers, args.rounds, args.steps)
    profiles = {}
    if args.profile:
        for w in workers:
            if w.label.startswith("engine"):
                profiles[w.label] = w.ask(f"profile {args.steps}")
    peaks.append(gemm.ask("extra"))
    if not args.no_torch:
        peaks[-1]["torch"] = tw.ask("extra")["torch_gemm"]
    for w in workers + [gemm]:
        w.close()
    end_load = os.getloadavg()

    peak = {k: max(p[k] for p in peaks if k in p) for k in peaks[0]}
    print(f"\nGEMM peak, {GEMM_N}x{GEMM_N} float32 (best of two measurements): numpy/OpenBLAS "
          f"{peak['numpy_1thread']:.0f} GFLOP/s on one thread, {peak['numpy_2threads']:.0f} on "
          "two threads with one BLAS thread each" +
          (f"; PyTorch mm {peak['torch']:.0f} GFLOP/s with its default threads"
           if "torch" in peak else ""))
    machine_peak = max(peak.values())
    print(f"\n{args.rounds} rounds x {args.steps} steps per configuration; img/s = "
          f"{args.mini} / median step time; spread = 10th-90th percentile of per-step img/s; "
          f"cpu = process CPU time / wall time")
    print(f"{'run':<18} {'step ms':>8} {'img/s':>8} {'spread':>13} {'cpu':>5} {'GFLOP/s':>8} "
          f"{'% peak':>7}")
    rates = {}
    for w in workers:
        med = statistics.median(walls[w.label])
        ips = [args.mini / t for t in walls[w.label]]
        rates[w.label] = args.mini / med
        util = sum(cpus[w.label]) / sum(walls[w.label])
        gf = flops / med / 1e9
        print(f"{w.label:<18} {1e3 * med:8.1f} {args.mini / med:8.1f} "
              f"{harness.pct(ips, 0.1):6.1f}-{harness.pct(ips, 0.9):6.1f} {util:5.2f} {gf:8.1f} "
              f"{100 * gf / machine_peak:6.1f}%")
    labels = [w.label for w in workers]
    print()
    eng = [lab for lab in labels if lab.startswith("engine")]
    if len(eng) >= 2:
        print(f"speedup {eng[-1]} over {eng[0]}: {rates[eng[-1]] / rates[eng[0]]:.2f}x")
    if bound is not None and len(eng) >= 2:
        print(f"bound for two devices on this machine ({BOUND} over {eng[0]}): "
              f"{rates[BOUND] / rates[eng[0]]:.2f}x; {eng[-1]} reaches "
              f"{100 * rates[eng[-1]] / rates[BOUND]:.0f}% of it")
    for ref in [lab for lab in labels if lab.startswith("PyTorch")]:
        for lab in eng:
            print(f"ratio {lab} / {ref}: {rates[lab] / rates[ref]:.2f}")
    print(f"% peak is of the best GEMM measured ({machine_peak:.0f} GFLOP/s).  Load average "
          f"{start_load[0]:.2f} at the start, {end_load[0]:.2f} at the end; "
          f"{time.perf_counter() - began:.0f} s in all")
    for label, prof in profiles.items():
        harness.print_profile(label, prof)
    return 0


if __name__ == "__main__":
    sys.exit(main())
