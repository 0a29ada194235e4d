"""What the command line does once its options are parsed.

Resolves the options (the bundled example when no net is given; saved
options under command-line ones when resuming), builds the net, and hands
over to printing the plan, checking gradients, testing or training.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from convnet.cli import DEFAULT_LAYER_DEF, DEFAULT_LAYER_PARAMS
from convnet.errors import ConfigError

#: Options a checkpoint remembers; on resume a command-line value wins.
RESUMABLE = ("layer_def", "layer_params", "gpu", "mini", "seed", "data_provider", "data_path",
             "data_dims", "num_classes", "train_range", "test_range", "inner_size",
             "color_noise", "scalar_mean", "epochs", "test_freq", "save_path", "logreg_name",
             "backend")


def run_command(args: argparse.Namespace) -> int:
    from convnet import training

    if getattr(args, "compare", None) is not None or len(
            getattr(args, "layer_params_list", None) or ()) > 1:
        from convnet.compare import run_compare  # several configs side by side

        return run_compare(args)
    opts = resolve_options(args)
    if opts.print_plan or getattr(opts, "plan_graph", None) is not None:
        net, plan = training.build_net_and_plan(opts)
        from convnet.plan_report import plan_json, plan_text

        print(plan_json(plan, net) if opts.print_plan == "json" else plan_text(plan, net))
        if getattr(opts, "plan_graph", None) is not None:
            from convnet.plan_graph import write_plan_graph

            write_plan_graph(plan, net, opts.plan_graph)
        return 0
    if opts.check_grads:
        from convnet.gradcheck import check_net_gradients

        net = training.load_net_for(opts)
        return 0 if check_net_gradients(net, report=print) else 1
    return training.run(opts)


def resolve_options(args: argparse.Namespace) -> argparse.Namespace:
    """Fill in defaults: the bundled example, then checkpoint values, then built-ins."""
    opts = argparse.Namespace(**vars(args))
    opts.saved_state = None
    if opts.load_file is not None:
        from convnet.checkpoint import load_checkpoint

        arrays, meta = load_checkpoint(opts.load_file)
        saved = meta.get("options", {})
        for key in RESUMABLE:
            if getattr(opts, key) is None and saved.get(key) is not None:
                value = saved[key]
                if key == "gpu":
                    value = tuple(value)
                elif key in ("layer_def", "layer_params", "data_path", "save_path"):
                    value = Path(value)
                setattr(opts, key, value)
        opts.saved_state = (arrays, meta)
    bundled = opts.layer_def is None
    if bundled:
        opts.layer_def = DEFAULT_LAYER_DEF
        opts.layer_params = opts.layer_params or DEFAULT_LAYER_PARAMS
    elif opts.layer_params is None:
        raise ConfigError("--layer-def needs --layer-params (the learning-rate file)",
                          file=str(opts.layer_def))
    if opts.gpu is None:
        opts.gpu = (0, 1) if bundled else (0,)
    if opts.data_provider is None:
        opts.data_provider = "digits" if bundled or not opts.data_dims else "dummy"
    if opts.epochs is None:
        opts.epochs = 30 if bundled else 1
    opts.bundled = bundled
    return opts


def options_for_checkpoint(opts: argparse.Namespace) -> dict:
    """The resumable options as JSON-able values."""
    out = {}
    for key in RESUMABLE:
        value = getattr(opts, key)
        if isinstance(value, Path):
            value = str(value.resolve())
        elif isinstance(value, tuple):
            value = list(value)
        out[key] = value
    json.dumps(out)  # fail here, not at save time, if something is not serialisable
    return out
