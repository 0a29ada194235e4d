"""How well ``--simulate`` predicts: predicted against measured training-step time.

    python bench/bench_simulate.py [--rounds 7] [--part 1|2|all]

Every net is profiled ONCE (as ``--simulate`` and ``--auto-place`` do: every
layer on one device, on one thread, at the minibatch and its half, plus one
run on every core at once), and each of its placements is predicted from that
profile.  The measured step of a placement is the median over ``--rounds``
rounds after a warm-up round, where each round runs one training step of
every placement of the net in turn (interleaved, so that a disturbance of
the shared machine hits all of them alike), parallel workers as in training.

Part 1: the digits configs of examples/ and the CIFAR-10 reference net
(cuda-convnet2's layers-cifar10-11pct on 3x32x32 dummy images) as one device,
data-parallel and hybrid on ``--gpu 0,1``; the scheme ranking of each net,
predicted and measured.

Part 2: twelve placements of the CIFAR-10 net on two devices (the replica
counts of a chain must not grow along it, so: every layer up to a cut
data-parallel and the rest on one device, or a cut between two devices), each
predicted from one profile, and the Spearman rank correlation of predicted and
measured steps.

Part 3: ``--auto-place 2``'s choice for the digits net and the CIFAR-10 net,
measured against every hand-written config of the net in examples/.

``--part imagenet`` predicts (measures nothing but the profile) the ImageNet
reference configs on 1, 2, 4 and 8 GPUs of ``--kind`` (docs/SIMULATE.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from convnet.app import training  # noqa: E402
from convnet.app.cli import build_parser  # noqa: E402
from convnet.app.options import resolve_options  # noqa: E402
from convnet.app.simulation import first_minibatch, measure_costs  # noqa: E402
from convnet.plan.planner import make_plan  # noqa: E402

EX = ROOT / "examples"
CIFAR_DEF = EX / "cuda-convnet2" / "layers-cifar10-11pct.cfg"
CIFAR_PARAMS = EX / "cuda-convnet2" / "layer-params-cifar10-11pct.cfg"
DUMMY_CIFAR = ["--data-provider", "dummy", "--data-dims", "3x32x32", "--num-classes", "10",
               "--dummy-cases", "256"]
CIFAR_CHAIN = ["conv1", "pool1", "rnorm1", "conv2", "rnorm2", "pool2", "local3", "local4",
               "fc10", "probs", "logprob"]


def options(*argv):
    return resolve_options(build_parser().parse_args([*map(str, argv)]))


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


def measure(opts, runs, rounds: int):
    """[(name, net)] -> measured median step seconds, interleaved rounds."""
    batch = first_minibatch(opts)
    executors = []
    try:
        for _, net in runs:
            executors.append(training.make_executor(opts, net, make_plan(net, opts.gpu,
                                                                          opts.mini)))
        times = [[] for _ in runs]
        for r in range(rounds + 1):
            for i, executor in enumerate(executors):
                seconds = executor.step(batch, progress=1.0).seconds
                if r:
                    times[i].append(seconds)
    finally:
        for executor in executors:
            executor.close()
    return [statistics.median(t) for t in times]


def compare(opts, base, runs, rounds: int):
    """Predict (one profile of ``base``) and measure every (name, gpu=, net) of ``runs``."""
    costs = measure_costs(opts, base)
    predicted = [costs.predict(make_plan(net, opts.gpu, opts.mini)).step_seconds
                 for _, net in runs]
    return predicted, measure(opts, runs, rounds)


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


def table(title: str, names, predicted, measured) -> None:
    print(f"\n{title:<40} {'predicted ms':>12} {'measured ms':>12} {'pred/meas':>9}")
    for name, p, m in zip(names, predicted, measured):
        print(f"{name:<40} {p * 1e3:>12.2f} {m * 1e3:>12.2f} {p / m:>9.2f}")
    order = lambda xs: [names[i] for i in sorted(range(len(xs)), key=xs.__getitem__)]  # noqa
    print(f"ranking predicted: {' < '.join(order(predicted))}")
    print(f"ranking measured:  {' < '.join(order(measured))}")


def part1(rounds: int) -> None:
    digits = EX / "digits-params.cfg"
    hand = [("digits-single", digits), ("digits-data", digits), ("digits-model", digits),
            ("digits-hybrid", EX / "digits-hybrid-params.cfg")]
    opts = options("--layer-def", EX / "digits-single.cfg", "--layer-params", digits,
                   "--gpu", "0,1", "--mini", 128)
    runs = [(name, training.load_net_for(replace(opts, layer_def=EX / f"{name}.cfg",
                                                 layer_params=params)))
            for name, params in hand]
    profiles = {}  # one per net: the hybrid's params make it another net
    predicted = []
    for (name, net), (_, params) in zip(runs, hand):
        if params not in profiles:
            profiles[params] = measure_costs(opts, net)
        predicted.append(profiles[params].predict(make_plan(net, opts.gpu, 128)).step_seconds)
    one = replace(opts, gpu=(0,))
    pred0 = [profiles[digits].predict(make_plan(runs[0][1], one.gpu, 128)).step_seconds]
    meas0 = measure(one, runs[:1], rounds)
    measured = measure(opts, runs, rounds)
    table("digits, --mini 128", ["digits-single --gpu 0"] + [f"{n} --gpu 0,1" for n, _ in runs],
          pred0 + predicted, meas0 + measured)
    opts = options("--layer-def", CIFAR_DEF, "--layer-params", CIFAR_PARAMS, *DUMMY_CIFAR,
                   "--gpu", "0,1", "--mini", 128)
    base = training.load_net_for(opts)
    runs = [("one device", placed(base, cut(None, 0))),
            ("data-parallel", placed(base, cut("logprob", 0))),
            ("hybrid: conv data, rest on 0", placed(base, cut("pool2", 0)))]
    one = replace(opts, gpu=(0,))
    costs = measure_costs(opts, base)
    pred0 = [costs.predict(make_plan(runs[0][1], one.gpu, 128)).step_seconds]
    predicted = [costs.predict(make_plan(net, opts.gpu, 128)).step_seconds for _, net in runs]
    meas0 = measure(one, runs[:1], rounds)
    measured = measure(opts, runs, rounds)
    table("CIFAR-10 11pct, --mini 128", ["one device --gpu 0"] +
          [f"{n} --gpu 0,1" for n, _ in runs], pred0 + predicted, meas0 + measured)


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
    base = training.load_net_for(opts)
    runs = [(name, placed(base, gpus)) for name, gpus in PLACEMENTS.items()]
    predicted, measured = compare(opts, base, runs, rounds)
    table(f"CIFAR-10 placements, --gpu 0,1 --mini {mini}", list(PLACEMENTS), predicted,
          measured)
    print(f"Spearman rank correlation over {len(runs)} placements: "
          f"{spearman(predicted, measured):.2f}")


def part3(rounds: int) -> None:
    """--auto-place 2's choice against the hand-written configs of examples/, measured."""
    from convnet.app.auto_place import rank

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
        net = training.load_net_for(opts)
        ranking = rank(opts, net)
        best = ranking.ranked[0]
        runs = [(f"--auto-place 2: {best.candidate.name}", best.candidate.apply(net))]
        for name, d, p in hand:
            runs.append((name, training.load_net_for(replace(opts, layer_def=d,
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
        net = training.load_net_for(opts)
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
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--part", choices=("1", "2", "3", "all", "imagenet"), default="all",
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
    if args.part == "imagenet":
        imagenet(args.kind, args.profile_mini)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
