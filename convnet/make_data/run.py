"""One make-data run: sources -> numbered batches, ``batches.meta`` and the log.

The batches are planned from the sources alone (:mod:`~convnet.make_data.layout`),
so a rerun knows which it would write; those already complete in a resumed target
are kept and only decoded again for the statistics.  Images that cannot be read
are left out of their batch (which then holds fewer images) and listed in
``make-data.log`` (:mod:`~convnet.make_data.skip_log`).  ``batches.meta`` is
written last.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from dataclasses import dataclass
from typing import Iterator, NamedTuple

from tqdm import tqdm

from convnet.data.options import DEFAULT_QUALITY
from convnet.data.photos.sources import DataSet, folder_dataset
from convnet.errors import DataError, UsageError
from convnet.make_data.ilsvrc import ilsvrc_dataset, is_ilsvrc_folder
from convnet.make_data.layout import (DEFAULT_BATCH_SIZE, DEFAULT_SUB_BATCH_SIZE, BatchPlan,
                                      plan_batches)
from convnet.make_data.skip_log import SkipLog
from convnet.make_data.statistics import PixelSums
from convnet.make_data.target import LOG_FILE, META_FILE, prepare_target
from convnet.make_data.pool import run_in_order
from convnet.make_data.work import ChunkResult, Conversion
from convnet.make_data.writer import (PICKLE_PROTOCOL, complete_parts,
                                      remove_leftovers, remove_other_batches, sub_batches,
                                      write_batch)
from convnet.outputs import write_output

#: Images per worker task: small enough for an even spread and a lively progress bar.
CHUNK = 32


@dataclass(frozen=True)
class MakeDataOptions:
    """A run's settings, as the command line's options of the same names give them."""

    src_dir: str
    tgt_dir: str
    size: int = 256
    keep_borders: bool = False
    quality: int = DEFAULT_QUALITY
    batch_size: int = DEFAULT_BATCH_SIZE
    sub_batch_size: int = DEFAULT_SUB_BATCH_SIZE
    val_dir: str | None = None
    val_fraction: float = 0.0
    seed: int = 0
    workers: int = 1
    overwrite: bool = False
    progress: bool = True


class Summary(NamedTuple):
    """What a run wrote: batch numbers, counts, and where the meta file and log are."""

    train_batches: list[int]
    test_batches: list[int]
    kept_batches: int
    images: int
    skipped: int
    ignored: int
    meta_path: str
    log_path: str


def make_data(options: MakeDataOptions) -> Summary:
    data = _dataset(options)
    plans = plan_batches(data, options.batch_size, options.seed,
                         shuffle_test=not is_ilsvrc_folder(options.src_dir))
    kept, log = _prepare(options, data, plans)
    sums = _convert(options, plans, kept, log)
    if sums.images == 0:
        raise DataError(f"{options.src_dir}: no training image could be read "
                        f"(see {log.path})")
    meta = {"data_mean": sums.data_mean(), "color_pca": sums.color_pca(),
            "num_vis": 3 * options.size ** 2, "batch_size": options.batch_size,
            "label_names": list(data.label_names)}
    meta_path = os.path.join(options.tgt_dir, META_FILE)
    with _writing(options.tgt_dir):
        write_output(meta_path, pickle.dumps(meta, protocol=PICKLE_PROTOCOL))
    return Summary([p.number for p in plans if p.train], [p.number for p in plans if not p.train],
                   len(kept), sum(len(p.refs) for p in plans) - log.skipped(), log.skipped(),
                   len(data.ignored), meta_path, log.path)


def _prepare(options: MakeDataOptions, data: DataSet, plans: list[BatchPlan]
             ) -> tuple[dict[int, list[str]], SkipLog]:
    """Ready the target; the parts of the batches to keep (number -> paths) and the log."""
    target = options.tgt_dir
    with _writing(target):
        state = prepare_target(target, _settings(options, data), options.overwrite)
        remove_leftovers(target)
        if state.earlier_run and not state.resumed:
            remove_other_batches(target, {plan.number for plan in plans})
        log = SkipLog(os.path.join(target, LOG_FILE), data.ignored, state.resumed)
    kept = {plan.number: parts for plan in plans
            if state.resumed and not options.overwrite
            and (parts := complete_parts(target, plan.number)) is not None}
    return kept, log


def _convert(options: MakeDataOptions, plans: list[BatchPlan], kept: dict[int, list[str]],
             log: SkipLog) -> PixelSums:
    """Write every batch not kept, in number order; the training images' pixel sums."""
    sums = PixelSums(options.size)
    conversion = Conversion(options.size, options.keep_borders, options.quality)
    jobs = [(plan, _tasks(plan, kept.get(plan.number), conversion)) for plan in plans]
    results = run_in_order((task for _, tasks in jobs for task in tasks), options.workers)
    to_convert = sum(len(plan.refs) for plan in plans if plan.number not in kept)
    # closing: on any error the worker processes are ended at once, not when collected
    with contextlib.closing(results), tqdm(total=to_convert, unit="img", desc="make-data",
                                           disable=not options.progress or None) as bar:
        for plan, tasks in jobs:
            outcomes = [next(results) for _ in tasks]
            for outcome in outcomes:
                if outcome.sums is not None:
                    sums.merge(outcome.sums)
            if plan.number not in kept:
                _write(options.tgt_dir, plan, outcomes, options.sub_batch_size, log)
                bar.update(len(plan.refs))
    return sums


def _dataset(options: MakeDataOptions) -> DataSet:
    if not os.path.isdir(options.src_dir):
        raise DataError(f"{options.src_dir}: the source folder does not exist"
                        if not os.path.exists(options.src_dir)
                        else f"{options.src_dir}: the source is not a folder")
    if is_ilsvrc_folder(options.src_dir):
        if options.val_dir is not None or options.val_fraction > 0:
            raise UsageError("--val-dir and --val-fraction are for class-folder trees: the "
                             "ILSVRC-2012 validation tar gives the test batches")
        return ilsvrc_dataset(options.src_dir, options.progress)
    for name, folder in (("--src-dir", options.src_dir), ("--val-dir", options.val_dir)):
        if folder is not None and _inside(options.tgt_dir, folder):
            raise UsageError(f"--tgt-dir {options.tgt_dir} is inside {name} {folder}: a rerun "
                             f"would read the batches as a class folder; put them elsewhere")
    return folder_dataset(options.src_dir, options.val_dir, options.val_fraction, options.seed)


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def _settings(options: MakeDataOptions, data: DataSet) -> dict:
    """What decides the batches' bytes: a resumed run must agree on all of it."""
    return {"format": "cuda-convnet2 make-data", "size": options.size,
            "keep_borders": options.keep_borders, "quality": options.quality,
            "batch_size": options.batch_size, "sub_batch_size": options.sub_batch_size,
            "seed": options.seed, "val_fraction": options.val_fraction,
            "val_dir": options.val_dir is not None,
            "sources": data.fingerprint}


def _tasks(plan: BatchPlan, kept_parts: list[str] | None, conversion: Conversion) -> list:
    """The worker tasks of one batch: convert its images, or, for a kept training
    batch, only count its images in the statistics."""
    if kept_parts is not None:
        return [("sums", (path, conversion.size)) for path in kept_parts] if plan.train else []
    return [("convert", (plan.refs[start:start + CHUNK], conversion, plan.train))
            for start in range(0, len(plan.refs), CHUNK)]


def _write(target: str, plan: BatchPlan, outcomes: list[ChunkResult], sub_batch_size: int,
           log: SkipLog) -> None:
    results = [result for outcome in outcomes for result in outcome.jpegs]
    jpegs = [r for r in results if isinstance(r, bytes)]
    labels = [label for label, r in zip(plan.labels, results) if isinstance(r, bytes)]
    failures = [(ref.name, r) for ref, r in zip(plan.refs, results) if isinstance(r, str)]
    with _writing(target):
        if jpegs:
            write_batch(target, plan.number, sub_batches(jpegs, labels, sub_batch_size))
        log.record(plan.number, failures)


@contextlib.contextmanager
def _writing(target: str) -> Iterator[None]:
    """An ``OSError`` while writing (a full disk) as one line naming the target."""
    try:
        yield
    except OSError as error:
        where = f" {error.filename}" if error.filename else ""
        raise DataError(f"{target}: cannot write{where} ({error.strerror or error}); "
                        f"complete batches are kept, rerun to go on") from None
