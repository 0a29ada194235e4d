"""The training options of the command line: how long, what is saved and resumed, what is
reported, and how the steps run."""

from __future__ import annotations

import argparse
from pathlib import Path

from convnet.app.command_line.original_flags import SHORT_FLAGS
from convnet.app.option_values import (flag, layer_name, max_test_err, positive_int,
                                       rank_timeout, slow_device)
from convnet.runtime.processes.communicator import DEFAULT_WAIT_LIMIT


def add_training_options(p: argparse.ArgumentParser) -> None:
    """The training group of --help."""
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
    train.add_argument("--init-from", type=Path, default=None, metavar="RUN",
                       help="start a new run from the weights of another (a checkpoint.npz, "
                            "or the folder holding it, as --load-file takes; also what "
                            "python -m convnet.import_onnx writes): every layer with the same "
                            "name and shapes is loaded, the others start from initW; "
                            "momentum, epochs and schedules start afresh (docs/FINETUNE.md)")
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
    train.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                       help="also write every test's figures (training and test cost and "
                            "error, learning rate, img/s) as TensorBoard event files into "
                            "DIR, to watch with `tensorboard --logdir DIR` (needs the "
                            "'tensorboard' extra)")
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
