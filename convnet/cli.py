"""The command line: ``python convnet.py [options]`` (also the ``convnet`` script).

Option names follow cuda-convnet2 (SPEC section 6).  With no arguments the
bundled digits example trains on two logical devices.  Every user error ends
as one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from convnet.errors import ConvnetError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_LAYER_DEF = EXAMPLES / "digits-hybrid.cfg"
DEFAULT_LAYER_PARAMS = EXAMPLES / "digits-hybrid-params.cfg"


def _flag(text: str) -> bool:
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 0/1 or true/false, got '{text}'")


def _gpu_list(text: str) -> tuple[int, ...]:
    try:
        gpus = tuple(int(g) for g in str(text).split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpu takes a comma list of device numbers such as "
                                         f"0,1 (got '{text}')") from None
    if any(g < 0 for g in gpus):
        raise argparse.ArgumentTypeError(f"device numbers are >= 0 (got '{text}')")
    return gpus


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return value


class _LayerParamsAction(argparse.Action):
    """``--layer-params`` keeps its last value in ``layer_params`` and every value, in
    order, in ``layer_params_list`` (one shared file, or one per config with --compare)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values[-1])
        namespace.layer_params_list = list(getattr(namespace, "layer_params_list", None)
                                           or []) + list(values)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as a ConvnetError (one line, exit 2)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message} (see --help)")


class UsageError(ConvnetError):
    exit_code = 2


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="convnet.py", description=(
        "Train a cuda-convnet2 style network on one or several logical devices. "
        "With no arguments, trains the bundled digits example (hybrid data/model "
        "parallel) on two logical devices."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    net = p.add_argument_group("network")
    net.add_argument("--layer-def", type=Path, default=None,
                     help="layer definition file (INI, one section per layer); "
                          f"default: {DEFAULT_LAYER_DEF.relative_to(EXAMPLES.parent)}")
    net.add_argument("--layer-params", type=Path, default=None, nargs="+",
                     action=_LayerParamsAction,
                     help="layer parameter file (learning rates, momentum, weight decay, ...)")
    net.add_argument("--gpu", type=_gpu_list, default=None,
                     help="devices to use, e.g. 3,2,1,0; gpu=0,1 in the layer file names "
                          "positions in this list (default 0,1 for the bundled example, else 0)")
    net.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto",
                     help="cuda: each device is a CUDA GPU (needs CuPy); cpu: each device is a "
                          "CPU worker thread; auto: cuda when CuPy finds a GPU")
    net.add_argument("--mini", type=_positive, default=128,
                     help="minibatch size; a multiple of the largest replica count")
    net.add_argument("--seed", type=int, default=0, help="seed for weights, dropout and data")
    data = p.add_argument_group("data")
    data.add_argument("--data-provider", default=None,
                      help="digits, cifar, convnet-batches or dummy (default digits for the "
                           "bundled example, dummy when --data-dims is given)")
    data.add_argument("--data-path", type=Path, default=None,
                      help="folder of the data set (cifar, convnet-batches)")
    data.add_argument("--data-dims", default=None,
                      help="image shape CxHxW, e.g. 3x224x224: for --data-provider dummy and "
                           "for --print-plan/--check-grads without data")
    data.add_argument("--num-classes", type=_positive, default=None,
                      help="number of classes (dummy data, --print-plan without data)")
    data.add_argument("--train-range", default=None, help="training batches, e.g. 1-5")
    data.add_argument("--test-range", default=None, help="test batches, e.g. 6")
    data.add_argument("--inner-size", type=int, default=0,
                      help="random crops of this size for training, centre crops for testing "
                           "(0: whole images)")
    data.add_argument("--color-noise", type=float, default=0.0,
                      help="std-dev of per-channel colour noise added to training images")
    data.add_argument("--scalar-mean", type=float, default=None,
                      help="subtract this scalar instead of the per-pixel data mean")
    data.add_argument("--multiview-test", type=_flag, default=False,
                      help="test on 10 views (corners, centre, flipped) and average")
    train = p.add_argument_group("training")
    train.add_argument("--epochs", type=_positive, default=None,
                       help="epochs to train (default 30 for the bundled example, else 1)")
    train.add_argument("--test-freq", type=_positive, default=None,
                       help="test (and save) every this many training batches "
                            "(default: once per epoch)")
    train.add_argument("--save-path", type=Path, default=None,
                       help="folder for checkpoints and the CSV log")
    train.add_argument("--load-file", type=Path, default=None,
                       help="checkpoint to resume from; options given here override saved ones")
    train.add_argument("--force-save", type=_flag, default=False,
                       help="save a checkpoint at the end even if the test error is high")
    train.add_argument("--max-test-err", type=float, default=None,
                       help="save a checkpoint only when the test error is at most this")
    train.add_argument("--test-only", type=_flag, default=False,
                       help="only evaluate the test batches (with --load-file)")
    train.add_argument("--logreg-name", default=None,
                       help="cost layer whose error is reported (default: the first logreg)")
    train.add_argument("--write-features", default=None,
                       help="write the test-mode output of this layer for the test batches")
    train.add_argument("--feature-path", type=Path, default=None,
                       help="folder for --write-features output")
    train.add_argument("--profile", action="store_true",
                       help="print time per layer and per copy/all-reduce, forward and backward")
    train.add_argument("--sequential", action="store_true",
                       help="run the plan on one thread in plan order (the reference walk)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    tools = p.add_argument_group("tools")
    tools.add_argument("--print-plan", nargs="?", const="text", choices=("text", "json"),
                       default=None, help="print the execution plan and exit")
    tools.add_argument("--plan-graph", type=Path, default=None, metavar="PNG",
                       help="with --print-plan: also draw the layer graph, boxes coloured by "
                            "device, into this PNG file")
    tools.add_argument("--compare", type=Path, nargs="+", default=None, metavar="LAYER_DEF",
                       help="train each of these layer-def files on the same data, seed and "
                            "devices, then print a table comparing them; --layer-params gives "
                            "one shared file or one per config (with --save-path, each run's "
                            "log and checkpoint go into a sub-folder, and compare.png shows "
                            "error against time, img/s and one step per device)")
    p.set_defaults(layer_params_list=None)
    tools.add_argument("--check-grads", type=_flag, nargs="?", const=True, default=False,
                       help="finite-difference check of every gradient of the net and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        from convnet.commands import run_command  # heavy imports only after --help

        return run_command(args)
    except ConvnetError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
        sys.stdout = None
        return 0
