"""The command line: ``python convnet.py [options]`` (also the ``convnet`` script).

Option names follow cuda-convnet2's (``--layer-def``, ``--gpu``, ``--mini``,
...).  With no arguments the bundled digits example trains on two logical
devices.  Every user error ends as one line on stderr and a non-zero exit,
never a traceback:

* 2: a bad command line (unknown option, bad value, options that do not go
  together) or a config/plan error;
* 1: anything else the user can fix (data, checkpoint, NaN cost, device);
* 130: interrupted (Ctrl-C); 143: terminated (SIGTERM).

Options that a checkpoint remembers default to ``None`` here, so that on
``--load-file`` a value given on the command line can be told apart from a
built-in default (see :mod:`convnet.app.options`).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from convnet.app import bundled_example
from convnet.app.command_line.original_flags import SHORT_FLAGS, retired_flag_hint
from convnet.app.invocation import program_name
from convnet.app.option_values import (BACKEND_NAMES, DEFAULT_STALENESS, batch_range,
                                       color_noise, data_dims, flag, gpu_list, layer_name,
                                       max_test_err, min_lead, non_negative_int, positive_int,
                                       provider_name, rank_timeout, scalar_mean, slow_device,
                                       sync_mode)
from convnet.app.run.signals import Terminated, stop_handlers
from convnet.errors import ConvnetError, OutOfMemoryError, UsageError
from convnet.plan.schedules import SCHEDULES
from convnet.runtime.processes.communicator import DEFAULT_WAIT_LIMIT
from convnet.simulate.hardware import DEVICE_KINDS

#: (arguments, what they do) of the examples at the end of --help.
EXAMPLES = (
    ("", "train the bundled digits example"),
    ("--save-path runs/a --epochs 5", "... and keep checkpoints and a CSV log"),
    ("--load-file runs/a --epochs 10", "resume that run and train it to 10 epochs"),
    ("--load-file runs/a --test-only", "evaluate the saved net on the test batches"),
    ("--load-file runs/a --predict photos/", "classify image files with the saved net"),
)

EPILOG_END = """\

A checkpoint (SAVE_PATH/checkpoint.npz) remembers the options marked
[resumable]; with --load-file they default to the saved values and any given
on the command line wins.

exit status: 0 success, 1 data/checkpoint/training error, 2 bad command line
or config, 130 interrupted (Ctrl-C), 143 terminated.
"""


def epilog(prog: str) -> str:
    """The examples, under the name the program was invoked as, then the notes."""
    width = max(len(f"{prog} {args}") for args, _ in EXAMPLES) + 3
    lines = ["examples:"] + [f"  {f'{prog} {args}'.strip():<{width}}{what}"
                             for args, what in EXAMPLES]
    lines += [f"  {prog} --layer-def L.cfg --layer-params P.cfg --gpu 0,1,2,3 --mini 512 \\",
              f"  {' ' * len(prog)} --data-dims 3x224x224 --num-classes 1000 --print-plan"]
    return "\n".join(lines) + "\n" + EPILOG_END


# ------------------------------------------------------------------ the parser
class _LayerParamsAction(argparse.Action):
    """``--layer-params`` keeps its last value in ``layer_params`` and every value, in
    order, in ``layer_params_list`` (one shared file, or one per config with --compare)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values[-1])
        namespace.layer_params_list = list(getattr(namespace, "layer_params_list", None)
                                           or []) + list(values)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as a :class:`UsageError` (one line, exit 2)."""

    def error(self, message):
        if message.startswith("unrecognized arguments:"):
            unknown = message.split(":", 1)[1].split()
            hint = retired_flag_hint(unknown) or self._near_name(unknown)
            if hint:
                message += f" ({hint})"
        raise UsageError(f"{message} (see --help)")

    def _near_name(self, unknown: list[str]) -> str | None:
        known = [s for a in self._actions for s in a.option_strings]
        for word in unknown:
            close = difflib.get_close_matches(word.split("=")[0], known, n=1)
            if close:
                return f"did you mean '{close[0]}'?"
        return None


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog):
        super().__init__(prog, max_help_position=30, width=100)


def build_parser() -> argparse.ArgumentParser:
    bundled_def = bundled_example.LAYER_DEF.relative_to(bundled_example.EXAMPLES_DIR.parent)
    prog = program_name()
    p = _Parser(prog=prog, allow_abbrev=False, formatter_class=_HelpFormatter,
                description=(
                    "Train a cuda-convnet2 style network (layer-def and layer-params INI files) "
                    "on one or several logical devices.\nWith no arguments, trains the bundled "
                    "digits example (hybrid data/model parallel) on two logical devices."),
                epilog=epilog(prog))
    net = p.add_argument_group("network")
    net.add_argument("--layer-def", type=Path, default=None, metavar="FILE",
                     help="layer definition file (INI, one section per layer) [resumable] "
                          f"(default: {bundled_def})")
    net.add_argument("--layer-params", type=Path, default=None, nargs="+",
                     action=_LayerParamsAction, metavar="FILE",
                     help="layer parameter file: learning rates, momentum, weight decay, ... "
                          "[resumable] (default: the bundled example's, needed with "
                          "--layer-def)")
    net.add_argument("--gpu", type=gpu_list, default=None, metavar="LIST",
                     help="devices to use, e.g. 3,2,1,0; gpu=0,1 in the layer file names "
                          "positions in this list; a device may appear twice [resumable] "
                          "(default: 0,1 for the bundled example, else 0)")
    net.add_argument("--backend", choices=BACKEND_NAMES, default=None,
                     help="cuda: each device is a CUDA GPU (needs CuPy); cpu: each device is "
                          "a CPU worker thread; auto: cuda when CuPy finds a GPU [resumable] "
                          "(default: auto)")
    net.add_argument("--mini", type=positive_int, default=None, metavar="N",
                     help="minibatch size in cases; a multiple of the largest replica count "
                          "[resumable] (default: 128)")
    net.add_argument("--micro-batches", type=positive_int, default=None, metavar="M",
                     help="cut every shard of a minibatch into M micro-batches that flow "
                          "through the devices as a pipeline; the weights update "
                          "where they would without; see docs/PIPELINE.md [resumable, another "
                          "M may be given on resume] (default: 1)")
    net.add_argument("--pipeline-schedule", choices=SCHEDULES, default=None,
                     help="how the micro-batches flow: fill-drain runs every forward, then "
                          "every backward; 1f1b alternates them after a warm-up, so a stage "
                          "holds the activations of at most (stages after it + 1) "
                          "micro-batches instead of M; the same weights and as many ticks "
                          "either way; see docs/PIPELINE.md [resumable, may change on resume] "
                          "(default: 1f1b)")
    net.add_argument("--seed", type=non_negative_int, default=None, metavar="N",
                     help="seed of the initial weights, dropout masks and data augmentation "
                          "[resumable] (default: 0)")
    net.add_argument("--sync", type=sync_mode, default=None, nargs="+",
                     metavar="sync|local:K|async[:S]",
                     help="how the replicas of data-parallel layers stay together: sync "
                          "sums their gradients every step; local:K lets each replica "
                          "update from its own shards and averages their weights every K "
                          "steps (local SGD; in one process a data-parallel net's replicas "
                          "run apart between averages); async[:S] runs the replicas of a "
                          "data-parallel net apart, each applying its own updates at once "
                          "and the others' as they arrive, never more than S steps ahead "
                          f"of the slowest (default S: {DEFAULT_STALENESS}; in a hybrid net "
                          "the steps stay lockstep and only the replicated layers' updates "
                          "travel apart, at most S steps late). local and async "
                          "move less and wait less and are not the same training as sync; "
                          "async is not bitwise reproducible; "
                          "with --compare, several modes (e.g. --sync sync local:4) train "
                          "every config once per mode [resumable] (default: sync)")
    data = p.add_argument_group("data")
    data.add_argument("--data-provider", type=provider_name, default=None, metavar="NAME",
                      help="digits (the bundled 8x8 digits), cifar (CIFAR-10 python "
                           "folder), convnet-batches (cuda-convnet batch folder), image "
                           "(cuda-convnet2's JPEG batches, as its make-data writes them) or "
                           "dummy "
                           "(synthetic) [resumable] (default: digits, or dummy when "
                           "--data-dims is given)")
    data.add_argument("--data-path", type=Path, default=None, metavar="DIR",
                      help="folder of the data set, for cifar, convnet-batches and image "
                           "[resumable]")
    data.add_argument("--data-dims", type=data_dims, default=None, metavar="CxHxW[,DIMS...]",
                      help="image shape, e.g. 3x224x224: the dummy provider's images, and "
                           "the input of --print-plan/--check-grads without data; further "
                           "data columns (dataIdx 2 and up) follow after commas, column 1 "
                           "being the labels, e.g. 3x224x224,1,1 [resumable]")
    data.add_argument("--num-classes", type=positive_int, default=None, metavar="N",
                      help="number of classes, with --data-dims [resumable] (default: 10 "
                           "for dummy data)")
    data.add_argument("--dummy-cases", type=positive_int, default=None, metavar="N",
                      help="cases per batch of the dummy provider, e.g. 128 for a short "
                           "run of a large net [resumable] (default: 512)")
    data.add_argument("--train-range", type=batch_range, default=None, metavar="RANGE",
                      help="training batch numbers, e.g. 1-5 or 1-3,5 [resumable] "
                           "(default: the provider's, e.g. 1-5 for digits and cifar)")
    data.add_argument("--test-range", type=batch_range, default=None, metavar="RANGE",
                      help="test batch numbers, e.g. 6 [resumable] (default: the provider's)")
    data.add_argument("--inner-size", type=non_negative_int, default=None, metavar="N",
                      help="train on random N x N crops, mirrored at random, and test on "
                           "centre crops; 0 means whole images [resumable] (default: 0)")
    data.add_argument("--color-noise", type=color_noise, default=None, metavar="S",
                      help="add PCA colour noise of S standard deviations to training "
                           "images [resumable] (default: 0, none)")
    data.add_argument("--scalar-mean", type=scalar_mean, default=None, metavar="X",
                      help="subtract this one number from every pixel instead of the "
                           "per-pixel mean of the training data [resumable]")
    data.add_argument("--multiview-test", type=flag, nargs="?", const=True, default=False,
                      metavar="0|1",
                      help="test on 10 views (centre and 4 corner crops, and their mirror "
                           "images) and average the predictions; needs --inner-size "
                           "(default: 0)")
    data.add_argument("--skip-bad-images", type=flag, nargs="?", const=True, default=False,
                      metavar="0|1",
                      help="leave out JPEGs that cannot be decoded (image provider) and count "
                           "them in the closing summary, instead of ending the run at the "
                           "first (default: 0)")
    train = p.add_argument_group("training")
    train.add_argument("--epochs", type=positive_int, default=None, metavar="N",
                       help="train until N passes over the training batches are done "
                            "[resumable] (default: 30 for the bundled example, else 1)")
    train.add_argument("--test-freq", type=positive_int, default=None, metavar="N",
                       help="every N training batches (and at the end of each epoch) test, "
                            "print a line, log a CSV row and save a checkpoint [resumable] "
                            "(default: once per epoch)")
    train.add_argument("--save-path", type=Path, default=None, metavar="DIR",
                       help="folder for the checkpoint (DIR/checkpoint.npz) and the CSV log "
                            "(DIR/log.csv); nothing is saved without it; one run at a time "
                            "(default with --load-file: the checkpoint's folder)")
    train.add_argument("--load-file", SHORT_FLAGS["--load-file"], type=Path, default=None,
                       metavar="FILE",
                       help="checkpoint to resume from (a checkpoint.npz, or the folder "
                            "holding it); the saved options apply unless given again here "
                            "(-f is cuda-convnet's spelling)")
    train.add_argument("--force-save", type=flag, nargs="?", const=True, default=False,
                       metavar="0|1",
                       help="save a checkpoint when training ends even if the test error is "
                            "above --max-test-err (default: 0)")
    train.add_argument("--overwrite", action="store_true",
                       help="replace what an earlier run left: start over in a save path "
                            "that holds an earlier run's checkpoint or log, and replace "
                            "existing features files, --plan-graph, --compare and "
                            "--auto-place outputs (without it such a run is refused)")
    train.add_argument("--max-test-err", type=max_test_err, default=None, metavar="FRAC",
                       help="save a checkpoint only when the test error (a fraction, 0.05 = "
                            "5%%) is at most this (default: always save)")
    train.add_argument("--test-only", type=flag, nargs="?", const=True, default=False,
                       metavar="0|1",
                       help="evaluate the test batches with the net of --load-file, print "
                            "the test cost and error, and exit; nothing is saved (default: 0)")
    train.add_argument("--logreg-name", type=layer_name, default=None, metavar="LAYER",
                       help="cost layer whose cost and error are reported and logged "
                            "[resumable] (default: the first cost.logreg, else the first cost)")
    train.add_argument("--write-features", type=layer_name, default=None, metavar="LAYER",
                       help="write the test-mode output of LAYER for every test batch "
                            "(FEATURE_PATH/data_batch_N.npz: 'data' cases x features, "
                            "'labels'); after training, or with --test-only instead of it")
    train.add_argument("--feature-path", type=Path, default=None, metavar="DIR",
                       help="folder for --write-features (default: features-LAYER in the "
                            "save path, else in the current folder)")
    train.add_argument("--profile", action="store_true",
                       help="print the time per layer and per copy/all-reduce, forward and "
                            "backward, when training ends")
    train.add_argument("--sequential", action="store_true",
                       help="run the plan on one thread in plan order (the reference walk; "
                            "same results, slower)")
    train.add_argument("--slow-device", type=slow_device, default=None, metavar="D:F",
                       help="for tests and benchmarks only: make logical device D F times "
                            "slower (after each of its tasks it sleeps F-1 times what the "
                            "task took), to see how --sync copes with a straggler; any:F "
                            "slows one device drawn at random at each step instead")
    train.add_argument("--no-winograd", action="store_true",
                       help="compute every convolution directly (im2col and GEMM), also the "
                            "stride-1 ones (3x3 to 6x6 filters, 16 or more channels) that by "
                            "default use Winograd's algorithm on CPU devices (--print-plan "
                            "names them): slower, with the float32 rounding of "
                            "a direct convolution (about 1e-6 of an output's scale instead "
                            "of 1e-5)")
    train.add_argument("--no-progress", action="store_true",
                       help="no progress bar (the per-test lines are still printed)")
    train.add_argument("--rank-timeout", type=rank_timeout, default=DEFAULT_WAIT_LIMIT,
                       metavar="SECONDS",
                       help=f"under mpiexec: end the run with an error naming the rank when "
                            f"a wait on another rank lasts longer than this (a stopped, hung "
                            f"or lost process; default {DEFAULT_WAIT_LIMIT:g}; 0: no bound)")
    tools = p.add_argument_group("tools (print or check, then exit)")
    tools.add_argument("--print-plan", nargs="?", const="text", choices=("text", "json"),
                       default=None,
                       help="print the execution plan (placement, passes, copies, per-device "
                            "memory and traffic) as text or JSON and exit")
    tools.add_argument("--plan-graph", type=Path, default=None, metavar="PNG",
                       help="with --print-plan: also draw the layer graph, boxes coloured by "
                            "device, into this PNG file")
    tools.add_argument("--simulate", action="store_true",
                       help="with --print-plan: profile a few steps of the net on one device, "
                            "then predict the step time, images/s, each device's compute/copy/"
                            "all-reduce/idle time and peak memory (see docs/SIMULATE.md)")
    tools.add_argument("--simulate-devices", default=None, metavar="KIND",
                       help="with --simulate or --auto-place: predict for devices and links of this kind "
                            f"instead of the profiled ones ({', '.join(DEVICE_KINDS)}); any "
                            "kind but 'measured' rests on assumed figures (default: measured)")
    tools.add_argument("--profile-mini", type=positive_int, default=None, metavar="N",
                       help="with --simulate or --auto-place: profile the net at N and N/2 "
                            "cases and extrapolate each operation's time to --mini (default: "
                            "the largest power of two up to --mini whose forward pass holds "
                            "at most 12 G multiply-adds, counted from the config; see "
                            "docs/SIMULATE.md)")
    tools.add_argument("--auto-place", type=positive_int, default=None, metavar="N",
                       help="rank a family of placements of the net on the N devices of --gpu "
                            "(one device, data-parallel, convolutional part data-parallel; "
                            "each with every allowed updatePeriod) by --simulate's prediction "
                            "from one short profile, print them and write the best as a "
                            "layer-def file with gpu= lines, and a layer-params file where "
                            "it changes update periods (see docs/SIMULATE.md)")
    tools.add_argument("--auto-place-out", type=Path, default=None, metavar="FILE",
                       help="with --auto-place: where to write the chosen layer-def file "
                            "(default: LAYER_DEF's name + -auto-N.cfg in the current folder); "
                            "an existing file is replaced only with --overwrite")
    tools.add_argument("--compare", type=Path, nargs="+", default=None, metavar="LAYER_DEF",
                       help="train each of these layer-def files on the same data, seed and "
                            "devices, then print a table comparing them; --layer-params gives "
                            "one shared file or one per config (with --save-path, each run's "
                            "log and checkpoint go into a sub-folder, and compare.png shows "
                            "error against time, img/s and one step per device)")
    tools.add_argument("--rounds", type=positive_int, default=None, metavar="N",
                       help="with --compare: time the trained configs in N interleaved rounds "
                            "(A B C, A B C, ...) and rank them by their median step; more "
                            "rounds tell closer configs apart (default 20; at least 6 for a "
                            "winner to be called clear, see docs/COMPARE.md)")
    tools.add_argument("--min-lead", type=min_lead, default=None, metavar="PERCENT",
                       help="with --compare: call the fastest config a clear winner only "
                            "when its lead over each other config is above PERCENT beyond "
                            "the rounds' noise (default 10: smaller leads did not repeat "
                            "from run to run on a 2-core machine; 0 counts any lead)")
    p.set_defaults(layer_params_list=None)
    tools.add_argument("--check-grads", type=flag, nargs="?", const=True, default=False,
                       metavar="0|1",
                       help="compare every layer's gradients with finite differences on "
                            "random data and exit (0 when all agree, 1 otherwise)")
    add_using_options(p)
    return p


def add_using_options(p: argparse.ArgumentParser) -> None:
    """What a trained net is used for (docs/USING.md): each needs --load-file."""
    use = p.add_argument_group("using a trained net (with --load-file; docs/USING.md)")
    use.add_argument("--predict", type=Path, nargs="+", default=None, metavar="IMAGE",
                     help="classify image files (JPEG, PNG, ...) or every image in a folder, "
                          "preprocessed as the run's test cases; prints the top classes")
    use.add_argument("--top", type=positive_int, default=5, metavar="K",
                     help="with --predict: how many classes to print per image (default 5)")
    use.add_argument("--predict-out", type=Path, default=None, metavar="CSV",
                     help="with --predict: also write every class probability of every "
                          "image to this CSV file")
    use.add_argument("--show-filters", type=layer_name, default=None, metavar="LAYER",
                     help="draw a conv layer's filters as a grid into --out PNG")
    use.add_argument("--show-preds", type=positive_int, default=None, metavar="N",
                     help="draw N test images with their top-5 predictions into --out PNG")
    use.add_argument("--out", type=Path, default=None, metavar="PNG",
                     help="the picture --show-filters or --show-preds draws")
    use.add_argument("--export-onnx", type=Path, default=None, metavar="FILE",
                     help="write the test-mode net as an ONNX model: input 'images' (raw "
                          "pixels N x C x S x S), output 'probs'")


def main(argv: list[str] | None = None) -> int:
    """The command line; under an MPI launcher, as one process of the run."""
    from convnet.app.launch import run_as_rank

    return run_as_rank(_main, argv, _early_rank_timeout(argv))


def _early_rank_timeout(argv: list[str] | None) -> float | None:
    """--rank-timeout, read ahead of the other options: it also bounds MPI's start-up,
    which comes first (a bad value is reported by the full parse, later)."""
    early = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    early.add_argument("--rank-timeout", type=rank_timeout, default=DEFAULT_WAIT_LIMIT)
    try:
        return early.parse_known_args(argv)[0].rank_timeout
    except argparse.ArgumentError:
        return DEFAULT_WAIT_LIMIT


def _main(argv: list[str] | None) -> int:
    with stop_handlers():
        try:
            args = build_parser().parse_args(argv)
            # Imported here, not above: training loads numpy and the devices, which
            # --help and a bad command line do not need.
            from convnet.app.command_line.commands import run_command

            return run_command(args)
        except ConvnetError as error:
            _flush_stdout()
            print(f"error: {_one_line(error)}", file=sys.stderr)
            return error.exit_code
        except MemoryError as failed:  # past the memory fit check: one line all the same
            _flush_stdout()
            error = OutOfMemoryError.from_memory_error(failed)
            print(f"error: {_one_line(error)}", file=sys.stderr)
            return error.exit_code
        except KeyboardInterrupt:
            _flush_stdout()
            print("interrupted", file=sys.stderr)
            return 130
        except Terminated:
            _flush_stdout()
            print("terminated", file=sys.stderr)
            return 143
        except BrokenPipeError:  # e.g. piped into `head`: the reader has what it wanted
            sys.stdout = None
            return 0


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _flush_stdout() -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass
