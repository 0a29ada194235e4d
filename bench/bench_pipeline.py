"""Micro-batch pipelines against one device, data parallelism and the two-device bound.

    python bench/bench_pipeline.py [--nets cifar imagenet] [--micro 1 2 4 8]
                                   [--schedules fill-drain 1f1b]
                                   [--rounds 2] [--steps 3] [--cifar-mini 128]
                                   [--imagenet-mini 32] [--cut LAYER] [--no-bound]

For each net (cuda-convnet2's ``layers-cifar10-11pct.cfg`` on 3x24x24 dummy
images, and ``layers-imagenet-1gpu.cfg`` on 3x224x224), on the two CPU devices:

* ``one device``: every layer on device 0;
* ``data-parallel``: every layer replicated on devices 0 and 1;
* ``split, M=m``: a layer-wise 2-device split, cut where the config's work
  balances (:func:`convnet.plan.layer_cuts.balanced_cuts`: the CIFAR-10 net at
  conv2, the ImageNet net at conv4; ``--cut LAYER`` starts the second stage at
  LAYER instead), each minibatch's shard cut into m
  micro-batches (``--micro-batches m``; m = 1 is the split without a pipeline)
  that flow by each of ``--schedules`` (``--pipeline-schedule``; with m = 1 both
  plan the same, so it runs once);
* ``2 halves, no sync``: the machine's bound for two devices, as
  ``bench/bench_training.py`` measures it: two one-device executors each training
  half of the minibatch at the same time, never meeting.

A step is ``Executor.step`` (forward, backward, the updates), as the command line
makes it per minibatch.  Every configuration runs in its own process and they
take turns (``bench/harness.py``); the table gives the median step time, images/s,
the ratios against one device and data parallelism, the share of the bound, and
the weight state (weights, gradients, momentum) the busiest device holds as if
each device had its own memory, as GPUs do (CPU replicas in one process share
one copy), and the activation memory each device held at its peak (the
executor's own accounting, :class:`convnet.runtime.step.memory.MemoryMeter`:
activations, what the layers keep for their backward calls, and gradients in
flight), measured in one step before the timed ones (the meter slows a step).
The defaults are quick (a few steps); on a quiet machine run it with
``--rounds 5 --steps 6`` for steadier figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import harness  # noqa: E402  (bench/, next to this script)
from convnet.plan.schedules import DEFAULT_SCHEDULE, SCHEDULES  # noqa: E402

REF = ROOT / "examples" / "cuda-convnet2"
NETS = {"cifar": ("cifar10-11pct", 24, 10), "imagenet": ("imagenet-1gpu", 224, 1000)}
BOUND = "2 halves, no sync"


def load(net_key: str):
    from convnet.config import load_net

    name, size, classes = NETS[net_key]
    return load_net(REF / f"layers-{name}.cfg", REF / f"layer-params-{name}.cfg",
                    data_dims={0: (3, size, size), 1: (1,)}, num_classes=classes)


def cut_of(net, cut: str | None) -> list[str]:
    """The first layer of the second stage: ``cut``, else where the work balances."""
    from convnet.plan.layer_cuts import balanced_cuts

    return [cut] if cut else balanced_cuts(net, 2)


def placed(net, placement: str, cut: str | None = None):
    """(the net with every layer's gpu= list for ``placement``, its --gpu list)."""
    from convnet.plan.layer_cuts import layer_wise_gpus, placed_order
    from convnet.plan.placements import Candidate

    names = placed_order(net)
    gpus = {"one": dict.fromkeys(names, (0,)), "data": dict.fromkeys(names, (0, 1)),
            "split": layer_wise_gpus(net, cut_of(net, cut))}[placement]
    return Candidate(placement, gpus).apply(net), ((0,) if placement == "one" else (0, 1))


def make_batch(net_key: str, mini: int, seed: int = 0):
    import numpy as np

    _, size, classes = NETS[net_key]
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((mini, 3, size, size), dtype=np.float32),
            rng.integers(0, classes, (mini, 1)).astype(np.float32)]


def engine_worker(args) -> None:
    from convnet.plan.planner import make_plan
    from convnet.plan.report import device_totals
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    from convnet.runtime.step.memory import MemoryMeter

    net, gpus = placed(load(args.net), args.placement, args.cut)
    plan = make_plan(net, gpus, args.mini, args.micro, args.schedule)
    weights = max(t.param_bytes for t in device_totals(plan, net))
    ex = Executor(net, plan, make_devices(gpus, "cpu"), seed=0, parallel=True)
    batch = make_batch(args.net, args.mini)
    ex.step(batch)
    ex.memory = meter = MemoryMeter(ex)
    ex.step(batch)
    ex.memory = None
    harness.reply({"ready": True, "weight_bytes": weights,
                   "activation_bytes": [p.activation_bytes for p in meter.peaks]})
    try:
        harness.serve(lambda: ex.step(batch))
    finally:
        ex.close()


def halves_worker(args) -> None:
    net, _ = placed(load(args.net), "one")
    half = args.mini // 2
    harness.serve_two_halves(net, [make_batch(args.net, half, seed) for seed in (0, 1)],
                             {"ready": True, "weight_bytes": 0, "activation_bytes": []})


def bench_net(args, net_key: str) -> None:
    from convnet.plan.layer_cuts import stage_shares

    mini = args.cifar_mini if net_key == "cifar" else args.imagenet_mini
    net = load(net_key)
    if args.cut and args.cut not in net.layers:
        raise SystemExit(f"--cut {args.cut}: the {net_key} net has no such layer")
    cuts = cut_of(net, args.cut)
    shares = ", ".join(f"{s:.0%}" for s in stage_shares(net, cuts))
    name, size, _ = NETS[net_key]
    print(f"\n{name}: 3x{size}x{size} dummy images, minibatch {mini}; split at "
          f"{cuts[0]} (stages with {shares} of the multiply-adds)")
    common = ["--net", net_key, "--mini", str(mini)] + (["--cut", args.cut] if args.cut else [])

    def worker(label, extra):
        return harness.Worker(label, __file__, ["--worker"] + extra + common, str(ROOT))

    workers = [worker("one device", ["engine", "--placement", "one"]),
               worker("data-parallel", ["engine", "--placement", "data"])]
    workers += [worker(f"split, M={m}" + (f", {schedule}" if m > 1 else ""),
                       ["engine", "--placement", "split", "--micro", str(m),
                        "--schedule", schedule])
                for m in args.micro
                for schedule in (args.schedules if m > 1 else args.schedules[:1])]
    if not args.no_bound:
        workers.append(worker(BOUND, ["halves"]))
    try:
        walls, _ = harness.take_turns(workers, args.rounds, args.steps, warmup=1)
    finally:
        for w in workers:
            w.close()
    rate = {w.label: mini / statistics.median(walls[w.label]) for w in workers}
    print(f"{'run':<24} {'step ms':>8} {'img/s':>7} {'x one':>6} {'/ data':>7} {'of bound':>9} "
          f"{'weights/device':>15} {'activations at peak, per device':>32}")
    for w in workers:
        bound = f"{rate[w.label] / rate[BOUND]:.0%}" if BOUND in rate else "-"
        weights = (f"{w.hello['weight_bytes'] / 2 ** 20:.1f} MiB" if w.hello["weight_bytes"]
                   else "-")
        held = " / ".join(f"{b / 2 ** 20:.1f}" for b in w.hello["activation_bytes"])
        held = f"{held} MiB" if held else "-"
        print(f"{w.label:<24} {1e3 * mini / rate[w.label]:8.1f} {rate[w.label]:7.1f} "
              f"{rate[w.label] / rate['one device']:6.2f} "
              f"{rate[w.label] / rate['data-parallel']:7.2f} {bound:>9} {weights:>15} "
              f"{held:>32}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", nargs="+", choices=sorted(NETS), default=["cifar", "imagenet"])
    ap.add_argument("--micro", nargs="+", type=int, default=[1, 2, 4, 8],
                    help="micro-batch counts of the split (default 1 2 4 8)")
    ap.add_argument("--schedules", nargs="+", choices=SCHEDULES, default=list(SCHEDULES),
                    help="pipeline schedules of the split (default: all)")
    ap.add_argument("--rounds", type=int, default=2, help="timed rounds (default 2)")
    ap.add_argument("--steps", type=int, default=3, help="steps per configuration and round")
    ap.add_argument("--cifar-mini", type=int, default=128)
    ap.add_argument("--imagenet-mini", type=int, default=32)
    ap.add_argument("--cut", help="the first layer of the second stage (default: where the "
                                  "config's multiply-adds balance best)")
    ap.add_argument("--no-bound", action="store_true", help="skip the two-halves bound")
    ap.add_argument("--worker", choices=["engine", "halves"], help=argparse.SUPPRESS)
    ap.add_argument("--net", choices=sorted(NETS), help=argparse.SUPPRESS)
    ap.add_argument("--placement", choices=["one", "data", "split"], help=argparse.SUPPRESS)
    ap.add_argument("--mini", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--schedule", choices=SCHEDULES, default=DEFAULT_SCHEDULE,
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.micro = args.micro[0] if isinstance(args.micro, list) else args.micro
        {"engine": engine_worker, "halves": halves_worker}[args.worker](args)
        return 0
    load_before = os.getloadavg()[0]
    print(f"{os.cpu_count()} logical CPUs; load average {load_before:.2f} at the start")
    for net_key in args.nets:
        bench_net(args, net_key)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
