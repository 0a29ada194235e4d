"""``--compare``: train several configs of one network and compare the schemes side by side.

``python convnet.py --compare A.cfg B.cfg ... --layer-params P.cfg [...]`` trains
every layer-def file on the same data, seed, minibatch and ``--gpu`` list with
the ordinary training machinery (:mod:`convnet.app.run.training`), one after the
other, then prints one table (:mod:`convnet.app.comparison.table`) and, with
``--save-path``, draws one picture (:mod:`convnet.app.comparison.plot`).

Where each figure comes from:

* scheme, passes, parameter memory, activation memory (an estimate), bytes
  copied and all-reduced per minibatch: the planner
  (:func:`convnet.plan.report.device_totals` on the run's own plan);
* final train/test cost and error, wall time and training images/s: the run's
  CSV log (:data:`convnet.app.run.log.CSV_COLUMNS`), read back from disk;
* the time split per device (compute / copy / all-reduce / idle) and the
  per-device timeline: :data:`PROFILE_STEPS` training steps on the first
  minibatch of the first training batch, run after training with the
  executor's op timings switched on (after one warm-up step).  A data-parallel
  ``--sync async:S`` run has no lockstep step to time: it gets no time split
  and no timeline (the table says ``n/a``, the picture says why), and its
  traffic is measured instead: the shards each replica trained, each of whose
  increments went to the other replicas.

``--layer-params`` is given once (shared by all configs) or once per config,
in the same order.  Without ``--save-path`` the runs' logs go to a temporary
folder that is deleted afterwards and no checkpoint is written; with it, run
``NAME`` keeps its ``log.csv`` and ``checkpoint.npz`` in ``SAVE_PATH/NAME/``
and the table and the picture are written to ``SAVE_PATH/compare.txt`` and
``SAVE_PATH/compare.png``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from convnet.app.run import assembly, training
from convnet.app.comparison.plot import write_comparison_png
from convnet.app.comparison.table import comparison_table
from convnet.app.comparison.verdict import equivalence_warnings
from convnet.app.run.memory_fit import weight_sharing
from convnet.app.options import RunOptions, resolve_options
from convnet.app.option_values import async_staleness
from convnet.app.run.folder import check_checkpoint_slot, claim_run_folder
from convnet.app.run.log import CSV_NAME, read_log
from convnet.app.run.summary import oversubscription_warning
from convnet.config.values.typed import local_sgd_period
from convnet.errors import ConvnetError, UsageError
from convnet.optional import require_matplotlib
from convnet.plan.ops import AllReduce, Copy, GradCopy, Plan
from convnet.plan.report import DeviceTotals, device_totals
from convnet.plan.time_split import CATEGORIES, CATEGORY, DeviceTime
from convnet.runtime.sync.async_replicas import async_replica_devices
from convnet.runtime.devices.backends import choose_backend
from convnet.runtime.step.tasks import local_periods

#: Profiled training steps after training (after one warm-up step).
PROFILE_STEPS = 10


#: Options that make no sense with --compare, and why.
_NOT_WITH_COMPARE = (
    ("layer_def", "--layer-def (the configs are the files given to --compare)"),
    ("load_file", "--load-file (every config is trained from scratch)"),
    ("test_only", "--test-only"),
    ("print_plan", "--print-plan (run --print-plan on each config instead)"),
    ("plan_graph", "--plan-graph (draw each config's graph with --print-plan)"),
    ("check_grads", "--check-grads"),
    ("write_features", "--write-features"),
)


@dataclass
class ConfigResult:
    """Everything the table and the picture show about one config's run."""

    name: str
    layer_def: Path
    layer_params: Path
    plan: Plan
    totals: list[DeviceTotals]
    log_path: Path
    sync: str = "sync"  # the run's --sync mode
    # layer -> K of the replicated layers under local SGD (--sync local:K or their sync= key)
    local_periods: dict[str, int] = field(default_factory=dict)
    log_rows: list[dict] = field(default_factory=list)
    profile_cases: int = 0
    step_seconds: list[float] = field(default_factory=list)
    times: list[DeviceTime] = field(default_factory=list)
    timeline: list = field(default_factory=list)  # OpTiming of one step (the median one)
    timeline_seconds: float = 0.0
    # An async run's measured traffic: shards each replica trained, over this many steps.
    replica_shards: list[int] = field(default_factory=list)
    trained_steps: int = 0

    # ------------------------------------------------------------- planner
    @property
    def lockstep(self) -> bool:
        """Whether the run trains in lockstep steps, so that a step can be profiled per
        operation: all but a data-parallel net under --sync async (a hybrid net keeps its
        lockstep steps; only its replicated layers' increments move apart)."""
        return async_staleness(self.sync) is None or async_replica_devices(self.plan) is None

    @property
    def scheme(self) -> str:
        return self.plan.scheme

    @property
    def num_passes(self) -> int:
        return self.plan.num_passes

    @property
    def devices_used(self) -> int:
        return len({d for p in self.plan.layers.values() for d in p.devices})

    @property
    def copy_bytes(self) -> int:
        """Bytes of activation and gradient copies between devices per minibatch."""
        return sum(op.nbytes for op in self.plan.ops if isinstance(op, (Copy, GradCopy)))

    @property
    def is_async(self) -> bool:
        return async_staleness(self.sync) is not None

    @property
    def allreduce_bytes(self) -> int:
        """Bytes each device sends in ring all-reduces, summed over devices, per minibatch
        (the planner's figure: 2(R-1)/R of the gradient per device); for a layer under
        ``local:K`` the weight average every K-th step moves as much, so 1/K of it per
        minibatch; under ``async`` none (its replicas send increments:
        :attr:`increment_bytes`)."""
        if self.is_async:
            return 0
        total = 0
        for op in self.plan.ops:
            if isinstance(op, AllReduce):
                r = len(op.replica_devices)
                total += r * (2 * (r - 1) * op.nbytes // r) // self.local_periods.get(op.layer, 1)
        return total

    @property
    def weight_bytes(self) -> int:
        """Bytes of one replica's replicated weights (float32): the size of one increment
        an async replica sends after each shard."""
        return sum(op.nbytes for op in self.plan.ops if isinstance(op, AllReduce))

    @property
    def increment_sends(self) -> list[tuple[float, float]]:
        """An async run's (sent, received) increment bytes per minibatch of every device.
        A data-parallel net's replica sends the increment of each shard it trains to each
        other replica (measured: the shards each replica trained); in a lockstep (hybrid)
        net every replica of a replicated layer sends each of its updates to the others
        (the plan's updates)."""
        traffic = [[0.0, 0.0] for _ in range(self.plan.num_devices)]
        replicas = async_replica_devices(self.plan)
        if replicas is not None:
            count, total = len(replicas), sum(self.replica_shards)
            steps = max(self.trained_steps, 1)
            for device, shards in zip(replicas, self.replica_shards):
                traffic[device] = [shards * (count - 1) * self.weight_bytes / steps,
                                   (total - shards) * self.weight_bytes / steps]
        else:
            for op in self.plan.ops:
                if isinstance(op, AllReduce):
                    for device in op.replica_devices:
                        traffic[device][0] += (len(op.replica_devices) - 1) * op.nbytes
                        traffic[device][1] += (len(op.replica_devices) - 1) * op.nbytes
        return [tuple(t) for t in traffic]

    @property
    def increment_bytes(self) -> float:
        """All increment bytes an async run's replicas sent per minibatch."""
        return sum(sent for sent, _ in self.increment_sends)

    @property
    def device_traffic(self) -> list[tuple[float, float]]:
        """(sent, received) bytes per minibatch of every device: the planner's, or under
        async the plan's copies plus the increments instead of the all-reduces."""
        if not self.is_async:
            return [(t.sent_bytes, t.received_bytes) for t in self.totals]
        traffic = [list(t) for t in self.increment_sends]
        for op in self.plan.ops:
            if isinstance(op, (Copy, GradCopy)):
                traffic[op.src][0] += op.nbytes
                traffic[op.dst][1] += op.nbytes
        return [tuple(t) for t in traffic]

    @property
    def moved_bytes(self) -> int:
        """All bytes sent between devices per minibatch (= sum of the planner's sent_bytes)."""
        return sum(t.sent_bytes for t in self.totals)

    # ----------------------------------------------------------------- log
    @property
    def final(self) -> dict:
        """The last row of the run's CSV log (numbers as floats)."""
        return self.log_rows[-1]

    @property
    def train_images_per_sec(self) -> float:
        """The median over the log's test intervals of inputs_per_sec (training cases per
        second of training-step time; the median leaves out a slow first interval)."""
        return statistics.median(row["inputs_per_sec"] for row in self.log_rows)

    @property
    def wall_seconds(self) -> float:
        return self.final["cumulative_time"]

    # ------------------------------------------------------------- profile
    @property
    def mean_step_seconds(self) -> float:
        return statistics.fmean(self.step_seconds) if self.step_seconds else math.nan

    @property
    def profiled_images_per_sec(self) -> float:
        step = self.mean_step_seconds
        return self.profile_cases / step if step and math.isfinite(step) else 0.0


# ============================================================== options per config
def config_pairs(args: argparse.Namespace) -> list[tuple[Path, Path]]:
    """(layer-def, layer-params) of every config: params shared or paired in order."""
    configs = list(args.compare or [])
    params = list(args.layer_params_list or [])
    if not configs:
        raise UsageError(f"--layer-params was given {len(params)} times; only --compare "
                         f"takes one per config (--compare A.cfg B.cfg --layer-params "
                         f"PA.cfg PB.cfg)")
    if not params:
        raise UsageError("--compare needs --layer-params: one file shared by all configs, "
                         "or one per config in the same order")
    if len(params) == 1:
        params = params * len(configs)
    elif len(params) != len(configs):
        raise UsageError(f"--compare got {len(configs)} configs and {len(params)} "
                         f"--layer-params files; give one shared file or one per config")
    return list(zip(configs, params))


def run_names(configs: list[Path], modes: list[str] | None = None) -> list[str]:
    """A short unique name per run: the config's file name without .cfg (and #2, #3 on
    repeats), with the ``--sync`` mode after it (``-local4``) when several are compared;
    in the order of :func:`config_options`."""
    names, seen = [], {}
    for path in configs:
        stem = Path(path).stem
        seen[stem] = seen.get(stem, 0) + 1
        names.append(stem if seen[stem] == 1 else f"{stem}#{seen[stem]}")
    if modes is None or len(modes) < 2:
        return names
    return [f"{name}-{mode.replace(':', '')}" for name in names for mode in modes]


def _check_args(args: argparse.Namespace) -> None:
    for key, text in _NOT_WITH_COMPARE:
        if getattr(args, key):
            raise UsageError(f"--compare cannot be combined with {text}")


def config_options(args: argparse.Namespace,
                   pairs: list[tuple[Path, Path]]) -> list[RunOptions]:
    """The options of every config: the command line's, with the config's own files.

    With no ``--gpu`` every config gets device 0 here; :func:`compare` widens the
    list afterwards to fit the config that names the most devices.  With several
    ``--sync`` modes every config comes once per mode, the modes in the order given.
    """
    modes = args.sync or [None]
    first = resolve_options(argparse.Namespace(**{**vars(args), "sync": modes[:1]}), pairs[0])
    return [replace(first, layer_def=Path(layer_def), layer_params=Path(layer_params),
                    sync=mode or first.sync)
            for layer_def, layer_params in pairs for mode in modes]


# ===================================================================== running
def compare(args: argparse.Namespace, out=print, provider=None,
            profile_steps: int = PROFILE_STEPS) -> tuple[list[ConfigResult], Path | None]:
    """Train every config of ``args.compare``; the results and the picture's path (or None).

    ``args`` is the parsed command line (options other than --compare and
    --layer-params apply to every config alike).  ``provider`` replaces the
    data provider the options describe (for callers that need one the
    command line cannot make, e.g. dummy data with small batches).
    """
    _check_args(args)
    pairs = config_pairs(args)
    if args.save_path:
        require_matplotlib("--compare with --save-path (compare.png)")
    names = run_names([p[0] for p in pairs], args.sync)
    for layer_def, layer_params in pairs:
        for path in (layer_def, layer_params):
            if not Path(path).is_file():
                raise UsageError(f"--compare: no such file {path}")

    # Resolve and plan every config before training any, so a bad one fails fast.
    options = config_options(args, pairs)
    if args.test_freq is None:  # a point per data batch in the picture, not one per epoch
        options = [replace(o, test_freq=1) for o in options]
    provider = provider or assembly.make_data_provider(options[0])
    if args.gpu is None:  # enough devices for the config that names the most
        count = max(assembly.devices_needed(assembly.load_net_for(o, provider)) for o in options)
        options = [replace(o, gpu=tuple(range(count))) for o in options]
    planned = [assembly.build_net_and_plan(o, provider) for o in options]

    save_root = Path(args.save_path) if args.save_path else None
    scratch = None if save_root else tempfile.TemporaryDirectory(prefix="convnet-compare-")
    root = save_root or Path(scratch.name)
    options = [replace(o, save_path=root / name) for name, o in zip(names, options)]
    results = [ConfigResult(name=name, layer_def=o.layer_def, layer_params=o.layer_params,
                            plan=plan, totals=device_totals(plan, net, weight_sharing(
                                plan, net, choose_backend(o.backend), o.sync, processes=1)),
                            log_path=o.save_path / CSV_NAME, sync=o.sync,
                            local_periods=local_periods(plan, net, local_sgd_period(o.sync)))
               for name, o, (net, plan) in zip(names, options, planned)]
    if save_root is not None:  # before any training: no run may fail at its own turn
        for o in options:
            check_checkpoint_slot(o.save_path, None, o.overwrite, resumable=False)
    warnings = comparison_warnings(results, options[0], provider)
    for text in warnings:
        print(f"warning: {text}", file=sys.stderr)
    try:
        for i, (result, opts, (net, plan)) in enumerate(zip(results, options, planned)):
            out(f"== [{i + 1}/{len(results)}] {result.name}: {plan.scheme}, {plan.num_passes} "
                f"pass(es) per minibatch of {opts.mini}, --gpu {','.join(map(str, opts.gpu))}")
            _train_and_profile(result, opts, provider, net, plan, keep_checkpoints=bool(save_root),
                               profile_steps=profile_steps)
        table = comparison_table(results, warnings)
        out("")
        out(table)
        picture = None
        if save_root is not None:
            picture = save_root / "compare.png"
            write_comparison_png(results, picture)
            _write_text(save_root / "compare.txt", table + "\n")
            out(f"\nwrote {save_root / 'compare.txt'} and {picture}")
        return results, picture
    finally:
        if scratch is not None:
            scratch.cleanup()


def comparison_warnings(results: list[ConfigResult], opts: RunOptions, provider) -> list[str]:
    """What would make the comparison mislead, known before any training."""
    warnings = equivalence_warnings(results)
    devices = max(r.plan.num_devices for r in results)
    shared = oversubscription_warning(choose_backend(opts.backend), devices)
    if shared:
        warnings.append(shared)
    cases = provider.num_cases(provider.train_batches[0]) if provider.train_batches else 0
    if cases and opts.mini > cases:
        warnings.append(f"--mini {opts.mini} is larger than a data batch ({cases} cases): "
                        f"every step trains on {cases} cases")
    return warnings


def run_compare(args: argparse.Namespace) -> int:
    """The --compare command; returns the exit code."""
    compare(args)
    return 0


def _write_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        raise ConvnetError(f"cannot write {path}: {error.strerror}") from None


def _train_and_profile(result: ConfigResult, opts: RunOptions, provider, net, plan,
                       keep_checkpoints: bool, profile_steps: int) -> None:
    with claim_run_folder(result.log_path.parent, overwrite=opts.overwrite) as folder:
        executor = assembly.make_executor(opts, net, plan)
        try:
            trainer = training.Trainer(opts, provider, net, plan, executor, folder,
                                       announce=False)
            if not keep_checkpoints:
                trainer.checkpoint = None  # the log goes to the scratch folder; no checkpoints
            trainer.train()
            result.log_rows = read_log(result.log_path)
            if not result.log_rows:
                raise ConvnetError(f"{result.name}: the run logged no test line to "
                                   f"{result.log_path}")
            if result.lockstep:
                profile(result, executor, provider, opts.mini, profile_steps)
            else:  # no lockstep step to time: what the replicas trained instead
                result.replica_shards = list(executor.record.shards)
                result.trained_steps = executor.step_count
        finally:
            executor.close()


def profile(result: ConfigResult, executor, provider, mini: int,
            steps: int = PROFILE_STEPS) -> None:
    """Time ``steps`` training steps (after one warm-up) on the first training minibatch."""
    batch = provider.get_batch(provider.train_batches[0], train=True, epoch=1)
    part = [column[:mini] for column in batch]
    result.profile_cases = len(part[0])
    runs = executor.timed_steps(part, steps)
    result.step_seconds = [seconds for seconds, _ in runs]
    num_devices = result.plan.num_devices
    sums = [DeviceTime(d) for d in range(num_devices)]
    for seconds, timings in runs:
        busy = [dict.fromkeys(CATEGORIES, 0.0) for _ in range(num_devices)]
        for t in timings:
            busy[t.device][CATEGORY[t.kind]] += t.end - t.start
        for d, parts in enumerate(busy):
            sums[d].compute += parts["compute"]
            sums[d].copy += parts["copy"]
            sums[d].allreduce += parts["allreduce"]
            sums[d].idle += max(seconds - parts["compute"] - parts["copy"] - parts["allreduce"],
                                0.0)
    n = len(runs)
    result.times = [DeviceTime(s.device, s.compute / n, s.copy / n, s.allreduce / n, s.idle / n)
                    for s in sums]
    median = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    result.timeline_seconds, result.timeline = median

