"""What batch normalisation does for learning: ResNet-20 with and without its bnorm layers,
trained for the same epochs on the bundled digits.

    python bench/bench_batch_norm.py [--epochs 10] [--seeds 0 1 2] [--rates 0.1 0.03 0.01 0.003]
                                     [--gpu 0,1] [--mini 128]

The net with batch normalisation is ``examples/resnet20-digits.cfg`` with its params
(learning rate 0.1, dropped tenfold after each third of the run), data-parallel on
``--gpu``.  The net without it is the same file with every bnorm layer taken out: its
readers read the bnorm's input instead, the bnorm's ``neuron=`` moves to that input (the
conv before it), and the conv learns its bias (epsB and momB as its weights'), which the
bnorm's shift replaced.  A net without batch normalisation usually needs a smaller
learning rate, so it is trained at each of ``--rates`` (the same schedule scaled), and
the batch-normalised net at the params file's 0.1.  Every configuration runs once per
seed (``--seed``: the initial weights and the order of nothing else; the digits batches
are fixed), and the table gives the test error after each epoch (median over the seeds)
and the final test error of every seed.  A run whose cost turns non-finite counts as
diverged (error 100%).
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import io
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LAYER_DEF = ROOT / "examples" / "resnet20-digits.cfg"
LAYER_PARAMS = ROOT / "examples" / "resnet20-digits-params.cfg"
BASE_RATE = 0.1  # the params file's


def _read(path: Path) -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None)
    config.optionxform = str  # keep the keys' case
    config.read_string(path.read_text())
    return config


def _text(config: configparser.ConfigParser) -> str:
    out = io.StringIO()
    config.write(out)
    return out.getvalue()


def without_batch_norm(layer_def: Path, layer_params: Path) -> tuple[str, str]:
    """(layer-def, layer-params) text of the net with its bnorm layers taken out (see the
    module docstring)."""
    layers, params = _read(layer_def), _read(layer_params)
    for name in [s for s in layers.sections() if layers[s].get("type") == "bnorm"]:
        source, neuron = layers[name]["inputs"], layers[name].get("neuron")
        for other in layers.sections():
            if "inputs" in layers[other]:
                inputs = layers[other]["inputs"].split(",")
                layers[other]["inputs"] = ",".join(source if i == name else i for i in inputs)
        if neuron is not None:
            layers[source]["neuron"] = neuron
        params[source]["epsB"], params[source]["momB"] = (params[source]["epsW"],
                                                          params[source]["momW"])
        layers.remove_section(name)
        params.remove_section(name)
    return _text(layers), _text(params)


def at_rate(params: str, rate: float) -> str:
    """The params text with its learning rates (schedule bases) scaled to ``rate``."""
    return re.sub(rf"base={BASE_RATE}\b", f"base={rate:g}", params)


def train(layer_def: Path, layer_params: Path, args, seed: int) -> list[float]:
    """Test error after each epoch (100% from a diverged one on)."""
    import convnet
    from convnet.errors import TrainingError

    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            result = convnet.train(layer_def=str(layer_def), layer_params=str(layer_params),
                                   data_provider="digits", gpu=args.gpu, mini=args.mini,
                                   epochs=args.epochs, seed=seed, no_progress=True)
    except TrainingError:  # diverged: the cost or the weights stopped being finite
        return [1.0] * args.epochs
    errors = [row["test_error"] for row in result.history]
    return errors + [1.0] * (args.epochs - len(errors))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rates", type=float, nargs="+", default=[0.1, 0.03, 0.01, 0.003],
                    help="learning rates of the net without batch normalisation")
    ap.add_argument("--gpu", default="0,1")
    ap.add_argument("--mini", type=int, default=128)
    args = ap.parse_args(argv)
    args.gpu = [int(g) for g in args.gpu.split(",")]
    began = time.perf_counter()
    runs: dict[str, list[list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain_def, plain_params = without_batch_norm(LAYER_DEF, LAYER_PARAMS)
        (folder / "plain.cfg").write_text(plain_def)
        configs = {f"with bnorm, lr {BASE_RATE:g}": (LAYER_DEF, LAYER_PARAMS)}
        for rate in args.rates:
            path = folder / f"plain-params-{rate:g}.cfg"
            path.write_text(at_rate(plain_params, rate))
            configs[f"without, lr {rate:g}"] = (folder / "plain.cfg", path)
        for label, (layer_def, layer_params) in configs.items():
            runs[label] = [train(layer_def, layer_params, args, seed) for seed in args.seeds]
            print(f"{label}: final test errors "
                  + ", ".join(f"{r[-1]:.2%}" for r in runs[label]), flush=True)
    print(f"\nResNet-20 on the bundled digits (1x8x8, 1,498 training and 299 test cases), "
          f"--gpu {','.join(map(str, args.gpu))}, --mini {args.mini}, {args.epochs} epochs, "
          f"seeds {' '.join(map(str, args.seeds))}; test error after each epoch, median "
          f"over the seeds")
    width = max(len(label) for label in runs)
    print(f"{'':<{width}}  " + " ".join(f"{e + 1:>6}" for e in range(args.epochs))
          + "   final (each seed)")
    for label, errors in runs.items():
        medians = [statistics.median(r[e] for r in errors) for e in range(args.epochs)]
        print(f"{label:<{width}}  " + " ".join(f"{m:6.2%}" for m in medians)
              + "   " + ", ".join(f"{r[-1]:.2%}" for r in errors))
    print(f"\n{time.perf_counter() - began:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
