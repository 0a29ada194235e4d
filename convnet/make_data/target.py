"""The target folder: what make-data may write into, and its settings file.

make-data writes into a new or empty folder, or resumes its own earlier output:
``make-data.json`` in the target records the settings that decide the batches'
bytes (size, borders, quality, batch sizes, seed, the test split) and a digest of
the sources, and is written before the first batch.  A target holding that file
with the same settings and sources is resumed (complete batches are kept); any
other non-empty target is refused unless ``--overwrite`` is given, and then only
the files make-data writes are replaced: every batch is written again, the batch
folders of an earlier make-data run that this run would not write are removed (so no
stale batch is left in a range), and other files stay.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

from convnet.errors import DataError, UsageError
from convnet.filekind import cannot_write_folder
from convnet.outputs import write_output

SETTINGS_FILE = "make-data.json"
META_FILE = "batches.meta"
LOG_FILE = "make-data.log"


class TargetState(NamedTuple):
    """``resumed``: an earlier run of the same sources and settings (its complete
    batches may be kept); ``earlier_run``: the target holds make-data's output of
    any settings (its batch folders are make-data's to replace)."""

    resumed: bool
    earlier_run: bool


def prepare_target(target: str, settings: dict, overwrite: bool) -> TargetState:
    """Make ``target`` ready to write (the rules: the module's docstring)."""
    if os.path.lexists(target) and not os.path.isdir(target):
        raise DataError(f"{target}: the target is not a folder")
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as error:
        raise DataError(f"{target}: cannot create the target folder "
                        f"({error.strerror or error})") from None
    reason = cannot_write_folder(target)
    if reason is not None:
        raise DataError(f"{target}: cannot write into the target folder ({reason})")
    earlier = _earlier_settings(target)
    resumed = earlier == settings
    if os.listdir(target) and not resumed and not overwrite:
        what = ("batches made from other sources or settings"
                if os.path.exists(os.path.join(target, SETTINGS_FILE)) else "other files")
        raise UsageError(f"{target} already holds {what}: give an empty or new --tgt-dir, or "
                         f"add --overwrite to write the batches over them")
    if not resumed:
        write_output(os.path.join(target, SETTINGS_FILE),
                     (json.dumps(settings, indent=1, sort_keys=True) + "\n").encode())
    return TargetState(resumed, earlier is not None)


def _earlier_settings(target: str) -> dict | None:
    try:
        with open(os.path.join(target, SETTINGS_FILE), encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError):
        return None
