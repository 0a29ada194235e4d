"""What a trainer tells its user about the run itself: at its start, on Ctrl-C, at its end.

The texts are :mod:`convnet.app.run.summary`'s; here they are filled in from a
run's state and printed through its :class:`~convnet.app.run.log.RunLog`, so that
the epoch loop (:mod:`convnet.app.run.training`) holds training only.
"""

from __future__ import annotations

from pathlib import Path

from convnet.app import launch
from convnet.app.checkpoint import CHECKPOINT_NAME
from convnet.app.invocation import resume_command, shown_path
from convnet.app.options import RunOptions
from convnet.app.run.log import CSV_NAME, RunLog
from convnet.app.run.log_plot import PNG_NAME as LOG_PNG
from convnet.app.run.summary import (closing_summary, data_wait_line, idle_devices_warning,
                                     oversubscription_warning, start_banner, where_text)
from convnet.optional import PLOT_INSTALL, has_matplotlib
from convnet.plan.ops import Plan
from convnet.runtime.devices.backends import choose_backend


def print_opening(log: RunLog, opts: RunOptions, plan: Plan, provider, batch_cases: int,
                  save_dir: Path | None, epoch: int, batch_index: int) -> None:
    """The banner, and warnings about what the run will really do; ``epoch`` and
    ``batch_index`` say where a resumed run starts."""
    backend = choose_backend(opts.backend)
    files = [CHECKPOINT_NAME, CSV_NAME] + ([LOG_PNG] if has_matplotlib() else [])
    cluster = launch.cluster_for(opts.gpu)
    ranks = (cluster.devices_per_rank, cluster.hosts) if cluster.size > 1 else None
    for line in start_banner(opts.layer_def, plan, backend, provider, batch_cases, opts.epochs,
                             save_dir, files, ranks, opts.gpu_note):
        log.note(line)
    if save_dir is not None and has_matplotlib():
        log.note(f"watch {shown_path(save_dir / LOG_PNG)}: cost and error against epochs, "
                 f"redrawn at every test")
    if opts.resume is not None:
        log.note(f"resuming {shown_path(opts.resume.checkpoint)} at "
                 f"{where_text(epoch, batch_index, len(provider.train_batches))}")
    for warning in (idle_devices_warning(plan),
                    oversubscription_warning(backend, len(plan.used_devices))):
        if warning:
            log.warn(warning)
    fits = batch_cases - batch_cases % plan.num_shards  # --mini is a multiple of the shards
    if opts.mini > batch_cases and fits:  # (a batch of fewer cases than shards is refused)
        more = " or more cases per batch (--dummy-cases)" if provider.name == "dummy" else ""
        log.warn(f"--mini {opts.mini} is larger than a data batch ({batch_cases} cases): a "
                 f"minibatch never spans two batches, so each step trains on {batch_cases} "
                 f"cases; give --mini {fits} or less{more}")
    if opts.color_noise > 0 and provider.image_shape[0] == 1:
        log.warn(f"--color-noise {opts.color_noise:g} on data of one channel "
                 f"({'x'.join(map(str, provider.image_shape))} per case) has no colour to "
                 f"shift: it shifts each training case's brightness at random, "
                 f"{opts.color_noise:g} standard deviations of the pixels wide")
    if save_dir is not None and not has_matplotlib():
        log.note(f"(no {LOG_PNG}: drawing it needs matplotlib; {PLOT_INSTALL})")


def print_data_notes(log: RunLog, provider, data_wait: float, train_seconds: float) -> None:
    """How long training waited for data (for providers that decode as they serve), and
    the images left out as unreadable."""
    if provider.reports_data_wait:
        log.note(data_wait_line(data_wait, train_seconds))
    if provider.skipped:
        first, why = next(iter(provider.skipped.items()))
        log.warn(f"left out {len(provider.skipped)} image(s) that cannot be decoded "
                 f"(--skip-bad-images); the first: {first}: {why}")


def interrupt_status(checkpoint: Path, saved_at: tuple[int, int] | None, saved_now: bool,
                     save_dir: Path, batches_per_epoch: int) -> str:
    """After Ctrl-C: the checkpoint that survived, where it stands (``saved_at``: its
    epoch and batch index, None if this run saved none), and the command that resumes it."""
    if saved_at is None:
        earlier = f"; {shown_path(checkpoint)} is an earlier run's" if checkpoint.exists() else ""
        return f"interrupted before this run's first checkpoint{earlier}"
    what = "saved" if saved_now else "last saved:"
    resume = resume_command(save_dir, processes=launch.process_count())
    return (f"{what} {shown_path(checkpoint)} ({where_text(*saved_at, batches_per_epoch)});"
            f" to resume: {resume}")


def print_closing_summary(log: RunLog, opts: RunOptions, save_dir: Path | None,
                          saved_checkpoint: Path | None, picture: Path | None,
                          kept_at: str | None = None) -> None:
    """The final and best test error, the time, the files written (the checkpoint if
    saved, the log, and its picture if drawn) and how to go on.  ``kept_at``: where the
    checkpoint stands when it is not the final state (the tests after it were above
    --max-test-err), which is then said instead of listing it as saved."""
    csv_path = log.csv_path
    files = [saved_checkpoint] if saved_checkpoint is not None and kept_at is None else []
    if csv_path is not None and csv_path.exists():
        files += [csv_path] + ([picture] if picture is not None else [])
    kept = None
    if saved_checkpoint is not None and kept_at is not None:
        kept = (f"checkpoint: {shown_path(saved_checkpoint)} ({kept_at}): no later test was "
                f"within --max-test-err {100 * opts.max_test_err:.2f}%")
    for line in closing_summary(log.cumulative_time, (log.tests or [None])[-1], log.best_test,
                                files, save_dir, opts.epochs, launch.process_count(), kept):
        log.note(line)
