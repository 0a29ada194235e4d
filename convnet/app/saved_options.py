"""The options a checkpoint remembers: which (:data:`RESUMABLE`), how they are
saved (:func:`options_for_checkpoint`), and how they are read back for
``--load-file`` (:func:`read_resume`), each held to the command line's own rule.

A checkpoint is untrusted input, so a saved value that the command line would
refuse is a damaged checkpoint, and a config file a checkpoint names must look
like one (:func:`check_saved_config_file`) before it is opened.
:mod:`convnet.app.options` resolves the saved values against the command line.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from convnet.app.checkpoint import CheckpointReader, find_checkpoint, short_repr
from convnet.app.option_values import (BACKEND_NAMES, MAX_DEVICES, batch_range, color_noise,
                                       data_dims, gpu_list, image_side, non_negative_int,
                                       positive_int,
                                       provider_name, scalar_mean, sync_mode)
from convnet.errors import CheckpointError
from convnet.filekind import not_a_regular_file
from convnet.plan.schedules import SCHEDULES
from convnet.plan.precisions import PRECISIONS

#: What a config file a checkpoint names may be called.
CONFIG_SUFFIXES = (".cfg", ".ini", ".conf", ".cnf")
#: Longest saved path or name taken from a checkpoint.
MAX_SAVED_TEXT = 4096


#: Options a checkpoint remembers; on resume a command-line value wins.
RESUMABLE = ("layer_def", "layer_params", "gpu", "mini", "micro_batches", "pipeline_schedule",
             "seed", "data_provider", "data_path", "data_dims", "num_classes", "dummy_cases",
             "train_range", "test_range", "inner_size", "image_size", "color_noise",
             "scalar_mean", "epochs", "test_freq", "logreg_name", "backend", "sync", "precision")

@dataclass(frozen=True)
class Resume:
    """The saved run that ``--load-file`` continues."""

    checkpoint: Path  # the checkpoint file read (--load-file may name its folder)
    keys: tuple[str, ...]  # its arrays (weights and momentum), read once the net is known
    meta: dict  # the counters and options saved with them
    saved_options: dict[str, object]  # the resumable options the checkpoint held, checked


def _saved_int(check):
    """A saved integer option: a JSON integer (not a string or a float), held to
    the command line's rule ``check``."""
    def decode(value):
        if type(value) is not int:
            raise ValueError(value)
        return check(str(value))
    return decode


def _saved_number(check):
    def decode(value):
        if type(value) not in (int, float):
            raise ValueError(value)
        return check(repr(value))
    return decode


def _saved_text(check=str):
    def decode(value):
        if not isinstance(value, str) or not value or len(value) > MAX_SAVED_TEXT:
            raise ValueError(value)
        return check(value)
    return decode


def _saved_gpu(value) -> tuple[int, ...]:
    if not isinstance(value, list) or not value or len(value) > MAX_DEVICES \
            or any(type(v) is not int for v in value):
        raise ValueError(value)
    return gpu_list(",".join(map(str, value)))


def _saved_choice(choices):
    def decode(value):
        if value not in choices:
            raise ValueError(value)
        return value
    return decode


#: How a saved option's JSON value becomes an option value again, held to the rules
#: of the command line.
_DECODE_SAVED = {
    "layer_def": _saved_text(Path), "layer_params": _saved_text(Path),
    "data_path": _saved_text(Path), "gpu": _saved_gpu,
    "mini": _saved_int(positive_int),
    "micro_batches": _saved_int(positive_int),
    "pipeline_schedule": _saved_choice(SCHEDULES),
    "seed": _saved_int(non_negative_int),
    "data_provider": _saved_text(provider_name),
    "data_dims": _saved_text(data_dims),
    "num_classes": _saved_int(positive_int),
    "dummy_cases": _saved_int(positive_int),
    "train_range": _saved_text(batch_range),
    "test_range": _saved_text(batch_range),
    "inner_size": _saved_int(non_negative_int),
    "image_size": _saved_int(image_side),
    "color_noise": _saved_number(color_noise),
    "scalar_mean": _saved_number(scalar_mean),
    "epochs": _saved_int(positive_int),
    "test_freq": _saved_int(positive_int),
    "logreg_name": _saved_text(), "backend": _saved_choice(BACKEND_NAMES),
    "sync": _saved_text(sync_mode),
    "precision": _saved_choice(PRECISIONS),
}


def read_resume(load_file: Path) -> Resume:
    """Read the checkpoint ``--load-file`` names, and check the options saved in it."""
    checkpoint = find_checkpoint(load_file)
    with CheckpointReader(checkpoint) as reader:
        keys, meta = tuple(reader.keys), reader.meta
    saved = meta.get("options")
    if not isinstance(saved, dict):
        raise CheckpointError(f"{checkpoint}: the checkpoint holds no training options")
    options = {}
    for key in RESUMABLE:
        if saved.get(key) is None:
            continue
        try:
            options[key] = _DECODE_SAVED[key](saved[key])
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            raise CheckpointError(f"{checkpoint}: damaged checkpoint: saved option "
                                  f"'{key}' has the bad value {short_repr(saved[key])}") from None
    return Resume(checkpoint, keys, meta, options)


def check_saved_config_file(checkpoint: Path, key: str, path: Path) -> None:
    """A config file named by a checkpoint is opened and parsed, and parse errors
    quote lines of it, so it must at least look like a config file: a regular file
    named like one (never, say, a system file a tampered checkpoint points at)."""
    problem = not_a_regular_file(path)
    if path.suffix.lower() not in CONFIG_SUFFIXES:
        problem = f"is not named like a config file ({', '.join(CONFIG_SUFFIXES)})"
    if problem is not None:
        option = "--" + key.replace("_", "-")
        raise CheckpointError(f"{checkpoint}: the saved {option} {path} {problem}; give "
                              f"{option} FILE")


def options_for_checkpoint(opts) -> dict:
    """The resumable options of ``opts`` (a :class:`~convnet.app.options.RunOptions`) as
    JSON-able values (paths made absolute)."""
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
