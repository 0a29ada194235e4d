"""``--compare``: train several configs of one network and compare the schemes side by side.

``python convnet.py --compare A.cfg B.cfg ... --layer-params P.cfg [...]`` trains
every layer-def file on the same data, seed, minibatch and ``--gpu`` list with
the ordinary training machinery (:mod:`convnet.app.run.training`), one after the
other, then prints one table (:mod:`convnet.app.comparison.table`) and, with
``--save-path``, draws one picture (:mod:`convnet.app.comparison.plot`).

Here the comparison is run from start to end: every config is resolved
(:mod:`convnet.app.comparison.configs`) and planned before any is trained, so a
bad one fails fast; each is then trained and measured in turn
(:mod:`convnet.app.comparison.measure`) into its
:class:`~convnet.app.comparison.result.ConfigResult`, whose properties are the
figures shown, and where each comes from.

Without ``--save-path`` the runs' logs go to a temporary folder that is
deleted afterwards and no checkpoint is written; with it, run ``NAME`` keeps
its ``log.csv`` and ``checkpoint.npz`` in ``SAVE_PATH/NAME/`` and the table and
the picture are written to ``SAVE_PATH/compare.txt`` and ``SAVE_PATH/compare.png``
(atomically, never through a link; ones already there only with ``--overwrite``,
checked before any training, like the runs' sub-folders).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from convnet.app.comparison.configs import (PICTURE_NAME, TABLE_NAME, check_args,
                                            config_options, config_pairs, run_names)
from convnet.app.comparison.measure import (PROFILE_STEPS, first_minibatch, profile,
                                            train_config, trained_line)
from convnet.app.comparison.plot import write_comparison_png
from convnet.app.comparison.prediction import predict_steps
from convnet.app.comparison.result import ConfigResult, trained
from convnet.app.comparison.noise import DEFAULT_MIN_LEAD, paired_steps
from convnet.app.comparison.rounds import DEFAULT_ROUNDS, time_in_rounds
from convnet.app.comparison.table import comparison_table
from convnet.app.comparison.verdict import equivalence_warnings
from convnet.app.options import RunOptions
from convnet.app.run.assembly import (build_net_and_plan, devices_needed, load_net_for,
                                      make_data_provider)
from convnet.app.run.folder import check_checkpoint_slot
from convnet.app.run.log import CSV_NAME
from convnet.app.run.memory_fit import weight_sharing
from convnet.app.run.summary import oversubscription_warning
from convnet.config.values.typed import local_sgd_period
from convnet.errors import ConvnetError, TrainingError, UsageError
from convnet.optional import require_matplotlib
from convnet.outputs import refuse_existing, write_output
from convnet.plan.report import device_totals
from convnet.runtime.devices.backends import choose_backend
from convnet.runtime.step.tasks import local_periods



def compare(args: argparse.Namespace, out=print, provider=None,
            profile_steps: int = PROFILE_STEPS, predict: bool = True
            ) -> tuple[list[ConfigResult], Path | None]:
    """Train every config of ``args.compare``; the results and the picture's path (or None).

    ``args`` is the parsed command line (options other than --compare and
    --layer-params apply to every config alike).  ``provider`` replaces the
    data provider the options describe (for callers that need one the
    command line cannot make, e.g. dummy data with small batches); ``predict``
    False leaves out the simulator's prediction (its profile).
    """
    check_args(args)
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
    provider = provider or make_data_provider(options[0])
    if args.gpu is None:  # enough devices for the config that names the most
        count = max(devices_needed(load_net_for(o, provider)) for o in options)
        options = [replace(o, gpu=tuple(range(count))) for o in options]
    planned = [build_net_and_plan(o, provider) for o in options]

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
        for name in (PICTURE_NAME, TABLE_NAME):
            refuse_existing(save_root / name, args.overwrite, keep="give another --save-path")
    warnings = comparison_warnings(results, options[0], provider)
    for text in warnings:
        print(f"warning: {text}", file=sys.stderr)
    try:
        measure_all(results, options, planned, provider, bool(save_root), profile_steps,
                    args.rounds or DEFAULT_ROUNDS, out, verbose=bool(args.verbose))
        if predict:
            out("predicting each config's step with the simulator (docs/SIMULATE.md)")
            warnings += predict_steps(results, options, planned,
                                      first_minibatch(provider, options[0].mini))
        table = comparison_table(results, warnings, DEFAULT_MIN_LEAD if args.min_lead is None
                                 else args.min_lead)
        out("")
        out(table)
        picture = None
        if save_root is not None:
            picture = save_root / PICTURE_NAME
            write_comparison_png(trained(results), picture)
            _write_text(save_root / TABLE_NAME, table + "\n")
            out(f"\nwrote {save_root / TABLE_NAME} and {picture}")
        return results, picture
    finally:
        if scratch is not None:
            scratch.cleanup()


def measure_all(results: list[ConfigResult], options: list[RunOptions], planned, provider,
                keep_checkpoints: bool, profile_steps: int, rounds: int, out,
                verbose: bool = False) -> None:
    """Train every config in turn, then time them all in interleaved rounds, then
    profile each; the executors stay open from training to profile.  Each config is
    one line once trained (``verbose``: a line before, then its run's test lines).

    A config whose training fails (a :class:`TrainingError`: it diverged, or its data
    holds NaNs) gets its ``failure`` and is left out of the rounds and the profile, so
    the others are still compared; when every config fails, that is the error."""
    executors = []
    try:
        for i, (result, opts, (net, plan)) in enumerate(zip(results, options, planned)):
            head = (f"[{i + 1}/{len(results)}] {result.name}: {plan.scheme}, {plan.num_passes} "
                    f"pass(es) per minibatch of {opts.mini}, --gpu "
                    f"{','.join(map(str, opts.gpu))}")
            if verbose:  # the head, then the run's test lines
                out(f"== {head}")
            try:
                executors.append(train_config(result, opts, provider, net, plan,
                                              keep_checkpoints, test_lines=verbose))
            except TrainingError as error:
                result.failure = error.summary
                out(f"{head}: left out of the comparison: {error}")
                continue
            out(f"{head}: {trained_line(result, opts.epochs)}")
        done = trained(results)
        if not done:
            raise TrainingError(f"--compare: every config failed: {failures(results)}")
        batch = first_minibatch(provider, options[0].mini)
        out(f"timing {len(done)} config(s) in {rounds} interleaved rounds")
        samples = time_in_rounds(executors, batch, rounds)
        steps = paired_steps({r.name: seconds for r, seconds in zip(done, samples)})
        for result, executor, seconds in zip(done, executors, samples):
            result.round_seconds = seconds
            result.paired_step = steps[result.name]
            result.profile_cases = len(batch[0])
            if result.lockstep:
                profile(result, executor, batch, profile_steps)
    finally:
        for executor in executors:
            executor.close()


def comparison_warnings(results: list[ConfigResult], opts: RunOptions, provider) -> list[str]:
    """What would make the comparison mislead, known before any training."""
    warnings = equivalence_warnings(results)
    devices = max(len(r.plan.used_devices) for r in results)
    shared = oversubscription_warning(choose_backend(opts.backend), devices)
    if shared:
        warnings.append(shared)
    cases = provider.num_cases(provider.train_batches[0]) if provider.train_batches else 0
    if cases and opts.mini > cases:
        warnings.append(f"--mini {opts.mini} is larger than a data batch ({cases} cases): "
                        f"every step trains on {cases} cases")
    return warnings


def run_compare(args: argparse.Namespace) -> int:
    """The --compare command; returns the exit code: 0, or after the table an error
    naming the configs whose training failed (docs/COMPARE.md)."""
    results, _ = compare(args)
    failed = [r for r in results if r.failure]
    if failed:
        raise TrainingError(f"--compare: {len(failed)} of {len(results)} configs failed: "
                            f"{failures(failed)}")
    return 0


def failures(results: list[ConfigResult]) -> str:
    """The failed configs of ``results`` with why, for an error line."""
    return ", ".join(f"{r.name} ({r.failure})" for r in results if r.failure)


def _write_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_output(path, text.encode())
    except OSError as error:
        raise ConvnetError(f"cannot write {path}: {error.strerror}") from None
