"""How well ``--simulate`` predicts: predicted against measured training-step time.

    python bench/bench_simulate.py [--steps 7] [--no-cifar]

Part 1, one row per (config, --gpu): the prediction ``--print-plan --simulate``
makes (a profile of that plan, run on one thread, then the simulated step) and
the measured step (the median of ``--steps`` ``Executor.step`` calls after a
warm-up, parallel workers as in training), for the digits configs and the
CIFAR-10 reference net (cuda-convnet2's layers-cifar10-11pct on 3x32x32 dummy
images, its gpu= lines made 0,1 for two devices).

Part 2, the ranking: the digits net in 11 placements on two devices (gpu= of
conv1, fca, fcb, fc10 and logprob; the layers between inherit), each predicted
from ONE profile of the one-device placement (shard times scaled by cases), and
the Spearman rank correlation of predicted and measured steps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from convnet.app import training  # noqa: E402
from convnet.app.cli import build_parser  # noqa: E402
from convnet.app.options import resolve_options  # noqa: E402
from convnet.app.simulation import first_minibatch, measure_costs  # noqa: E402
from convnet.errors import ConvnetError  # noqa: E402
from convnet.plan.planner import make_plan  # noqa: E402
from convnet.simulate.schedule import simulate  # noqa: E402

EX = ROOT / "examples"
CIFAR = EX / "cuda-convnet2"
DUMMY_CIFAR = ["--data-provider", "dummy", "--data-dims", "3x32x32", "--num-classes", "10",
               "--dummy-cases", "128"]

#: Digits placements: gpu= of (conv1, fca, fcb, fc10, logprob).
PLACEMENTS = {
    "one device": ("0", "0", "0", "0", "0"),
    "data": ("0,1",) * 5,
    "model (fcb on 1)": ("0", "0", "1", "0", "0"),
    "hybrid (conv data, fca 0, fcb 1)": ("0,1", "0", "1", "0", "0"),
    "conv data, fc on 0": ("0,1", "0", "0", "0", "0"),
    "conv data, fc on 1": ("0,1", "1", "1", "1", "1"),
    "conv on 0, fc on 1": ("0", "1", "1", "1", "1"),
    "conv on 1, fcb on 0": ("1", "1", "0", "1", "1"),
    "conv+fca+fcb data, rest on 0": ("0,1", "0,1", "0,1", "0", "0"),
    "conv+fca+fcb data, rest on 1": ("0,1", "0,1", "0,1", "1", "1"),
    "all on 1": ("1", "1", "1", "1", "1"),
}


def options(*argv):
    return resolve_options(build_parser().parse_args(["--mini", "128", *map(str, argv)]))


def measured_step(opts, net, plan, batch, steps: int) -> float:
    executor = training.make_executor(opts, net, plan)
    try:
        times = [executor.step(batch, progress=1.0).seconds for _ in range(steps + 1)]
    finally:
        executor.close()
    return statistics.median(times[1:])


def with_gpus(net, placement):
    layers = dict(net.layers)
    for name, gpus in zip(("conv1", "fca", "fcb", "fc10", "logprob"), placement):
        layers[name] = replace(layers[name], gpu=tuple(int(g) for g in gpus.split(",")))
    return replace(net, layers=layers)


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


def cifar_def(tmp: Path, two: bool) -> Path:
    text = (CIFAR / "layers-cifar10-11pct.cfg").read_text()
    path = tmp / f"cifar-{'data' if two else 'single'}.cfg"
    path.write_text(text.replace("gpu=0\n", "gpu=0,1\n") if two else text)
    return path


def part1(steps: int, cifar: bool, tmp: Path) -> None:
    runs = [("digits-single", "0", EX / "digits-single.cfg", EX / "digits-params.cfg", []),
            ("digits-single", "0,0", EX / "digits-single.cfg", EX / "digits-params.cfg", []),
            ("digits-data", "0,1", EX / "digits-data.cfg", EX / "digits-params.cfg", []),
            ("digits-model", "0,1", EX / "digits-model.cfg", EX / "digits-params.cfg", []),
            ("digits-hybrid", "0,1", EX / "digits-hybrid.cfg", EX / "digits-hybrid-params.cfg",
             [])]
    if cifar:
        params = CIFAR / "layer-params-cifar10-11pct.cfg"
        runs += [("cifar10-11pct", "0", cifar_def(tmp, False), params, DUMMY_CIFAR),
                 ("cifar10-11pct data", "0,1", cifar_def(tmp, True), params, DUMMY_CIFAR)]
    print(f"{'config':<20} {'--gpu':<6} {'predicted ms':>12} {'measured ms':>12} "
          f"{'pred/meas':>9}")
    for name, gpu, layer_def, layer_params, extra in runs:
        opts = options("--layer-def", layer_def, "--layer-params", layer_params, "--gpu", gpu,
                       "--print-plan", "--simulate", *extra)
        net, plan = training.build_net_and_plan(opts)
        costs = measure_costs(opts, net, plan)
        predicted = simulate(plan, costs.seconds, costs.resources(plan)).step_seconds
        measured = measured_step(opts, net, plan, first_minibatch(opts), steps)
        print(f"{name:<20} {gpu:<6} {predicted * 1e3:>12.2f} {measured * 1e3:>12.2f} "
              f"{predicted / measured:>9.2f}")


def part2(steps: int) -> None:
    opts = options("--layer-def", EX / "digits-single.cfg", "--layer-params",
                   EX / "digits-params.cfg", "--gpu", "0,1", "--print-plan", "--simulate")
    base = training.load_net_for(opts)
    batch = first_minibatch(opts)
    one = with_gpus(base, PLACEMENTS["one device"])
    costs = measure_costs(opts, one, make_plan(one, opts.gpu, opts.mini))
    print(f"\n{'placement (digits, --gpu 0,1)':<34} {'predicted ms':>12} {'measured ms':>12}")
    predicted, measured = [], []
    for name, placement in PLACEMENTS.items():
        net = with_gpus(base, placement)
        try:
            plan = make_plan(net, opts.gpu, opts.mini)
        except ConvnetError as error:
            print(f"{name:<34} not a valid plan: {error}")
            continue
        predicted.append(simulate(plan, costs.seconds, costs.resources(plan)).step_seconds)
        measured.append(measured_step(opts, net, plan, batch, steps))
        print(f"{name:<34} {predicted[-1] * 1e3:>12.2f} {measured[-1] * 1e3:>12.2f}")
    print(f"Spearman rank correlation over {len(predicted)} placements: "
          f"{spearman(predicted, measured):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--no-cifar", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        part1(args.steps, not args.no_cifar, Path(tmp))
    part2(args.steps)


if __name__ == "__main__":
    main()
