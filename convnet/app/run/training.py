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

Errors are reported before work is wasted: the save path is claimed (see
:mod:`convnet.app.run.folder`) and the config parsed before any data is
loaded, and the plan's memory is checked against the machine's before the
executor allocates it.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import numpy as np

from convnet.app import launch
from convnet.app.checkpoint import CHECKPOINT_NAME, save_checkpoint
from convnet.app.invocation import resume_command, shown_path
from convnet.app.run.log_plot import PNG_NAME as LOG_PNG
from convnet.app.run.log_plot import write_log_png
from convnet.app.run.memory_fit import check_memory, weight_sharing
from convnet.app.option_values import async_staleness
from convnet.app.options import Resume, RunOptions, options_for_checkpoint
from convnet.app.run.resume_state import read_counters, read_state, unused_layers
from convnet.app.run.folder import claim_run_folder
from convnet.app.run.log import CSV_NAME, RunLog, TestResult, progress_bar, read_log
from convnet.app.run.summary import (closing_summary, oversubscription_warning, start_banner,
                                     where_text)
from convnet.app.run.signals import deferred_interrupt, interrupt_requested, raise_if_stopped
from convnet.config import infer_shapes, parse_net
from convnet.config.values.typed import local_sgd_period, parse_data_columns
from convnet.config.model import NetConfig
from convnet.data import BatchPrefetcher, DataOptions, make_provider, parse_range
from convnet.errors import (CheckpointError, ConfigError, DataError, NonFiniteDataError,
                            TrainingError, UsageError)
from convnet.optional import PLOT_INSTALL, has_matplotlib
from convnet.plan.ops import Plan
from convnet.runtime.sync.async_replicas import AsyncReplicas, async_replica_devices
from convnet.runtime.devices.backends import choose_backend
from convnet.runtime.processes.cluster import cluster_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.sync.local_replicas import LocalReplicas, apart_periods
from convnet.runtime.devices.slowdown import Slowdown

#: What trains a net: the lockstep executor, or replicas that run apart.
TrainingExecutor = Executor | AsyncReplicas | LocalReplicas


def make_data_provider(opts: RunOptions):
    options = DataOptions(
        data_path=str(opts.data_path) if opts.data_path else None,
        train_range=parse_range(opts.train_range) if opts.train_range else None,
        test_range=parse_range(opts.test_range) if opts.test_range else None,
        inner_size=opts.inner_size, color_noise=opts.color_noise, scalar_mean=opts.scalar_mean,
        multiview_test=opts.multiview_test, seed=opts.seed,
        data_dims=parse_data_columns(opts.data_dims) if opts.data_dims else None,
        num_classes=opts.num_classes)
    if opts.dummy_cases is not None:
        options.cases_per_batch = opts.dummy_cases
    provider = make_provider(opts.data_provider, options=options)
    if opts.data_provider != "dummy" and opts.data_dims:
        want = parse_data_columns(opts.data_dims)[0]
        have = provider.image_shape
        if want != have and want != provider.data_dims[0]:
            raise DataError(f"--data-dims {opts.data_dims} does not match the "
                            f"'{opts.data_provider}' data, whose images are "
                            f"{'x'.join(map(str, have))}")
    return provider


def load_net_for(opts: RunOptions, provider=None) -> NetConfig:
    """The net with shapes from the provider, or from --data-dims/--num-classes.

    The config files are read before any data, so a config error is reported
    without waiting for the data to load.
    """
    parsed = parse_net(opts.layer_def, opts.layer_params)
    if provider is None and opts.data_dims and (opts.print_plan or opts.check_grads):
        dims, classes = parse_data_columns(opts.data_dims), opts.num_classes
        source = f"--data-dims {opts.data_dims}"
    else:
        if provider is None:
            provider = make_data_provider(opts)
        dims, classes = provider.data_dims, provider.num_classes
        source = (f"the '{provider.name}' data: {'x'.join(map(str, dims[0]))} per case, "
                  f"{classes} classes")
        if opts.print_plan or opts.check_grads:
            source += "; give --data-dims CxHxW to plan or check without data"
    try:
        return infer_shapes(parsed, dims, classes)
    except ConfigError as error:
        error.message = f"{error.message} (input shapes from {source})"
        wanted = getattr(error, "config_classes", None)
        if wanted is not None and (opts.data_provider == "dummy" or source.startswith("--")):
            error.message += f"; give --num-classes {wanted} to match the config"
        raise


def devices_needed(net: NetConfig) -> int:
    """How many logical devices the config's gpu= lists name (1 + the highest index)."""
    return 1 + max((g for ldef in net for g in (ldef.gpu or ())), default=0)


def check_layer_syncs(net: NetConfig, sync: str) -> None:
    """Refuse ``sync=`` keys of layers under ``--sync async``: async runs the replicas
    of the whole net apart, so no layer can keep its own mode."""
    keyed = [ldef.name for ldef in net if ldef.params.get("sync") is not None]
    if keyed and async_staleness(sync) is not None:
        raise UsageError(f"--sync {sync} runs the replicas of the whole net apart, so no "
                         f"layer can set its own mode, but the config gives sync= for "
                         f"{', '.join(keyed)}; remove those keys, or give --sync sync or "
                         f"local:K")


def build_net_and_plan(opts: RunOptions, provider=None) -> tuple[NetConfig, Plan]:
    net = load_net_for(opts, provider)
    check_layer_syncs(net, opts.sync)
    try:
        return net, launch.plan_across_ranks(net, opts.gpu, opts.mini)
    except ConfigError as error:
        saved = opts.resume.saved_options.get("gpu") if opts.resume is not None else None
        needed = devices_needed(net)
        if needed > len(opts.gpu):
            spread = ",".join(map(str, range(needed)))
            shared = ",".join([str(opts.gpu[0])] * needed)
            error.message = (f"{error.message}; the config uses {needed} logical devices: give "
                             f"--gpu {spread}, or --gpu {shared} for {needed} logical devices "
                             f"on device {opts.gpu[0]}")
        elif saved is not None and tuple(saved) != tuple(opts.gpu):
            error.message = (f"{error.message} (the checkpoint ran on --gpu "
                             f"{','.join(map(str, saved))}; its weights load on any device "
                             "list the config fits, and a device may be listed twice, "
                             "e.g. --gpu 0,0)")
        raise


def make_executor(opts: RunOptions, net: NetConfig, plan: Plan) -> TrainingExecutor:
    """The executor on the devices and backend the options name (this process's share
    of them in a multi-process run), once the plan is known to fit in memory; under
    ``--sync async:S`` the replicas that train apart (:class:`AsyncReplicas`) for a
    data-parallel net, and for any other the lockstep executor whose replicated layers
    exchange their increments apart; under local SGD of every replicated layer of a
    data-parallel net in one process, the replicas that run apart between averages
    (:class:`LocalReplicas`: bitwise the lockstep walk's weights), unless
    ``--sequential`` or ``--profile`` asks for the lockstep walk."""
    backend = choose_backend(opts.backend)
    cluster = launch.cluster_for(opts.gpu)
    check_memory(plan, net, backend, cluster.is_local,
                 weight_sharing(plan, net, backend, opts.sync, cluster.size))
    local_sgd, staleness = local_sgd_period(opts.sync), async_staleness(opts.sync)
    devices = cluster_devices(cluster, opts.gpu, backend)
    slowdown = (Slowdown(opts.slow_device[1], opts.slow_device[0], plan.num_devices)
                if opts.slow_device is not None else None)
    if staleness is not None and async_replica_devices(plan) is not None:
        return AsyncReplicas(net, plan, devices, staleness, seed=opts.seed, slowdown=slowdown,
                             cluster=cluster)
    periods = apart_periods(plan, net, local_sgd) if staleness is None else None
    if periods and cluster.size == 1 and not (opts.sequential or opts.profile):
        return LocalReplicas(net, plan, devices, periods, seed=opts.seed, slowdown=slowdown)
    # Any other plan keeps its lockstep steps; under async:S only the replicated layers'
    # increments move apart (convnet.runtime.processes.increment_exchange).
    return Executor(net, plan, devices, seed=opts.seed, parallel=not opts.sequential,
                    cluster=cluster, local_sgd=local_sgd, slowdown=slowdown,
                    async_staleness=staleness)


def run(opts: RunOptions) -> int:
    """Train (or with --test-only, evaluate) as the options say; returns the exit code."""
    if opts.test_only or opts.save_path is None or not launch.is_root():
        return _run_in(opts, None)
    loaded = opts.resume.checkpoint if opts.resume is not None else None
    with claim_run_folder(Path(opts.save_path), loaded, opts.overwrite) as save_dir:
        return _run_in(opts, save_dir)


def _run_in(opts: RunOptions, save_dir: Path | None) -> int:
    """The run itself; ``save_dir`` is the claimed save path, or None when nothing is
    saved here (in a multi-process run only rank 0 writes)."""
    root = launch.is_root()
    parse_net(opts.layer_def, opts.layer_params)  # config errors before loading any data
    provider = make_data_provider(opts)
    net, plan = build_net_and_plan(opts, provider)
    executor = make_executor(opts, net, plan)
    try:
        trainer = Trainer(opts, provider, net, plan, executor, save_dir, root=root)
        if opts.resume is not None:
            trainer.restore(opts.resume)
        if opts.test_only:
            result = trainer.test()
            trainer.log.print_test_only(result, trainer.test_views)
            if opts.write_features:
                trainer.write_features()
            return 0
        code = trainer.train()
        if opts.write_features:
            trainer.write_features()
        return code
    finally:
        executor.close()


class StopAtBatchEnd(KeyboardInterrupt):
    """A first Ctrl-C, acted on at the end of a data batch (the run is saved there)."""


def minibatch_bounds(n: int, mini: int, shards: int) -> list[tuple[int, int]]:
    """(start, stop) of each minibatch of a batch of ``n`` cases: ``mini`` cases each; a
    tail too short to give every shard a case joins the minibatch before it."""
    if n < shards:
        raise DataError(f"a batch of {n} case(s) is too small for {shards} shards")
    starts = list(range(0, n, mini))
    if len(starts) > 1 and n - starts[-1] < shards:
        starts.pop()
    return list(zip(starts, starts[1:] + [n]))


class Trainer:
    """One training run: the loop, testing, logging and checkpoints.

    In a multi-process run every rank has a Trainer; only the root (rank 0)
    writes the checkpoint, the log and features, the others (``root=False``,
    no ``save_dir``) send it their share of the state when it saves.
    """

    def __init__(self, opts: RunOptions, provider, net: NetConfig, plan: Plan, executor: Executor,
                 save_dir: Path | None = None, root: bool = True, announce: bool = True):
        self.opts = opts
        self.root = root
        self.announce = announce  # the banner and the closing summary (--compare has its own)
        self.provider = provider
        self.net = net
        self.plan = plan
        self.executor = executor
        self.epoch = 1
        self.batch_index = 0  # batches of the current epoch already trained
        self.cost_layer = self._cost_layer(opts.logreg_name)
        self.test_views = self._test_views_count()
        self._check_feature_layer()
        self.save_dir = save_dir
        self.checkpoint = save_dir / CHECKPOINT_NAME if save_dir is not None else None
        self._saved_step: int | None = None  # executor step of the last save of this run
        self._saved_at: tuple[int, int] | None = None  # its (epoch, batch_index)
        self._per_batch = 1  # minibatches per data batch, for the progress bar
        self.log = RunLog(save_dir, self.cost_layer, plan, quiet=opts.no_progress)
        if opts.profile:
            executor.timings = []  # the executor records op timings from now on

    def _cost_layer(self, wanted: str | None) -> str:
        costs = [l.name for l in self.net if l.is_cost]
        if not costs:
            raise ConfigError("the net has no cost layer to train", file=self.net.layer_def_file)
        if wanted is None:
            logregs = [c for c in costs if self.net[c].type == "cost.logreg"]
            return (logregs or costs)[0]
        if wanted not in costs:
            raise ConfigError(f"--logreg-name '{wanted}' is not a cost layer of the net "
                              f"(cost layers: {', '.join(costs)})")
        return wanted

    def _test_views_count(self) -> int:
        views = getattr(self.provider, "num_views", 1) if self.opts.multiview_test else 1
        if views > 1 and self.net[self.cost_layer].type != "cost.logreg":
            raise ConfigError(f"--multiview-test averages the probabilities that a cost.logreg "
                              f"layer reads, but the reported cost layer '{self.cost_layer}' "
                              f"is {self.net[self.cost_layer].type}; choose one with "
                              "--logreg-name")
        return views

    # ----------------------------------------------------------- checkpoints
    def restore(self, resume: Resume) -> None:
        """Continue the saved run: its weights, momentum, counters and log rows."""
        where = resume.checkpoint
        counters = read_counters(where, resume.meta)
        arrays = read_state(where, self.net, self.plan)
        try:
            self.executor.load_state_arrays(arrays)
        except DataError as error:
            raise CheckpointError(f"{where}: does not fit this net "
                                  f"({self.opts.layer_def}): {error}") from None
        unused = unused_layers(resume.keys, self.net, self.plan)
        if unused:
            self.log.warn(f"{where} holds weights of layers this net does not have, ignored: "
                          f"{', '.join(unused)}")
        self.executor.step_count = counters.step
        self.epoch = counters.epoch
        self.batch_index = counters.batch_index
        self.log.cumulative_time = counters.cumulative_time
        self.log.resume_from(counters.log_rows)
        same_file = self.checkpoint is not None and \
            Path(where).resolve() == self.checkpoint.resolve()
        self._saved_step = counters.step if same_file else None
        self._saved_at = (counters.epoch, counters.batch_index) if same_file else None

    def save(self) -> Path | None:
        if not self.root:
            if self.opts.save_path is not None and not self.opts.test_only:
                self.executor.state_arrays()  # this rank's share, for the root's checkpoint
            return None
        if self.checkpoint is None:
            return None
        step = self.executor.step_count
        meta = {"options": options_for_checkpoint(self.opts),
                "counters": {"step": step, "epoch": self.epoch,
                             "batch_index": self.batch_index,
                             "cumulative_time": self.log.cumulative_time,
                             "log_rows": self.log.rows},
                # Every random draw (weights, dropout masks, augmentation) is a pure
                # function of these, so they are the whole random-number state.
                "rng": {"seed": self.opts.seed, "dropout_step": step,
                        "data_epoch": self.epoch}}
        save_checkpoint(self.checkpoint, self.executor.state_arrays(), meta)
        self._saved_step = step
        self._saved_at = (self.epoch, self.batch_index)
        return self.checkpoint

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
            self.log.note(f"nothing to train: the checkpoint has trained "
                          f"{done_before / len(batches):g} of {opts.epochs} epoch(s); give "
                          "--epochs N to train further")
            return 0
        batch_cases = self.provider.num_cases(batches[0])
        if self.announce:
            self._announce(batch_cases)
        self._per_batch = len(minibatch_bounds(batch_cases, opts.mini, self.plan.num_shards))
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
            raise
        self._finish()
        self.log.close()
        if not self.announce:
            return 0
        for line in closing_summary(self.log.cumulative_time, (self.log.tests or [None])[-1],
                                    self.log.best_test, self._files_written(), self.save_dir,
                                    opts.epochs, launch.process_count()):
            self.log.note(line)
        return 0

    def _train_epochs(self, batches: list[int], total_batches: int, test_freq: int, bar) -> None:
        while self.epoch <= self.opts.epochs:
            todo = batches[self.batch_index:]
            with BatchPrefetcher(self.provider, todo, train=True, epoch=self.epoch) as loader:
                for batch_id, batch in loader:
                    done = (self.epoch - 1) * len(batches) + self.batch_index
                    progress = done / total_batches
                    self._guarded(self._train_batch, batch, progress, bar, batch_id=batch_id)
                    self.batch_index += 1
                    if (done + 1) % test_freq == 0 or self.batch_index == len(batches):
                        self._guarded(self._settle, batch_id=batch_id)
                        test_result = self._guarded(self.test, batch_id=batch_id)
                        self.log.record(self.epoch, batch_id, test_result,
                                        self._learning_rate(progress), write=bar.write)
                        self._maybe_save(test_result.error, write=bar.write)
                    if interrupt_requested():
                        raise StopAtBatchEnd()
            if self.batch_index >= len(batches):
                self.epoch += 1
                self.batch_index = 0

    def _announce(self, batch_cases: int) -> None:
        """The banner, and warnings about what the run will really do."""
        backend = choose_backend(self.opts.backend)
        files = [CHECKPOINT_NAME, CSV_NAME] + ([LOG_PNG] if has_matplotlib() else [])
        for line in start_banner(self.opts.layer_def, self.plan, backend, self.provider,
                                 batch_cases, self.opts.epochs, self.save_dir, files):
            self.log.note(line)
        if self.opts.resume is not None:
            self.log.note(f"resuming {shown_path(self.opts.resume.checkpoint)} at "
                          f"{self._where(self.epoch, self.batch_index)}")
        warning = oversubscription_warning(backend, self.plan.num_devices)
        if warning:
            self.log.warn(warning)
        if self.opts.mini > batch_cases:
            more = (" or more cases per batch (--dummy-cases)"
                    if self.provider.name == "dummy" else "")
            self.log.warn(f"--mini {self.opts.mini} is larger than a data batch "
                          f"({batch_cases} cases): a minibatch never spans two batches, so "
                          f"each step trains on {batch_cases} cases; give --mini "
                          f"{batch_cases} or less{more}")
        if self.save_dir is not None and not has_matplotlib():
            self.log.note(f"(no {LOG_PNG}: drawing it needs matplotlib; {PLOT_INSTALL})")

    def _where(self, epoch: int, batch_index: int) -> str:
        return where_text(epoch, batch_index, len(self.provider.train_batches))

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
        if self._saved_at is None:
            earlier = (f"; {shown_path(self.checkpoint)} is an earlier run's"
                       if self.checkpoint.exists() else "")
            self.log.status(f"interrupted before this run's first checkpoint{earlier}")
            return
        what = "saved" if saved_now else "last saved:"
        resume = resume_command(self.save_dir, processes=launch.process_count())
        self.log.status(f"{what} {shown_path(self.checkpoint)} ({self._where(*self._saved_at)});"
                        f" to resume: {resume}")

    def _files_written(self) -> list[Path]:
        """The checkpoint (if saved), the log and its picture (drawn here)."""
        files = [self.checkpoint] if self._saved_at is not None else []
        csv_path = self.log.csv_path
        if csv_path is None or not csv_path.exists():
            return files
        files.append(csv_path)
        if has_matplotlib():
            title = f"{Path(self.opts.layer_def).name}: {shown_path(csv_path)}"
            files.append(write_log_png(read_log(csv_path), csv_path.with_name(LOG_PNG), title))
        return files

    def _guarded(self, fn, *args, batch_id: int):
        """Run ``fn``, turning a NaN/inf error into one naming where training stood."""
        try:
            return fn(*args)
        except TrainingError as error:
            where = f"epoch {self.epoch}, batch {batch_id}"
            if isinstance(error, NonFiniteDataError):  # the data itself, not the training
                text = f"bad data in {where}: {error}"
            else:
                text = (f"training diverged in {where}: {error}; lower the learning rates "
                        f"(epsW, epsB) in {self.opts.layer_params}")
            if self._saved_step is not None:
                text += f"; the last good checkpoint is {shown_path(self.checkpoint)}"
            raise TrainingError(text) from None

    def _train_batch(self, batch: list[np.ndarray], progress: float, bar):
        totals = {"cost": 0.0, "error": 0.0, "cases": 0, "seconds": 0.0}
        parts = list(self._minibatches(batch))
        if len(parts) != self._per_batch:  # a batch of another size: correct the bar's total
            bar.total += len(parts) - self._per_batch
        for part in parts:
            raise_if_stopped()
            result = self.executor.step(part, progress)
            self._add_step(totals, result)
            if self.opts.profile:
                self.log.add_profile(self.executor.timings)
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
            if ldef.has_weights:
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

    # --------------------------------------------------------------- testing
    def test(self) -> TestResult:
        if not self.provider.test_batches:
            raise DataError("the test range selects no batch")
        cost = error = 0.0
        cases = 0
        views = self.test_views > 1
        with BatchPrefetcher(self.provider, self.provider.test_batches, train=False,
                             views=views) as loader:
            for _, batch in loader:
                raise_if_stopped()
                batch_cost, batch_error, n = (self._test_views(batch) if views
                                              else self._test_batch(batch))
                cost += batch_cost
                error += batch_error
                cases += n
        return TestResult(cost / max(cases, 1), error / max(cases, 1), cases)

    def _test_batch(self, batch):
        cost = error = 0.0
        for part in self._minibatches(batch):
            result = self.executor.evaluate(part)
            costs = result.costs.get(self.cost_layer, {})
            cost += costs.get("cost", 0.0) * result.num_cases
            error += costs.get("error", 0.0) * result.num_cases
        return cost, error, len(batch[0])

    def _test_views(self, batch):
        """Average the softmax over the views, then score (multiview testing)."""
        views, labels = batch
        probs_layer = self.net[self.cost_layer].inputs[1]
        total = 0
        for v in range(views.shape[0]):
            total = total + self._features([views[v], labels], probs_layer)
        probs = total / views.shape[0]
        truth = labels.reshape(-1).astype(np.int64)
        picked = np.maximum(probs[np.arange(len(truth)), truth], 1e-30)
        cost = float(-np.log(picked).sum())
        error = float((probs.argmax(axis=1) != truth).sum())
        return cost, error, len(truth)

    def _features(self, batch, layer: str) -> np.ndarray:
        parts = [self.executor.features(part, layer) for part in self._minibatches(batch)]
        return np.concatenate(parts).reshape(len(batch[0]), -1)

    def _minibatches(self, batch):
        """Cut a batch into --mini sized minibatches; a tail too short to be cut into
        one case per shard joins the minibatch before it (cut as evenly as possible)."""
        for start, stop in minibatch_bounds(len(batch[0]), self.opts.mini,
                                            self.plan.num_shards):
            yield [column[start:stop] for column in batch]

    def _check_feature_layer(self) -> None:
        layer = self.opts.write_features
        if layer is None:
            return
        if layer not in self.net.layers:
            close = difflib.get_close_matches(layer, list(self.net.layers), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"--write-features names '{layer}', which is not a layer of "
                              f"the net{hint}", file=self.net.layer_def_file)
        placement = self.plan.layers.get(layer)
        if placement is None or not placement.devices:
            raise ConfigError(f"--write-features: layer '{layer}' is not computed (nothing "
                              f"reads it)", file=self.net.layer_def_file)
        if self.root:  # now, not after the training: a folder that cannot be made fails early
            try:
                self._feature_folder().mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise DataError(f"cannot create feature folder {self._feature_folder()}: "
                                f"{error.strerror}") from None

    def _feature_folder(self) -> Path:
        base = Path(self.opts.save_path) if self.opts.save_path else Path(".")
        return Path(self.opts.feature_path or base / f"features-{self.opts.write_features}")

    def write_features(self) -> None:
        """FEATURE_PATH/data_batch_N.npz for every test batch N: ``data`` (cases x
        features, float32, the layer's test-mode output) and ``labels``."""
        layer = self.opts.write_features
        folder = self._feature_folder()
        if not self.opts.save_path and not self.opts.feature_path:
            self.log.note(f"features of '{layer}' go to {folder.resolve()} (no --feature-path "
                          "or --save-path given: the current folder)")
        for batch_id in self.provider.test_batches:
            batch = self.provider.get_batch(batch_id, train=False, epoch=0)
            feats = self._features(batch, layer)
            target = folder / f"data_batch_{batch_id}.npz"
            if not self.root:
                continue
            try:
                np.savez(target, data=feats, labels=batch[1].reshape(-1))
            except OSError as error:
                raise DataError(f"cannot write features to {target}: {error.strerror}") from None
            self.log.note(f"wrote {feats.shape[0]} x {feats.shape[1]} features of '{layer}' "
                          f"to {shown_path(target)}")

