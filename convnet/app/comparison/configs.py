"""The configs of ``--compare``, read from its command line: their files, names and options.

``--layer-params`` is given once (shared by all configs) or once per config, in
the same order; every config gets the command line's other options, once per
``--sync`` mode when several are given.  Options that make no sense with
``--compare`` are refused here, before anything is planned.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from convnet.app.options import RunOptions, check_options, resolve_options
from convnet.errors import UsageError
from convnet.outputs import file_name_part

#: The picture and the table a --compare with --save-path writes into it (beside a
#: folder per run, which is never named so).
PICTURE_NAME = "compare.png"
TABLE_NAME = "compare.txt"

#: Options that make no sense with --compare, and why.
_NOT_WITH_COMPARE = (
    ("layer_def", "--layer-def (the configs are the files given to --compare)"),
    ("load_file", "--load-file (every config is trained from scratch)"),
    ("test_only", "--test-only"),
    ("print_plan", "--print-plan (run --print-plan on each config instead)"),
    ("plan_graph", "--plan-graph (draw each config's graph with --print-plan)"),
    ("check_grads", "--check-grads"),
    ("write_features", "--write-features"),
    ("tensorboard", "--tensorboard (each config's log.csv and log.png are in its sub-folder "
                    "of --save-path)"),
    ("auto_place", "--auto-place (run --auto-place on a config with --layer-def, then "
                   "compare the file it writes with the others)"),
)


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
    repeats, and for a name of the comparison's own files), with the ``--sync`` mode after
    it (``-local4``) when several are compared; in the order of :func:`config_options`."""
    names, seen = [], {PICTURE_NAME: 1, TABLE_NAME: 1}
    for path in configs:
        stem = file_name_part(Path(path).stem)  # "...cfg" is named "..": not a folder name
        seen[stem] = seen.get(stem, 0) + 1
        names.append(stem if seen[stem] == 1 else f"{stem}#{seen[stem]}")
    if modes is None or len(modes) < 2:
        return names
    return [f"{name}-{mode.replace(':', '')}" for name in names for mode in modes]


def check_args(args: argparse.Namespace) -> None:
    """Refuse the options that make no sense with --compare, a --sync mode given
    twice, and a comparison of one run (one config under one --sync mode), which has
    nothing to be compared with."""
    for key, text in _NOT_WITH_COMPARE:
        if getattr(args, key):
            raise UsageError(f"--compare cannot be combined with {text}")
    modes = args.sync or []
    repeated = sorted({mode for mode in modes if modes.count(mode) > 1}, key=modes.index)
    if repeated:  # two runs of one mode would share a name and a folder
        spelling = " (async is async:4)" if "async:4" in repeated else ""
        raise UsageError(f"--sync names {', '.join(repeated)} more than once{spelling}: "
                         f"compare each mode once")
    if len(args.compare or ()) == 1 and len(modes) < 2:
        raise UsageError(f"--compare needs two or more configs to compare (or several --sync "
                         f"modes for one, e.g. --sync sync local:4); to train "
                         f"{args.compare[0]} alone, give it as --layer-def")


def config_options(args: argparse.Namespace,
                   pairs: list[tuple[Path, Path]]) -> list[RunOptions]:
    """The options of every config: the command line's, with the config's own files.

    With no ``--gpu`` every config gets device 0 here;
    :func:`~convnet.app.comparison.compare.compare` widens the list afterwards to fit
    the config that names the most devices.  With several ``--sync`` modes every
    config comes once per mode, the modes in the order given.
    """
    modes = args.sync or [None]
    first = resolve_options(argparse.Namespace(**{**vars(args), "sync": modes[:1]}), pairs[0])
    for mode in modes[1:]:  # each mode with the other options, as a run of it alone would be
        check_options(replace(first, sync=mode))
    return [replace(first, layer_def=Path(layer_def), layer_params=Path(layer_params),
                    sync=mode or first.sync)
            for layer_def, layer_params in pairs for mode in modes]
