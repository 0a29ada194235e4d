"""How well ``--simulate`` predicts: predicted against measured training-step time.

    python bench/bench_simulate.py [--rounds 5] [--part 1|2|3|4|all|imagenet]

Every net is profiled ONCE (as ``--simulate`` and ``--auto-place`` do: every
layer on one device, on one thread, at the minibatch and its half, plus a
data-parallel run on every core), and each of its placements is predicted from
that profile.  The measured step of a placement is the median of the counted
steps of ``--rounds`` rounds, where each round runs a block of consecutive
training steps of every placement of the net in turn (interleaved, so that a
disturbance of the shared machine hits all of them alike; only the last steps
of each block counted), parallel workers as in training.  The profile's rounds
(``--simulate`` takes three in a row) are taken one at the start of each of
these rounds: this virtual machine's speed moves in phases of seconds to
minutes (the digits net's one-device step measured 16 ms in one run and 27 ms
in another, nothing else running in the machine), and a profile taken before
the measurement is checked against a machine that has since changed speed.
Each table says how many cores other processes kept busy during its profile
and measurement, and how many cores' worth of work the machine gave two
processes side by side before and after (a virtual machine's cores can be
taken by work outside it): on two cores, a run beside other work measures
something else than the profile predicts.

Part 1: the digits configs of examples/ and the CIFAR-10 reference net
(cuda-convnet2's layers-cifar10-11pct on 3x32x32 dummy images) as one device
on ``--gpu 0`` and ``--gpu 0,1``, data-parallel and hybrid on ``--gpu 0,1``;
the scheme ranking of each net, predicted and measured; the peak memory of a
device, predicted (the plan's estimate) and measured (the executor's own
accounting, ``convnet.runtime.step.memory``).

Part 2: twelve placements of the CIFAR-10 net on two devices (the replica
counts of a chain must not grow along it, so: every layer up to a cut
data-parallel and the rest on one device, or a cut between two devices), each
predicted from one profile, and the Spearman rank correlation of predicted and
measured steps.

Part 3: ``--auto-place 2``'s choice for the digits net and the CIFAR-10 net,
measured against every hand-written config of the net in examples/.

Part 4: the ImageNet reference configs (1gpu on ``--gpu 0``, 2gpu-data and
2gpu-model on ``--gpu 0,1``) scaled down to 3x96x96 dummy images and minibatch
32, predicted and measured as in part 1.

``--part imagenet`` predicts (measures nothing but the profile) the ImageNet
reference configs on 1, 2, 4 and 8 GPUs of ``--kind`` (docs/SIMULATE.md).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from convnet.app.run import assembly  # noqa: E402
from convnet.app.command_line.parser import build_parser  # noqa: E402
from convnet.app.options import resolve_options  # noqa: E402
from convnet.app.prediction.simulation import NetProfiler, first_minibatch, measure_costs  # noqa: E402
from convnet.plan.planner import make_plan  # noqa: E402

EX = ROOT / "examples"
CIFAR_DEF = EX / "cuda-convnet2" / "layers-cifar10-11pct.cfg"
CIFAR_PARAMS = EX / "cuda-convnet2" / "layer-params-cifar10-11pct.cfg"
DUMMY_CIFAR = ["--data-provider", "dummy", "--data-dims", "3x32x32", "--num-classes", "10",
               "--dummy-cases", "256"]
CIFAR_CHAIN = ["conv1", "pool1", "rnorm1", "conv2", "rnorm2", "pool2", "local3", "local4",
               "fc10", "probs", "logprob"]


def options(*argv):
    """The options of a run; its profile (where one is taken) at its own --mini, as the
    validation has always taken it (bench_simulate_time.py measures the smaller
    automatic profile's extrapolation)."""
    opts = resolve_options(build_parser().parse_args([*map(str, argv)]))
    return replace(opts, profile_mini=opts.mini)


def placed(net, gpus: dict[str, tuple[int, ...]]):
    layers = dict(net.layers)
    for name, devices in gpus.items():
        layers[name] = replace(layers[name], gpu=devices)
    return replace(net, layers=layers)


def cut(data_through: str | None, rest: int) -> dict[str, tuple[int, ...]]:
    """Every CIFAR layer up to ``data_through`` on (0, 1), the rest on ``rest``."""
    k = CIFAR_CHAIN.index(data_through) + 1 if data_through else 0
    return {name: (0, 1) if i < k else (rest,) for i, name in enumerate(CIFAR_CHAIN)}


def split(first: int, last_conv: str = "pool2") -> dict[str, tuple[int, ...]]:
    k = CIFAR_CHAIN.index(last_conv) + 1
    return {name: (first,) if i < k else (1 - first,) for i, name in enumerate(CIFAR_CHAIN)}


class OtherWork:
    """Cores that other processes kept busy during the block (Linux: /proc/stat's busy
    time less this process's own), to tell a quiet run from one that shared the
    machine: on two cores, other work on one of them turns a data-parallel step
    into a one-device step.  Also :func:`cores_given` before and after, for work
    outside this machine that takes its cores."""

    cores: float | None = None
    given: list[float]

    @staticmethod
    def _busy() -> float | None:
        try:
            with open("/proc/stat") as f:
                ticks = [int(v) for v in f.readline().split()[1:8]]
        except OSError:
            return None
        idle = ticks[3] + ticks[4]  # idle, iowait
        return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def __enter__(self):
        self.given = [cores_given()]
        self._start = (time.perf_counter(), self._busy(), self._own())
        return self

    def __exit__(self, *exc) -> None:
        wall, busy, own = self._start
        if busy is not None:
            elapsed = time.perf_counter() - wall
            self.cores = max(self._busy() - busy - (self._own() - own), 0.0) / elapsed
        self.given.append(cores_given())

    def __str__(self) -> str:
        load = ("other processes' load unknown" if self.cores is None else
                f"other processes kept {self.cores:.2f} cores busy meanwhile")
        before, after = self.given
        return f"{load}; cores given {before:.2f} before, {after:.2f} after"


def _spin(count: int, results) -> None:
    start = time.perf_counter()
    total = 0
    for i in range(count):
        total += i
    results.put(time.perf_counter() - start)


def cores_given(count: int = 2_000_000, repeats: int = 3) -> float:
    """How many cores' worth of work the machine gives now: the same pure-Python loop in
    one process, then in one process per usable core side by side (cores * time alone
    / time side by side, the median of ``repeats``).  A virtual machine's cores can be
    busy with work outside it, which neither the load average nor /proc/stat show:
    then two workers gain less from two cores than the profile measured at another
    moment."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    cores = len(os.sched_getaffinity(0))
    results = context.Queue()

    def run(n: int) -> float:
        workers = [context.Process(target=_spin, args=(count, results)) for _ in range(n)]
        for worker in workers:
            worker.start()
        times = [results.get() for _ in workers]
        for worker in workers:
            worker.join()
        return statistics.mean(times)

    return statistics.median(cores * run(1) / run(cores) for _ in range(repeats))


#: Consecutive steps of one placement per round, and how many of them are counted:
#: the last.  The first steps of an executor after another's run slow (the digits
#: net's data-parallel step took 14-26 ms in its first 2-4 steps, then 11 ms).
BLOCK_STEPS = 8
COUNTED_STEPS = 4


def measure(opts, runs, rounds: int, memory: bool = False, profilers=()):
    """[(name, net)] or [(name, net, options)] (default ``opts``) -> measured median step
    seconds (and, with ``memory``, the most bytes any device held, the executor's own
    accounting over one more step).  Each round takes a round of each of
    ``profilers`` (:class:`NetProfiler`), then runs ``BLOCK_STEPS`` consecutive steps
    of every run in turn (interleaved, so that a disturbance of the shared machine, or
    a phase of it, hits all of them and the profiles alike, whatever their ``--gpu``)
    and counts the last ``COUNTED_STEPS`` of each block, the steady steps that
    training runs back to back."""
    from convnet.runtime.step.memory import MemoryMeter

    batch = first_minibatch(opts)
    executors = []
    try:
        for _, net, *own in runs:
            run_opts = own[0] if own else opts
            executors.append(assembly.make_executor(
                run_opts, net, make_plan(net, run_opts.gpu, run_opts.mini)))
        times = [[] for _ in runs]
        for _ in range(rounds):
            for profiler in profilers:
                profiler.round()
            for i, executor in enumerate(executors):
                block = [executor.step(batch, progress=1.0).seconds
                         for _ in range(BLOCK_STEPS)]
                times[i] += block[-COUNTED_STEPS:]
        peaks = []
        for executor in executors if memory else ():
            executor.memory = MemoryMeter(executor)
            executor.step(batch, progress=1.0)
            peaks.append(max(p.peak_bytes for p in executor.memory.peaks))
    finally:
        for executor in executors:
            executor.close()
    seconds = [statistics.median(t) for t in times]
    return (seconds, peaks) if memory else seconds


def spearman(xs, ys) -> float:
    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5


def table(title: str, names, predicted, measured, other: OtherWork) -> None:
    print(f"\n{title:<40} {'predicted ms':>12} {'measured ms':>12} {'pred/meas':>9}")
    for name, p, m in zip(names, predicted, measured):
        print(f"{name:<40} {p * 1e3:>12.2f} {m * 1e3:>12.2f} {p / m:>9.2f}")
    order = lambda xs: [names[i] for i in sorted(range(len(xs)), key=xs.__getitem__)]  # noqa
    print(f"ranking predicted: {' < '.join(order(predicted))}")
    print(f"ranking measured:  {' < '.join(order(measured))}")
    print(f"(profile and measurement: {other})")


def validate(title: str, rows, rounds: int) -> None:
    """Predict and measure the step time and peak memory of every (label, options, net,
    profile key) of ``rows``: each net profiled once per key (as ``--simulate``
    does), every row measured in the same interleaved rounds as the profiles'."""
    from convnet.simulate.report import peak_memory

    predicted, predicted_peak = [], []
    with OtherWork() as other, ExitStack() as stack:
        profilers = {}
        for _, opts, net, key in rows:
            if key not in profilers:
                profilers[key] = stack.enter_context(NetProfiler(opts, net))
        measured, measured_peak = measure(rows[0][1], [(label, net, opts)
                                                       for label, opts, net, _ in rows],
                                          rounds, memory=True,
                                          profilers=list(profilers.values()))
        profiles = {key: profiler.cost_model() for key, profiler in profilers.items()}
    for _, opts, net, key in rows:
        plan = make_plan(net, opts.gpu, opts.mini)
        predicted.append(profiles[key].predict(plan).step_seconds)
        predicted_peak.append(max(peak_memory(plan, net, profiles[key])))
    names = [label for label, *_ in rows]
    table(title, names, predicted, measured, other)
    print(f"{'peak memory of a device':<40} {'predicted MiB':>12} {'measured MiB':>12} "
          f"{'pred/meas':>9}")
    for name, p, m in zip(names, predicted_peak, measured_peak):
        print(f"{name:<40} {p / 2 ** 20:>12.1f} {m / 2 ** 20:>12.1f} {p / m:>9.2f}")


def on_gpus(opts, rows):
    """``rows`` of (label, net, profile key) on ``--gpu 0`` (the first) and on
    ``opts.gpu``: the validation's rows for :func:`validate`."""
    one = replace(opts, gpu=opts.gpu[:1])
    label, net, key = rows[0]
    return [(f"{label} --gpu 0", one, net, key)] + [
        (f"{label} --gpu {','.join(map(str, opts.gpu))}", opts, net, key)
        for label, net, key in rows]


def part1(rounds: int) -> None:
    digits = EX / "digits-params.cfg"
    hand = [("digits-single", digits), ("digits-data", digits), ("digits-model", digits),
            ("digits-hybrid", EX / "digits-hybrid-params.cfg")]
    opts = options("--layer-def", EX / "digits-single.cfg", "--layer-params", digits,
                   "--gpu", "0,1", "--mini", 128)
    # One profile per net: the hybrid's params make it another net.
    # Three times the rounds: its steps are 25x shorter than CIFAR-10's, and five rounds
    # of them span a few of the machine's phases (docs/SIMULATE.md).
    validate("digits, --mini 128", on_gpus(opts, [
        (name, assembly.load_net_for(replace(opts, layer_def=EX / f"{name}.cfg",
                                             layer_params=params)), params)
        for name, params in hand]), 3 * rounds)
    opts = options("--layer-def", CIFAR_DEF, "--layer-params", CIFAR_PARAMS, *DUMMY_CIFAR,
                   "--gpu", "0,1", "--mini", 128)
    base = assembly.load_net_for(opts)
    validate("CIFAR-10 11pct, --mini 128", on_gpus(opts, [
        ("one device", placed(base, cut(None, 0)), "cifar"),
        ("data-parallel", placed(base, cut("logprob", 0)), "cifar"),
        ("hybrid: conv data, rest on 0", placed(base, cut("pool2", 0)), "cifar")]), rounds)


PLACEMENTS = {
    "all on 0": cut(None, 0),
    "all on 1": cut(None, 1),
    "conv on 0, rest on 1": split(0),
    "conv on 1, rest on 0": split(1),
    "data through pool1, rest 0": cut("pool1", 0),
    "data through conv2, rest 0": cut("conv2", 0),
    "data through pool2, rest 0": cut("pool2", 0),
    "data through pool2, rest 1": cut("pool2", 1),
    "data through local3, rest 0": cut("local3", 0),
    "data through local4, rest 0": cut("local4", 0),
    "data through fc10, rest 1": cut("fc10", 1),
    "data everywhere": cut("logprob", 0),
}


def part2(rounds: int, mini: int) -> None:
    opts = options("--layer-def", CIFAR_DEF, "--layer-params", CIFAR_PARAMS, *DUMMY_CIFAR,
                   "--gpu", "0,1", "--mini", mini)
    base = assembly.load_net_for(opts)
    runs = [(name, placed(base, gpus)) for name, gpus in PLACEMENTS.items()]
    with OtherWork() as other, NetProfiler(opts, base) as profiler:
        measured = measure(opts, runs, rounds, profilers=[profiler])
        costs = profiler.cost_model()
    predicted = [costs.predict(make_plan(net, opts.gpu, mini)).step_seconds for _, net in runs]
    table(f"CIFAR-10 placements, --gpu 0,1 --mini {mini}", list(PLACEMENTS), predicted,
          measured, other)
    print(f"Spearman rank correlation over {len(runs)} placements: "
          f"{spearman(predicted, measured):.2f}")


def part3(rounds: int) -> None:
    """--auto-place 2's choice against the hand-written configs of examples/, measured."""
    from convnet.app.prediction.auto_place import rank

    digits = EX / "digits-params.cfg"
    nets = [("digits", EX / "digits-single.cfg", digits, [],
             [("digits-single", EX / "digits-single.cfg", digits),
              ("digits-data", EX / "digits-data.cfg", digits),
              ("digits-model", EX / "digits-model.cfg", digits),
              ("digits-hybrid", EX / "digits-hybrid.cfg", EX / "digits-hybrid-params.cfg")]),
            ("CIFAR-10", CIFAR_DEF, CIFAR_PARAMS, DUMMY_CIFAR,
             [("layers-cifar10-11pct", CIFAR_DEF, CIFAR_PARAMS)])]
    for title, layer_def, params, extra, hand in nets:
        opts = options("--layer-def", layer_def, "--layer-params", params, *extra,
                       "--gpu", "0,1", "--mini", 128, "--auto-place", 2)
        net = assembly.load_net_for(opts)
        ranking = rank(opts, net)
        best = ranking.ranked[0]
        runs = [(f"--auto-place 2: {best.candidate.name}", best.candidate.apply(net))]
        for name, d, p in hand:
            runs.append((name, assembly.load_net_for(replace(opts, layer_def=d,
                                                              layer_params=p))))
        measured = measure(opts, runs, rounds)
        print(f"\n{title} on --gpu 0,1 --mini 128{'':<20} {'measured ms':>12} {'img/s':>7}")
        for (name, _), m in zip(runs, measured):
            print(f"{name:<56} {m * 1e3:>12.2f} {128 / m:>7.0f}")
        print(f"chosen / best hand-written: {measured[0] / min(measured[1:]):.2f} "
              f"(below 1: faster)")


IMAGENET = EX / "cuda-convnet2"
DUMMY_IMAGENET = ["--data-provider", "dummy", "--data-dims", "3x224x224", "--num-classes",
                  "1000", "--dummy-cases", "64"]
#: Part 4's scale: a step of the 1-GPU config takes about 0.4 s here, where 224x224
#: images take about 3 s per 8 images.
SMALL_IMAGENET = ["--data-provider", "dummy", "--data-dims", "3x96x96", "--num-classes",
                  "1000", "--dummy-cases", "32"]


def part4(rounds: int) -> None:
    """The ImageNet reference configs scaled down (96x96 images, minibatch 32), on the
    devices they are written for, predicted and measured as in part 1."""
    rows = []
    for config, gpu in (("1gpu", "0"), ("2gpu-data", "0,1"), ("2gpu-model", "0,1")):
        opts = options("--layer-def", IMAGENET / f"layers-imagenet-{config}.cfg",
                       "--layer-params", IMAGENET / f"layer-params-imagenet-{config}.cfg",
                       *SMALL_IMAGENET, "--gpu", gpu, "--mini", 32)
        rows.append((f"{config} --gpu {gpu}", opts, assembly.load_net_for(opts), config))
    validate("ImageNet configs, 3x96x96, --mini 32", rows, rounds)


def everywhere(net, devices: int):
    """``net`` with every layer replicated on ``devices`` devices (plain data-parallel)."""
    return placed(net, {n: tuple(range(devices)) for n, l in net.layers.items()
                        if not l.is_data})


def imagenet(kind_name: str, profile_mini: int) -> None:
    """Predictions only (nothing is measured): the ImageNet reference configs on 1, 2,
    4 and 8 GPUs of an assumed kind, each net profiled once on this host at
    ``profile_mini`` images (and half that), 224x224, and scaled to the plans'
    shards.  Strong scaling keeps the minibatch at 128; weak scaling gives every GPU
    128 images (the paper's setting for its convolutional layers)."""
    from convnet.simulate.hardware import device_kind

    kind = device_kind(kind_name)
    rows = [(1, "1gpu", None), (2, "2gpu-data", None), (2, "2gpu-model", None),
            (4, "4gpu-data", None), (4, "4gpu-data-model", None),
            (8, "1gpu", "every layer on 8 GPUs")]
    profiles = {}
    base_ips = {}
    print(f"\nImageNet reference configs on {kind.name} ({kind.source})")
    print(f"{'GPUs':>4}  {'config':<28} {'step ms (128)':>13} {'img/s':>7} {'speedup':>7}  "
          f"{'step ms (128/GPU)':>17} {'img/s':>7} {'speedup':>7}")
    for gpus, config, note in rows:
        name = f"layers-imagenet-{config}"
        # A net with pass layers is profiled as placed (docs/SIMULATE.md): shards of
        # profile_mini cases need a minibatch of that many per device.
        mini = profile_mini * (gpus if config.endswith("data-model") else 1)
        opts = options("--layer-def", IMAGENET / f"{name}.cfg", "--layer-params",
                       IMAGENET / f"layer-params-imagenet-{config}.cfg", *DUMMY_IMAGENET,
                       "--gpu", ",".join(map(str, range(gpus))), "--mini", mini)
        net = assembly.load_net_for(opts)
        if config not in profiles:
            profiles[config] = measure_costs(opts, net).on(kind)
        costs = profiles[config]
        if note:
            net = everywhere(net, gpus)
        cells = []
        for scaling, mini in (("strong", 128), ("weak", 128 * gpus)):
            sim = costs.predict(make_plan(net, opts.gpu, mini))
            base_ips.setdefault(scaling, sim.images_per_second)
            cells.append((sim.step_seconds, sim.images_per_second,
                          sim.images_per_second / base_ips[scaling]))
        label = note or name.removeprefix("layers-imagenet-")
        print(f"{gpus:>4}  {label:<28} " + "  ".join(
            f"{s * 1e3:>{w}.1f} {ips:>7.0f} {x:>6.2f}x"
            for (s, ips, x), w in zip(cells, (13, 17))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--part", choices=("1", "2", "3", "4", "all", "imagenet"), default="all",
                        help="imagenet: the predictions for GPUs (not part of all)")
    parser.add_argument("--kind", default="k20-pcie2", help="imagenet's device kind")
    parser.add_argument("--profile-mini", type=int, default=8, help="imagenet's profile")
    parser.add_argument("--mini", type=int, default=64, help="part 2's minibatch")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    if args.part in ("1", "all"):
        part1(args.rounds)
    if args.part in ("2", "all"):
        part2(args.rounds, args.mini)
    if args.part in ("3", "all"):
        part3(args.rounds)
    if args.part in ("4", "all"):
        part4(args.rounds)
    if args.part == "imagenet":
        imagenet(args.kind, args.profile_mini)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
