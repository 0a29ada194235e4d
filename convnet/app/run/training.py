"""The training job: data, net, plan and executor put together, epoch after epoch.

Batches come from a data provider in a fixed order (and, for training,
augmented deterministically from (seed, epoch, batch)), each batch is cut
into minibatches of ``--mini`` cases, and every ``--test-freq`` batches (and
at the end of every epoch) the test batches are evaluated, a line is printed,
a CSV row is logged and the checkpoint ``SAVE_PATH/checkpoint.npz`` is
written (unless the test error is above ``--max-test-err``).

The checkpoint holds the weights and momentum, the step/epoch/batch counters,
the resumable options and the number of CSV rows logged.  Every random draw
(initial weights, dropout masks, data augmentation) is a pure function of the
seed and those counters, so they are the whole random-number state: a run
resumed from any checkpoint continues exactly where the saved run stood and
ends with bitwise the weights of an uninterrupted run, and its log keeps one
row per test interval (rows logged after the checkpoint are dropped).

Here are the loop, its testing and its checkpoints; :mod:`convnet.app.run.job` starts
it (checks first, the save folder claimed last); the parts it runs are built by
:mod:`convnet.app.run.assembly`, what it says about the run at its start, on Ctrl-C and
at its end is :mod:`convnet.app.run.reporting`'s, ``--write-features`` is features'.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from convnet.app import launch
from convnet.app.checkpoint import CHECKPOINT_NAME, save_checkpoint
from convnet.app.invocation import shown_path
from convnet.app.options import RunOptions
from convnet.app.saved_options import Resume, options_for_checkpoint
from convnet.app.run.assembly import (TrainingExecutor, host_buffers, reported_cost_layer,
                                      views_per_test_case)
from convnet.app.run.features import check_feature_layer
from convnet.app.run.log import RunLog, TestResult, progress_bar
from convnet.app.run.evaluation import Evaluator
from convnet.app.run.event_files import EventFiles
from convnet.app.run.minibatches import minibatch_bounds, minibatches
from convnet.app.run.live_picture import LivePicture
from convnet.app.run.reporting import (interrupt_status, print_closing_summary,
                                       print_data_notes, print_opening)
from convnet.app.run.init_state import read_init_state
from convnet.app.run.resume_state import (check_classes, classes_meta, loss_scale_meta,
                                          read_counters, read_state, restore_loss_scale,
                                          unused_layers)
from convnet.app.run.signals import deferred_interrupt, interrupt_requested, raise_if_stopped
from convnet.app.run.summary import where_text
from convnet.config.model import NetConfig
from convnet.data import BatchPrefetcher
from convnet.errors import (CheckpointError, ConvnetError, DataError, NonFiniteDataError,
                            TrainingError)
from convnet.plan.ops import Plan
from convnet.stop_signals import Terminated


class StopAtBatchEnd(KeyboardInterrupt):
    """A first Ctrl-C, acted on at the end of a data batch (the run is saved there)."""


class Trainer:
    """One training run: the loop, testing, logging and checkpoints.

    In a multi-process run every rank has a Trainer; only the root (rank 0)
    writes the checkpoint, the log and features, the others (``root=False``,
    no ``save_dir``) send it their share of the state when it saves.
    """

    def __init__(self, opts: RunOptions, provider, net: NetConfig, plan: Plan,
                 executor: TrainingExecutor, save_dir: Path | None = None, root: bool = True,
                 announce: bool = True, test_lines: bool = True):
        self.opts = opts
        self.root = root
        self.announce = announce  # the banner and the closing summary (--compare has its own)
        self.provider = provider
        self.net = net
        self.plan = plan
        self.executor = executor
        self.epoch = 1
        self.batch_index = 0  # batches of the current epoch already trained
        self.cost_layer = reported_cost_layer(net, opts.logreg_name)
        self.test_views = views_per_test_case(opts, provider, net, self.cost_layer)
        # What batches are loaded into, reused once a batch has trained; replicas that
        # run apart (they have settle()) may still read a batch when the loop takes the
        # next, so theirs are new every time.
        self.buffers = None if hasattr(executor, "settle") else host_buffers(opts)
        self.evaluator = Evaluator(opts.mini, provider, net, plan, executor, self.cost_layer,
                                   self.test_views, self.buffers)
        check_feature_layer(opts, net, plan, provider.test_batches, make_folder=root)
        self.save_dir = save_dir
        self.checkpoint = save_dir / CHECKPOINT_NAME if save_dir is not None else None
        self._saved_step: int | None = None  # executor step of the last save of this run
        self._saved_at: tuple[int, int] | None = None  # its (epoch, batch_index)
        self._per_batch = 1  # minibatches per data batch, for the progress bar
        self.data_wait = 0.0  # seconds the loop waited for a training batch
        self.train_seconds = 0.0  # seconds it spent training batches
        self.log = RunLog(save_dir, self.cost_layer, plan, quiet=opts.no_progress,
                          test_lines=test_lines)
        self.picture = LivePicture(self.log, opts.layer_def)  # log.png, redrawn at each test
        self.events = EventFiles(opts.tensorboard if root else None, self.log.warn)
        if opts.profile:
            executor.timings = []  # the executor records op timings from now on

    # ----------------------------------------------------------- checkpoints
    def restore(self, resume: Resume) -> None:
        """Continue the saved run: its weights, momentum, counters and log rows."""
        where = resume.checkpoint
        counters = read_counters(where, resume.meta, None if self.opts.test_only
                                 else len(self.provider.train_batches))
        arrays = read_state(where, self.net, self.plan)
        try:
            self.executor.load_state_arrays(arrays)
        except DataError as error:
            raise CheckpointError(f"{where}: does not fit this net "
                                  f"({self.opts.layer_def}): {error}") from None
        check_classes(where, resume.meta, self.provider)  # a net that fits, on other data?
        unused = unused_layers(resume.keys, self.net, self.plan)
        if unused:
            self.log.warn(f"{where} holds weights of layers this net does not have, ignored: "
                          f"{', '.join(unused)}")
        self.executor.step_count = counters.step
        restore_loss_scale(where, resume.meta, self.executor)
        self.epoch = counters.epoch
        self.batch_index = counters.batch_index
        self.log.cumulative_time = counters.cumulative_time
        self.log.resume_from(counters.log_rows)
        same_file = self.checkpoint is not None and \
            Path(where).resolve() == self.checkpoint.resolve()
        self._saved_step = counters.step if same_file else None
        self._saved_at = (counters.epoch, counters.batch_index) if same_file else None

    def start_from(self, checkpoint: Path) -> None:
        """A new run from another's weights (--init-from): the layers that fit are
        loaded, the others keep their initial weights; momentum and counters stay fresh."""
        arrays, match = read_init_state(checkpoint, self.net, self.plan)
        try:
            self.executor.load_state_arrays(arrays)
        except DataError as error:
            raise CheckpointError(f"{checkpoint}: {error}") from None
        if self.root:
            for line in match.table(shown_path(checkpoint)):
                self.log.note(line)

    def save(self) -> Path | None:
        if not self.root:
            if self.opts.save_path is not None and not self.opts.test_only:
                self.executor.state_arrays()  # this rank's share, for the root's checkpoint
            return None
        if self.checkpoint is None:
            return None
        self.log.start()  # the log the checkpoint's row count describes
        step = self.executor.step_count
        meta = {"options": options_for_checkpoint(self.opts),
                "counters": {"step": step, "epoch": self.epoch, "batch_index": self.batch_index,
                             "cumulative_time": self.log.cumulative_time,
                             "log_rows": self.log.rows},
                # Every random draw (weights, dropout masks, augmentation) is a pure
                # function of these, so they are the whole random-number state.
                "rng": {"seed": self.opts.seed, "dropout_step": step,
                        "data_epoch": self.epoch},
                **classes_meta(self.provider), **loss_scale_meta(self.executor)}
        save_checkpoint(self.checkpoint, self.executor.state_arrays(), meta)
        self._saved_step = step
        self._saved_at = (self.epoch, self.batch_index)
        return self.checkpoint

    @property
    def saved_checkpoint(self) -> Path | None:
        """The checkpoint this run saved (or resumed in its own folder), else None."""
        return self.checkpoint if self._saved_at is not None else None

    # -------------------------------------------------------------- the loop
    def train(self) -> int:
        opts = self.opts
        batches = self.provider.train_batches
        if not batches:
            raise DataError("the train range selects no batch")
        if not self.provider.test_batches:
            raise DataError("the test range selects no batch")
        total_batches = opts.epochs * len(batches)
        done_before = (self.epoch - 1) * len(batches) + self.batch_index
        if done_before >= total_batches:
            self.log.read_resumed()  # the run's result all the same (the Python API's)
            self.log.note(f"nothing to train: the checkpoint has trained "
                          f"{done_before / len(batches):g} of {opts.epochs} epoch(s); give "
                          "--epochs N to train further")
            return 0
        batch_cases = self.provider.num_cases(batches[0])
        if self.announce:
            print_opening(self.log, opts, self.plan, self.provider, batch_cases, self.save_dir,
                          self.epoch, self.batch_index)
        self._per_batch = len(minibatch_bounds(batch_cases, opts.mini, self.plan.num_pieces,
                                                batches[0]))
        test_freq = opts.test_freq or len(batches)
        self.log.restart_clock()
        try:
            # A first Ctrl-C saves at the end of the batch in one process; under mpiexec
            # the ranks could not agree on which batch, so it stops the run at once (the
            # last checkpoint stays whole).
            one_process = launch.process_count() == 1
            with deferred_interrupt(self.checkpoint is not None and one_process), \
                    progress_bar(total_batches * self._per_batch, done_before * self._per_batch,
                                 disable=opts.no_progress) as bar:
                self._train_epochs(batches, total_batches, test_freq, bar)
        except KeyboardInterrupt as stop:
            self._report_interrupt(at_batch_end=isinstance(stop, StopAtBatchEnd))
            self._draw_log_picture()
            raise
        except (Terminated, ConvnetError):  # stopped early: the rows so far are drawn too
            self._draw_log_picture()
            raise
        self._finish()
        self.log.close()
        picture = self.picture.finish()
        if self.announce:
            print_data_notes(self.log, self.provider, self.data_wait, self.train_seconds)
            behind = self._saved_at is not None and self._saved_step != self.executor.step_count
            kept_at = where_text(*self._saved_at, len(batches)) if behind else None
            print_closing_summary(self.log, opts, self.save_dir, self.saved_checkpoint,
                                  picture, kept_at)
        return 0

    def _train_epochs(self, batches: list[int], total_batches: int, test_freq: int, bar) -> None:
        # One loader for every epoch left: the first batch of an epoch is loaded ahead
        # (during the previous epoch's last batch and test) like the others.
        schedule = [(epoch, batch_id) for epoch in range(self.epoch, self.opts.epochs + 1)
                    for batch_id in (batches[self.batch_index:] if epoch == self.epoch
                                     else batches)]
        with BatchPrefetcher(self.provider, schedule, train=True, stored=True,
                             depth=self.opts.prefetch, buffers=self.buffers) as loader:
            for batch_id, batch in loader:
                self._next_epoch_if_done(batches)
                done = (self.epoch - 1) * len(batches) + self.batch_index
                progress = done / total_batches
                started = time.perf_counter()
                self._guarded(self._train_batch, batch, progress, bar, batch_id=batch_id)
                self.train_seconds += time.perf_counter() - started
                self.batch_index += 1
                if (done + 1) % test_freq == 0 or self.batch_index == len(batches):
                    self._guarded(self._settle, batch_id=batch_id)
                    test_result = self._guarded(self.test, batch_id=batch_id)
                    at = self.epoch - 1 + self.batch_index / len(batches)
                    self.log.record(self.epoch, batch_id, test_result,
                                    self._learning_rate(progress), write=bar.write,
                                    position=at)
                    self.picture.update()
                    self.events.add(self.log.history[-1], self.executor.step_count)
                    self._maybe_save(test_result.error, write=bar.write)
                if interrupt_requested():
                    raise StopAtBatchEnd()
        self.data_wait += loader.wait_seconds
        self._next_epoch_if_done(batches)

    def _next_epoch_if_done(self, batches: list[int]) -> None:
        """Move the counters on to the next epoch once every batch of this one trained
        (only then: a run stopped at an epoch's end saves it as that epoch's end)."""
        if self.batch_index >= len(batches):
            self.epoch += 1
            self.batch_index = 0

    def _draw_log_picture(self) -> None:
        """log.png of a run that stops early, as the banner promised; a failure to draw
        it is said in one line and does not hide why the run stopped."""
        try:
            self.picture.finish()
        except ConvnetError as error:
            self.log.warn(str(error))

    def _report_interrupt(self, at_batch_end: bool) -> None:
        """Ctrl-C: save at a batch end when asked to, then name the checkpoint that
        survived, where it stands, and the command that resumes it."""
        if self.checkpoint is None:
            return
        # --max-test-err: a state no test has passed is not saved over a kept checkpoint.
        saved_now = (at_batch_end and self._saved_step != self.executor.step_count
                     and self.opts.max_test_err is None)
        if saved_now:
            self.save()
        self.log.status(interrupt_status(self.checkpoint, self._saved_at, saved_now,
                                         self.save_dir, len(self.provider.train_batches)))

    def _guarded(self, fn, *args, batch_id: int):
        """Run ``fn``, turning a NaN/inf error into one naming where training stood."""
        try:
            return fn(*args)
        except TrainingError as error:
            where = f"epoch {self.epoch}, batch {batch_id}"
            if isinstance(error, NonFiniteDataError):  # the data itself, not the training
                summary, text = f"bad data at {where}", f"bad data in {where}: {error}"
            else:
                summary = f"diverged at {where}"
                text = (f"training diverged in {where}: {error}; lower the learning rates "
                        f"(epsW, epsB) in {self.opts.layer_params}")
            if self._saved_step is not None:
                text += f"; the last good checkpoint is {shown_path(self.checkpoint)}"
            raise TrainingError(text, summary=summary) from None

    def _train_batch(self, batch: list[np.ndarray], progress: float, bar):
        totals = {"cost": 0.0, "error": 0.0, "cases": 0, "seconds": 0.0}
        parts = list(minibatches(batch, self.opts.mini, self.plan.num_pieces))
        if len(parts) != self._per_batch:  # a batch of another size: correct the bar's total
            bar.total += len(parts) - self._per_batch
        stage = getattr(self.executor, "stage", None)  # the lockstep executor's uploads ahead
        for k, part in enumerate(parts):
            raise_if_stopped()
            if stage is not None and k + 1 < len(parts):
                stage(parts[k + 1])  # sent to the devices while this step runs
            result = self.executor.step(part, progress)
            self._add_step(totals, result)
            if self.opts.profile:
                self.log.add_profile(self.executor.timings, result.host_waits)
            bar.set_postfix_str(f"cost {totals['cost'] / max(totals['cases'], 1):.4f}",
                                refresh=False)
            bar.update(1)
        self.log.accumulate_train(totals)

    def _add_step(self, totals: dict, result) -> None:
        costs = result.costs.get(self.cost_layer, {})
        totals["cost"] += costs.get("cost", 0.0) * result.num_cases
        totals["error"] += costs.get("error", 0.0) * result.num_cases
        totals["cases"] += result.num_cases
        totals["seconds"] += result.seconds

    def _settle(self) -> None:
        """Under ``--sync async:S`` a step only queues its shards: before a test, train
        what is queued and count those shards and that time in the interval, so that its
        img/s is the training's (a lockstep executor has nothing queued)."""
        settle = getattr(self.executor, "settle", None)
        if settle is not None:
            totals = {"cost": 0.0, "error": 0.0, "cases": 0, "seconds": 0.0}
            self._add_step(totals, settle())
            self.log.accumulate_train(totals)

    def _learning_rate(self, progress: float) -> float:
        for ldef in self.net:
            if ldef.learns:  # frozen layers' rates are 0
                return ldef.params["epsW"][0].value(progress)
        return 0.0

    def _maybe_save(self, test_error: float, write=print) -> None:
        limit = self.opts.max_test_err
        if limit is not None and test_error > limit:
            if self.checkpoint is not None:
                write(f"test error {100 * test_error:.2f}% > --max-test-err "
                      f"{100 * limit:.2f}%: not saved")
            return
        self.save()

    def _finish(self) -> None:
        """--force-save: make sure the final state is saved, whatever its test error."""
        if self.checkpoint is None:
            return
        if self.opts.force_save and self._saved_step != self.executor.step_count:
            self.save()

    def test(self) -> TestResult:
        """The test batches evaluated by the net as it stands."""
        return self.evaluator.test()

    def features(self, batch, layer: str) -> np.ndarray:
        """``layer``'s test-mode outputs for ``batch``, one row per case."""
        return self.evaluator.features(batch, layer)
