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
    for params, configs in ((EX / "digits-params.cfg",
                             ["digits-single", "digits-data", "digits-model"]),
                            (EX / "digits-hybrid-params.cfg", ["digits-hybrid"])):
        opts = options("--layer-def", EX / f"{configs[0]}.cfg", "--layer-params", params,
                       "--gpu", "0,1", "--mini", 128)
        runs = []
        for name in configs:
            o = replace(opts, layer_def=EX / f"{name}.cfg")
            runs.append((name, training.load_net_for(o)))
        one = options("--layer-def", EX / f"{configs[0]}.cfg", "--layer-params", params,
                      "--gpu", "0", "--mini", 128)
        if configs[0] == "digits-single":  # the same net on --gpu 0 as well
            pred0, meas0 = compare(one, runs[0][1], runs[:1], rounds)
        predicted, measured = compare(opts, runs[0][1], runs, rounds)
        if configs[0] == "digits-single":
            names = ["digits-single --gpu 0"] + [f"{n} --gpu 0,1" for n, _ in runs]
            table("digits, --mini 128", names, pred0 + predicted, meas0 + measured)
        else:
            table("digits hybrid, --mini 128", [f"{n} --gpu 0,1" for n, _ in runs],
                  predicted, measured)
    opts = options("--layer-def", CIFAR_DEF, "--layer-params", CIFAR_PARAMS, *DUMMY_CIFAR,
                   "--gpu", "0,1", "--mini", 128)
    base = training.load_net_for(opts)
    runs = [("one device", placed(base, cut(None, 0))),
            ("data-parallel", placed(base, cut("logprob", 0))),
            ("hybrid: conv data, rest on 0", placed(base, cut("pool2", 0)))]
    one = replace(opts, gpu=(0,))
    pred0, meas0 = compare(one, base, runs[:1], rounds)
    predicted, measured = compare(opts, base, runs, rounds)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--part", choices=("1", "2", "all"), default="all")
    parser.add_argument("--mini", type=int, default=64, help="part 2's minibatch")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    if args.part in ("1", "all"):
        part1(args.rounds)
    if args.part in ("2", "all"):
        part2(args.rounds, args.mini)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
