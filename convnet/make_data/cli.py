"""The command line of ``python -m convnet.make_data`` (installed as ``convnet-make-data``).

Every user error ends as one line on stderr (``error: ...``) and the error type's
exit status; Ctrl-C ends with "interrupted" and 130, SIGTERM with "terminated" and
143, leaving complete batches and no half-written one (a rerun writes the rest).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from convnet.data.options import DEFAULT_QUALITY, MAX_IMAGE_SIDE
from convnet.data.ranges import format_range
from convnet.errors import ConvnetError, UsageError
from convnet.make_data.layout import DEFAULT_BATCH_SIZE, DEFAULT_SUB_BATCH_SIZE
from convnet.optional import require_for_make_data
from convnet.stop_signals import STOP_EXITS, Terminated, raising_on_stop_signals


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as a :class:`UsageError` (one line, exit 2)."""

    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def _size(text: str) -> int:
    value = _positive(text)
    if value > MAX_IMAGE_SIDE:
        raise argparse.ArgumentTypeError(f"at most {MAX_IMAGE_SIDE} pixels, got {value}")
    return value


def _quality(text: str) -> int:
    value = _positive(text)
    if value > 100:
        raise argparse.ArgumentTypeError(f"a JPEG quality is 1-100, got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction, got '{text}'") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {value}")
    return value


def default_workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else os.cpu_count() or 1, 8))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m convnet.make_data", description=(
        "Write the JPEG batches of cuda-convnet2's make-data.py (for --data-provider image) "
        "from a class-folder tree SRC/CLASS/*.jpg or from the ILSVRC-2012 tars."))
    add = parser.add_argument
    add("--src-dir", required=True, help="a folder of class folders, or the folder holding "
        "ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar and the devkit")
    add("--tgt-dir", required=True, help="where the batches go (new, empty, or an earlier "
        "make-data output of the same sources, which is resumed)")
    add("--size", type=_size, default=256, help="short side of every stored image (256)")
    add("--keep-borders", action="store_true", help="keep the whole resized image instead of "
        "its centre square (the original's CROP_TO_SQUARE = False)")
    add("--quality", type=_quality, default=DEFAULT_QUALITY,
        help=f"JPEG quality of the stored images ({DEFAULT_QUALITY})")
    add("--batch-size", type=_positive, default=DEFAULT_BATCH_SIZE,
        help=f"images per batch ({DEFAULT_BATCH_SIZE})")
    add("--sub-batch-size", type=_positive,
        help=f"images per sub-batch file ({DEFAULT_SUB_BATCH_SIZE}, or the batch size when "
             "that is smaller)")
    add("--val-dir", help="class-folder tree of the test images (same class names)")
    add("--val-fraction", type=_fraction, default=0.0,
        help="share of every class held out as test images (0: no test batches)")
    add("--seed", type=int, default=0, help="seed of the shuffle and the held-out choice (0)")
    add("--workers", type=_positive, default=default_workers(),
        help="processes converting images (the cores, at most 8)")
    add("--overwrite", action="store_true",
        help="write into a target that holds other files or other batches")
    add("--no-progress", action="store_true", help="no progress bar")
    return parser


def options_from(argv: list[str] | None):
    """The run's :class:`~convnet.make_data.run.MakeDataOptions` (Pillow checked first:
    the modules that convert import it)."""
    args = build_parser().parse_args(argv)
    require_for_make_data("PIL", "Pillow", "make-data (converting the images)")
    from convnet.make_data.run import MakeDataOptions

    if args.sub_batch_size is None:  # a small --batch-size alone is one sub-batch a batch
        args.sub_batch_size = min(DEFAULT_SUB_BATCH_SIZE, args.batch_size)
    if args.sub_batch_size > args.batch_size:
        raise UsageError(f"--sub-batch-size {args.sub_batch_size} is larger than --batch-size "
                         f"{args.batch_size}")
    return MakeDataOptions(args.src_dir, args.tgt_dir, args.size, args.keep_borders,
                           args.quality, args.batch_size, args.sub_batch_size, args.val_dir,
                           args.val_fraction, args.seed, args.workers, args.overwrite,
                           not args.no_progress)


def report(summary, tgt_dir: str) -> str:
    """What a run says at its end (``summary``: its :class:`~convnet.make_data.run.Summary`)."""
    batches = len(summary.train_batches) + len(summary.test_batches)
    lines = [f"{tgt_dir}: {summary.images} images in {len(summary.train_batches)} training and "
             f"{len(summary.test_batches)} test batch(es); "
             + (f"{batches - summary.kept_batches} written now, {summary.kept_batches} kept "
                f"from an earlier run" if summary.kept_batches else "all written now")]
    if summary.skipped or summary.ignored:
        lines.append(f"skipped {summary.skipped} unreadable image(s), ignored "
                     f"{summary.ignored} file(s) or link(s) that are not images: see "
                     f"{summary.log_path}")
    ranges = f"--train-range {format_range(summary.train_batches)}"
    if summary.test_batches:
        ranges += f" --test-range {format_range(summary.test_batches)}"
    lines.append(f"train with: --data-path {tgt_dir} --data-provider image {ranges}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    with raising_on_stop_signals():
        try:
            options = options_from(argv)
            from convnet.make_data.run import make_data

            print(report(make_data(options), options.tgt_dir))
            return 0
        except ConvnetError as error:
            sys.stdout.flush()
            print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
            return error.exit_code
        except KeyboardInterrupt:
            return _stopped(signal.SIGINT)
        except Terminated:
            return _stopped(signal.SIGTERM)


def _stopped(signum: int) -> int:
    code, line = STOP_EXITS[signum]
    sys.stdout.flush()
    print(line, file=sys.stderr)
    return code
