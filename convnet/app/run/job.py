"""A training job from its options to its end: the checks that come before any work,
the parts put together, the trainer run, everything closed.

Errors are reported before work is wasted: the save path is checked (see
:mod:`convnet.app.run.folder`) and the config parsed before any data is
loaded, and the plan's memory is checked against the machine's before the
executor allocates it.  The save folder is made and claimed only once the data,
net, executor and any checkpoint resumed are ready, so a run that cannot start
leaves no folder behind.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from convnet.app import launch
from convnet.app.options import RunOptions
from convnet.app.run.assembly import build_net_and_plan, make_data_provider, make_executor
from convnet.app.run.features import write_features
from convnet.app.run.folder import check_run_folder, claim_run_folder
from convnet.app.run.training import Trainer
from convnet.config import parse_net


def run(opts: RunOptions) -> int:
    """Train (or with --test-only, evaluate) as the options say; returns the exit code."""
    execute(opts)
    return 0


def execute(opts: RunOptions) -> Trainer:
    """Train (or with --test-only, evaluate) as the options say; the trainer, its
    devices closed, whose log holds every test (the Python API's result)."""
    # Only the root of a training run writes; the other ranks have no save folder.
    saving = opts.save_path is not None and not opts.test_only and launch.is_root()
    save_dir = Path(opts.save_path) if saving else None
    loaded = opts.resume.checkpoint if opts.resume is not None else None
    if save_dir is not None:
        check_run_folder(save_dir, loaded, opts.overwrite)  # before loading any data
    parse_net(opts.layer_def, opts.layer_params)  # config errors before loading any data
    provider = make_data_provider(opts)
    net, plan = build_net_and_plan(opts, provider)
    executor = make_executor(opts, net, plan, provider)
    trainer = None
    try:
        trainer = Trainer(opts, provider, net, plan, executor, save_dir, root=launch.is_root())
        if opts.resume is not None:
            trainer.restore(opts.resume)
        elif opts.init_from is not None:
            trainer.start_from(opts.init_from)
        # The run can start: only now is its folder made (and held until it ends).
        with (claim_run_folder(save_dir, loaded, opts.overwrite) if save_dir is not None
              else nullcontext()):
            if opts.test_only:
                result = trainer.test()
                trainer.log.print_test_only(result, trainer.test_views)
            else:
                trainer.train()
            if opts.write_features:
                write_features(opts, provider, trainer.features, trainer.log, trainer.root)
        return trainer
    finally:
        if trainer is not None:
            trainer.events.close()
        executor.close()
        provider.close()
