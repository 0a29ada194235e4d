"""Training-step benchmark of the ImageNet reference nets: this engine against the same
net in PyTorch, speed and memory, in one run.

    python bench/bench_imagenet.py [--nets 1gpu 2gpu-data 2gpu-model] [--size 128]
                                   [--mini 64] [--rounds 3] [--steps 2]
                                   [--torch-threads 2] [--profile] [--no-torch]

The nets are cuda-convnet2's ``layers-imagenet-1gpu.cfg`` (on ``--gpu 0``),
``-2gpu-data`` (the same net data-parallel, ``--gpu 0,1``) and ``-2gpu-model`` (two
towers of half the width, model-parallel, ``--gpu 0,1``) with their layer-params
files, on dummy images (random normal, ``--size`` pixels square, 3 channels;
default 128, the AlexNet geometry of 224 with ``--size 224``) and 1000 classes,
minibatches of ``--mini`` (default 64).  The logical devices are CPU workers.

The PyTorch column is the same net built from the parsed config by
``bench/torch_net.py`` (conv2d with the ceiling rule's padding, the towers' two-input
convs as one conv of the concatenated inputs, local_response_norm, rnorm as an
avg_pool2d of x^2, dropout, cross_entropy, SGD with each layer's epsW/momW/wc), on
``--torch-threads`` threads (default 2, one per core of the two-core machine this
was written on).  1gpu and 2gpu-data are one net (the same layers; their params
files differ only in the learning rates, which change no operation), so one
PyTorch process times both.

Before timing, each net is checked (``bench/agreement.py``, in its own process): the
engine, on the devices it is timed on, PyTorch and PyTorch in float64 (the referee)
start from the engine's initial weights and take one step on the same minibatch,
PyTorch with the engine's dropout masks; the costs and every element of every weight
update are compared, and the engine passes when it is as close to the float64 step
as PyTorch float32 is.  The engine takes this step with direct convolutions; a second
line gives the same counts with the Winograd convolutions it is timed with (their
float32 rounding is larger, see ``bench/agreement.py``).

Speed: every configuration runs in its own process; they take turns (``--rounds``
rounds of ``--steps`` steps after a warm-up round, ``bench/harness.py``).  img/s =
minibatch / median step time; spread = 10th-90th percentile of the per-step img/s.

Memory, per process, after the timing: the peak resident set size (``getrusage``)
and the resident size before the first training step (the interpreter, the
libraries and the weights); for the engine also its own accounting
(``convnet.runtime.step.memory``: the arrays each device holds, sampled after every
task of two more training steps, high-water mark per device) next to
``--print-plan``'s estimate of the same (``convnet.plan.report.device_totals``);
for PyTorch also what autograd saves for the backward pass (saved-tensor hooks,
parameters excluded) and its parameter memory (weights, gradients, momentum).

``--profile`` also prints the engine's per-layer time of each operation per device
(mean ms per step; the command line's ``--profile`` prints the same summed over
devices).
"""

from __future__ import annotations

import argparse
import os
import platform
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

REF = ROOT / "examples" / "cuda-convnet2"
NETS = {"1gpu": (0,), "2gpu-data": (0, 1), "2gpu-model": (0, 1)}
NUM_CLASSES = 1000
TARGET = 1.3  # the two-device ratio to PyTorch
MIB = 2 ** 20
LEARNING_RATES = ("epsW", "epsB")


def load(name: str, size: int):
    from convnet.config import load_net

    return load_net(REF / f"layers-imagenet-{name}.cfg", REF / f"layer-params-imagenet-{name}.cfg",
                    data_dims={0: (3, size, size), 1: (1,)}, num_classes=NUM_CLASSES)


def signature(net) -> str:
    """The work of a net's training step, devices and learning rates left out (they
    change no operation): equal for 1gpu and 2gpu-data, whose params files differ
    in the learning rates only."""
    return repr([(ldef.name, ldef.type, ldef.inputs, ldef.neuron, sorted(ldef.attrs.items()),
                  sorted((k, repr(v)) for k, v in ldef.params.items() if k not in LEARNING_RATES))
                 for ldef in net])


def make_batch(mini: int, size: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.standard_normal((mini, 3, size, size), dtype=np.float32),
            rng.integers(0, NUM_CLASSES, (mini, 1)).astype(np.float32)]


# ------------------------------------------------------------------ workers

def check_worker(args) -> None:
    """The one-step agreement check of one net; leaves the engine's initial weights
    in ``--weights`` for the PyTorch worker (which so never builds an engine)."""
    import numpy as np
    import torch

    torch.set_num_threads(args.torch_threads)
    net = load(args.net, args.size)
    result = agreement.same_net(torch, net, NETS[args.net], make_batch(args.mini, args.size, 1))
    weights = agreement.initial_weights(net, NETS[args.net], args.mini)
    np.savez(args.weights, **{f"{layer}/{k}": v for layer, ws in weights.items()
                              for k, v in ws.items()})
    harness.reply({"ready": True, "check": result})


def engine_worker(args) -> None:
    from convnet.plan.planner import make_plan
    from convnet.plan.report import device_totals
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor
    from convnet.runtime.step.memory import MemoryMeter, peak_rss_bytes

    gpus = NETS[args.net]
    net = load(args.net, args.size)
    plan = make_plan(net, gpus, args.mini)
    ex = Executor(net, plan, make_devices(gpus, "cpu"), seed=0, parallel=True)
    batch = make_batch(args.mini, args.size)
    before = harness.resident_bytes()
    for _ in range(2):
        ex.step(batch)

    def memory():
        meter = MemoryMeter(ex)
        ex.memory = meter
        try:
            for _ in range(2):
                ex.step(batch)
        finally:
            ex.memory = None
        return {"rss_peak": peak_rss_bytes(), "rss_before": before, **meter.summary(),
                "estimate": [{"peak_bytes": t.peak_bytes, "activation_bytes": t.activation_bytes,
                              "param_bytes": t.param_bytes} for t in device_totals(plan, net, ex.store.shared)]}

    harness.reply({"ready": True})
    try:
        harness.serve(lambda: ex.step(batch), lambda k: harness.engine_profile(ex, batch, k),
                      memory=memory)
    finally:
        ex.close()


def torch_worker(args) -> None:
    import numpy as np
    import torch

    from convnet.runtime.step.memory import peak_rss_bytes

    torch.set_num_threads(args.torch_threads)
    net = load(args.net, args.size)
    weights: dict = {}
    with np.load(args.weights) as saved:
        for key in saved.files:
            layer, k = key.split("/")
            weights.setdefault(layer, {})[k] = saved[key]
    tnet = torch_net.build(torch, net, weights)
    del weights
    images, labels = make_batch(args.mini, args.size)
    step = tnet.trainer(torch, images, labels)
    before = harness.resident_bytes()
    for _ in range(2):
        step()

    def memory():
        params = {t.untyped_storage().data_ptr() for ts in tnet.tensors.values()
                  for t in ts.values()}
        saved: dict = {}

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                saved[storage.data_ptr()] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = tnet.loss(torch.from_numpy(images), torch.from_numpy(labels))
        loss.backward()
        count = sum(t.numel() for ts in tnet.tensors.values() for t in ts.values())
        return {"rss_peak": peak_rss_bytes(), "rss_before": before,
                "saved_bytes": sum(saved.values()), "param_bytes": 3 * 4 * count}

    harness.reply({"ready": True, "threads": torch.get_num_threads(),
                   "version": torch.__version__})
    harness.serve(step, memory=memory)


# ------------------------------------------------------------------- parent

def _mib(n: float) -> str:
    return f"{n / MIB:.0f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", nargs="+", choices=sorted(NETS), default=list(NETS),
                    help="which reference nets (default: all three)")
    ap.add_argument("--size", type=int, default=128, help="image side (default 128)")
    ap.add_argument("--mini", type=int, default=64, help="minibatch (default 64)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    ap.add_argument("--steps", type=int, default=2, help="steps per configuration and round")
    ap.add_argument("--torch-threads", type=int, default=2,
                    help="PyTorch's intra-op threads (default 2)")
    ap.add_argument("--no-torch", action="store_true", help="time the engine only")
    harness.add_winograd_option(ap)
    ap.add_argument("--profile", action="store_true",
                    help="also print the per-layer profile of each engine configuration")
    roles = {"engine": engine_worker, "torch": torch_worker, "check": check_worker}
    ap.add_argument("--worker", choices=sorted(roles), help=argparse.SUPPRESS)
    ap.add_argument("--net", choices=sorted(NETS), help=argparse.SUPPRESS)
    ap.add_argument("--weights", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mini % 2 or args.mini < 2:
        ap.error(f"--mini must be an even number (two devices), got {args.mini}")
    kernel_args = harness.winograd_choice(args)
    if args.worker:  # a child process of the run below
        roles[args.worker](args)
        return 0

    import numpy as np

    args.no_torch = harness.without_torch(args.no_torch)
    from convnet.errors import ConfigError

    try:
        nets = {name: load(name, args.size) for name in args.nets}
    except ConfigError as problem:
        print(f"bench_imagenet: --size {args.size} does not fit the nets: {problem}",
              file=sys.stderr)
        return 2
    common = ["--mini", str(args.mini), "--size", str(args.size),
              "--torch-threads", str(args.torch_threads)] + kernel_args
    start_load = os.getloadavg()
    began = time.perf_counter()
    print(f"ImageNet reference nets, 3x{args.size}x{args.size} dummy data, {NUM_CLASSES} "
          f"classes, minibatch {args.mini}, float32; engine devices are CPU workers")
    if kernel_args:
        print("engine convolutions: all direct (--no-winograd)")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
          f"Python {platform.python_version()}, numpy {np.__version__}")
    for name, net in nets.items():
        print(f"  imagenet-{name}: {harness.gemm_flops(net, args.mini) / 1e9:.1f} GFLOP of "
              f"conv/fc GEMMs per step, {sum(l.param_count for l in net if l.has_weights):,} "
              "weights")

    def Worker(label, argv):
        return harness.Worker(label, __file__, argv, str(ROOT))

    tmp = tempfile.TemporaryDirectory()
    engines, torches, reference = {}, {}, {}
    try:
        if not args.no_torch:
            print("\nSame-net checks (one step from the engine's weights, the engine on the "
                  "devices it is timed on,\nPyTorch float32 and float64 with the engine's "
                  "dropout masks):")
            by_signature: dict = {}
            for name, net in nets.items():
                weights = os.path.join(tmp.name, f"{name}.npz")
                check = Worker(f"check {name}", ["--worker", "check", "--net", name,
                                                 "--weights", weights] + common)
                check.close()
                print(f"  imagenet-{name} --gpu {','.join(map(str, NETS[name]))}: "
                      f"{check.hello['check']['text']}")
                if "winograd" in check.hello["check"]:
                    print(f"    {check.hello['check']['winograd']}")
                key = signature(net)
                if key not in by_signature:
                    label = f"PyTorch {name}"
                    by_signature[key] = label
                    torches[label] = Worker(label, ["--worker", "torch", "--net", name,
                                                    "--weights", weights] + common)
                reference[name] = by_signature[key]
            hello = next(iter(torches.values())).hello
            print(f"PyTorch {hello['version']}, {hello['threads']} threads")
        for name in nets:
            label = f"engine {name}"
            engines[label] = Worker(label, ["--worker", "engine", "--net", name] + common)
        workers = list(engines.values()) + list(torches.values())
        walls, cpus = harness.take_turns(workers, args.rounds, args.steps)
        memory = {w.label: w.ask("memory") for w in workers}
        profiles = ({label: w.ask(f"profile {args.steps}") for label, w in engines.items()}
                    if args.profile else {})
    finally:
        for w in list(engines.values()) + list(torches.values()):
            w.close()
        tmp.cleanup()
    end_load = os.getloadavg()

    print(f"\nSpeed: {args.rounds} rounds x {args.steps} steps per configuration; img/s = "
          f"{args.mini} / median step time; spread = 10th-90th percentile of per-step img/s; "
          "cpu = process CPU time / wall time")
    print(f"{'run':<21} {'devices':>7} {'step ms':>8} {'img/s':>7} {'spread':>13} {'cpu':>5} "
          f"{'GFLOP/s':>8} {'vs PyTorch':>10}")
    rates = {w.label: args.mini / statistics.median(walls[w.label]) for w in workers}
    for w in workers:
        name = w.label.split()[-1]
        ips = [args.mini / t for t in walls[w.label]]
        util = sum(cpus[w.label]) / sum(walls[w.label])
        gflops = harness.gemm_flops(nets[name], args.mini) / statistics.median(walls[w.label]) / 1e9
        devices = ",".join(map(str, NETS[name])) if w.label.startswith("engine") else \
            f"{args.torch_threads} thr"
        ratio = (f"{rates[w.label] / rates[reference[name]]:9.2f}x"
                 if w.label.startswith("engine") and name in reference else "")
        print(f"{w.label:<21} {devices:>7} {1e3 * statistics.median(walls[w.label]):8.0f} "
              f"{rates[w.label]:7.1f} {harness.pct(ips, 0.1):6.1f}-{harness.pct(ips, 0.9):6.1f} "
              f"{util:5.2f} {gflops:8.1f} {ratio:>10}")
    for name, label in reference.items():
        if label.split()[-1] != name:
            print(f"({label} is also the reference of imagenet-{name}: the same work)")
    for name in nets:
        if name in reference and len(NETS[name]) == 2:
            r = rates[f"engine {name}"] / rates[reference[name]]
            print(f"imagenet-{name} on two devices: {r:.2f}x PyTorch (target {TARGET}x: "
                  f"{'met' if r >= TARGET else 'MISSED'})")

    print("\nMemory (MiB): process peak RSS and RSS before the first step; the engine's own "
          "accounting\n(arrays held, high-water mark per device) against --print-plan's "
          "estimate; PyTorch's autograd-saved tensors and parameter memory")
    print(f"{'run':<21} {'peak RSS':>8} {'before':>7} {'held':>6}  per device: measured / "
          "estimate (activation part measured / estimate)")
    for w in workers:
        m = memory[w.label]
        if w.label.startswith("engine"):
            cells = []
            for dev, est in zip(m["devices"], m["estimate"]):
                act = dev["activation_bytes"]
                cells.append(f"dev {dev['device']}: {_mib(dev['peak_bytes'])} / "
                             f"{_mib(est['peak_bytes'])} "
                             f"({est['peak_bytes'] / dev['peak_bytes'] - 1:+.0%}; act "
                             f"{_mib(act)} / {_mib(est['activation_bytes'])}, "
                             f"{est['activation_bytes'] / act - 1:+.0%})")
            print(f"{w.label:<21} {_mib(m['rss_peak']):>8} {_mib(m['rss_before']):>7} "
                  f"{_mib(m['process_peak_bytes']):>6}  " + "; ".join(cells))
        else:
            print(f"{w.label:<21} {_mib(m['rss_peak']):>8} {_mib(m['rss_before']):>7} "
                  f"{'':>6}  saved for backward {_mib(m['saved_bytes'])}, parameters "
                  f"(weights, gradients, momentum) {_mib(m['param_bytes'])}")
    for name in nets:
        if name in reference:
            e, t = memory[f"engine {name}"]["rss_peak"], memory[reference[name]]["rss_peak"]
            print(f"imagenet-{name}: engine peak RSS {e / t:.2f}x PyTorch's")
    print(f"\nLoad average {start_load[0]:.2f} at the start, {end_load[0]:.2f} at the end; "
          f"{time.perf_counter() - began:.0f} s in all")
    for label, prof in profiles.items():
        harness.print_profile(label, prof, top=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
