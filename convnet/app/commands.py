"""What the command line does once its options are parsed.

Resolves the options (checkpoint values under command-line ones when
resuming, then the bundled example and built-in defaults), checks that they
go together, and hands over to printing the plan, checking gradients,
testing or training.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

from convnet.app.cli import (DEFAULT_LAYER_DEF, DEFAULT_LAYER_PARAMS, UsageError, _batch_range,
                         _color_noise, _data_dims, _gpu_list, _non_negative, _positive,
                         _provider, _scalar_mean)
from convnet.errors import CheckpointError, ConvnetError

#: The checkpoint file inside a save path.
CHECKPOINT_NAME = "checkpoint.npz"

#: Options a checkpoint remembers; on resume a command-line value wins.
RESUMABLE = ("layer_def", "layer_params", "gpu", "mini", "seed", "data_provider", "data_path",
             "data_dims", "num_classes", "train_range", "test_range", "inner_size",
             "color_noise", "scalar_mean", "epochs", "test_freq", "save_path", "logreg_name",
             "backend")

#: Built-in values of resumable options (the parser leaves them None so that a
#: saved value can show through).  epochs, gpu and data_provider depend on
#: other options and are filled in by :func:`resolve_options`.
DEFAULTS = {"mini": 128, "seed": 0, "backend": "auto", "inner_size": 0, "color_noise": 0.0}


def _as_text(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(value)
    return str(value)


def _saved_gpu(value) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(value)
    return _gpu_list(",".join(_as_text(v) for v in value))


def _saved_name(value) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(value)
    return value


def _saved_backend(value) -> str:
    if value not in ("auto", "cpu", "cuda"):
        raise ValueError(value)
    return value


#: How a saved option's JSON value becomes an option value again (and is checked).
_SAVED = {
    "layer_def": lambda v: Path(_saved_name(v)), "layer_params": lambda v: Path(_saved_name(v)),
    "data_path": lambda v: Path(_saved_name(v)), "save_path": lambda v: Path(_saved_name(v)),
    "gpu": _saved_gpu, "mini": lambda v: _positive(_as_text(v)),
    "seed": lambda v: _non_negative(_as_text(v)), "data_provider": lambda v: _provider(v),
    "data_dims": lambda v: _data_dims(_saved_name(v)),
    "num_classes": lambda v: _positive(_as_text(v)),
    "train_range": lambda v: _batch_range(_saved_name(v)),
    "test_range": lambda v: _batch_range(_saved_name(v)),
    "inner_size": lambda v: _non_negative(_as_text(v)),
    "color_noise": lambda v: _color_noise(_as_text(v)),
    "scalar_mean": lambda v: _scalar_mean(_as_text(v)),
    "epochs": lambda v: _positive(_as_text(v)), "test_freq": lambda v: _positive(_as_text(v)),
    "logreg_name": _saved_name, "backend": _saved_backend,
}


def run_command(args: argparse.Namespace) -> int:
    from convnet.app import training

    # Overflow and NaN are caught by the executor's own checks, which name the layer;
    # numpy's warnings about them would only add lines of noise before that error.
    warnings.filterwarnings("ignore", category=RuntimeWarning,
                            message=r"(overflow|invalid value|divide by zero) encountered")

    if getattr(args, "compare", None) is not None or len(
            getattr(args, "layer_params_list", None) or ()) > 1:
        from convnet.app.compare import run_compare  # several configs side by side

        return run_compare(args)
    opts = resolve_options(args)
    if opts.print_plan or getattr(opts, "plan_graph", None) is not None:
        net, plan = training.build_net_and_plan(opts)
        from convnet.plan.report import plan_json, plan_text

        print(plan_json(plan, net) if opts.print_plan == "json" else plan_text(plan, net))
        if getattr(opts, "plan_graph", None) is not None:
            from convnet.plan.graph import write_plan_graph

            write_plan_graph(plan, net, opts.plan_graph)
        return 0
    if opts.check_grads:
        try:
            from convnet.runtime.gradcheck import check_net_gradients
        except ImportError as error:
            raise ConvnetError(f"--check-grads is not available in this installation "
                               f"(convnet.runtime.gradcheck cannot be imported: {error})") from None
        net = training.load_net_for(opts)
        return 0 if check_net_gradients(net, seed=opts.seed, report=print) else 1
    return training.run(opts)


def checkpoint_file(path: Path) -> Path:
    """``--load-file`` may name the checkpoint or the save path that holds it."""
    path = Path(path)
    if path.is_dir():
        inside = path / CHECKPOINT_NAME
        if not inside.exists():
            raise CheckpointError(f"{path}: a folder without a {CHECKPOINT_NAME}; --load-file "
                                  f"takes a checkpoint file or the save path holding one")
        return inside
    return path


def resolve_options(args: argparse.Namespace) -> argparse.Namespace:
    """Fill in options: command line, then checkpoint values, then built-in defaults."""
    opts = argparse.Namespace(**vars(args))
    opts.saved_state = None
    opts.saved_options = {}
    if opts.load_file is not None:
        from convnet.app.checkpoint import load_checkpoint

        opts.load_file = checkpoint_file(opts.load_file)
        arrays, meta = load_checkpoint(opts.load_file)
        saved = meta.get("options")
        if not isinstance(saved, dict):
            raise CheckpointError(f"{opts.load_file}: the checkpoint holds no training options")
        for key in RESUMABLE:
            if saved.get(key) is None:
                continue
            try:
                value = _SAVED[key](saved[key])
            except (ValueError, TypeError, argparse.ArgumentTypeError):
                raise CheckpointError(f"{opts.load_file}: damaged checkpoint: saved option "
                                      f"'{key}' has the bad value {saved[key]!r}") from None
            opts.saved_options[key] = value
            if getattr(opts, key) is None:
                setattr(opts, key, value)
        opts.saved_state = (arrays, meta)
    bundled = opts.layer_def is None
    if bundled:
        opts.layer_def = DEFAULT_LAYER_DEF
        opts.layer_params = opts.layer_params or DEFAULT_LAYER_PARAMS
    elif opts.layer_params is None:
        raise UsageError("--layer-def needs --layer-params (the learning-rate file)")
    for key, value in DEFAULTS.items():
        if getattr(opts, key) is None:
            setattr(opts, key, value)
    if opts.gpu is None:
        opts.gpu = (0, 1) if bundled else (0,)
    if opts.data_provider is None:
        if opts.data_path is not None:
            raise UsageError("--data-path needs --data-provider (cifar or convnet-batches)")
        opts.data_provider = "dummy" if opts.data_dims else "digits"
    if opts.epochs is None:
        opts.epochs = 30 if bundled else 1
    opts.bundled = bundled
    check_options(opts)
    return opts


def check_options(opts: argparse.Namespace) -> None:
    """Refuse options that do not go together (exit 2), before any work is done."""
    tools = [name for name, on in (("--print-plan", opts.print_plan),
                                   ("--check-grads", opts.check_grads),
                                   ("--test-only", opts.test_only)) if on]
    if len(tools) > 1:
        raise UsageError(f"{' and '.join(tools)} cannot be combined; give one of them")
    if opts.test_only and opts.load_file is None:
        raise UsageError("--test-only evaluates a saved net: give --load-file CHECKPOINT too")
    if opts.feature_path is not None and not opts.write_features:
        raise UsageError("--feature-path is the folder for --write-features LAYER; give "
                         "--write-features too")
    if opts.multiview_test and not opts.inner_size:
        raise UsageError("--multiview-test tests on crops: give --inner-size too (e.g. the "
                         "image size for centre and mirror views)")
    needs_data = not ((opts.print_plan or opts.check_grads) and opts.data_dims)
    if opts.data_provider in ("cifar", "convnet-batches") and opts.data_path is None \
            and needs_data:
        raise UsageError(f"the '{opts.data_provider}' data provider needs --data-path DIR")
    if opts.data_provider in ("digits", "dummy") and opts.data_path is not None:
        if opts.saved_options.get("data_path") == opts.data_path:
            opts.data_path = None  # the saved run read files; this one does not
            return
        raise UsageError(f"the '{opts.data_provider}' data provider reads no files; "
                         "--data-path is for cifar and convnet-batches")


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

