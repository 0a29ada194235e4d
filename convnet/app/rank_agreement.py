"""The processes of a multi-process run check, before any work, that they were started alike.

Each rank reads its own command line, config files and checkpoint, so ranks
started differently (``mpiexec -n 1 python convnet.py --epochs 2 : -n 1 python
convnet.py --epochs 4``) would otherwise plan, train or stop differently and
wait forever for each other, fail later with MPI's own errors, or train
silently to another result.  So every rank describes its run
(:func:`run_description`: every option that changes what the ranks do
together, and the *contents* of the config files and the checkpoint, not their
paths), the ranks exchange the descriptions, and any difference ends every rank
with one line naming each differing item and what each rank has
(:func:`check_started_alike`).

What a rank may set for itself (:data:`PER_RANK`): what only rank 0 does
something with (the save path's and feature path's names, ``--overwrite``,
``--no-progress``, where ``--plan-graph`` and ``--auto-place`` write), its own
machine's device numbers (``--gpu``: only their count must agree), the path to
each file (its contents must agree), and its own ``--rank-timeout``.  Whether a
save path is given at all must agree: a checkpoint is gathered from every rank.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from pathlib import Path

from convnet.version import __version__
from convnet.app.option_values import slow_device_text
from convnet.app.options import RunOptions
from convnet.errors import UsageError
from convnet.filekind import not_a_regular_file

#: Options each rank may set for itself, and what of them must still agree (None: nothing).
PER_RANK = {"gpu": "count", "save_path": "given", "feature_path": None, "overwrite": None,
            "no_progress": None, "plan_graph": "given", "auto_place_out": None,
            "rank_timeout": None}
#: Files compared by contents (the path may differ between machines).
BY_CONTENTS = ("layer_def", "layer_params")


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def file_digest(path: Path) -> str:
    """The first 12 hex digits of the file's SHA-256 (or why it cannot be read: the
    run's own checks say it better, later, in one place)."""
    problem = not_a_regular_file(path)
    if problem is not None:
        return f"unreadable ({problem})"
    try:
        with open(path, "rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest()[:12]
    except OSError as error:
        return f"unreadable ({error.strerror})"


def run_description(opts: RunOptions, no_winograd: bool) -> dict[str, tuple[str, str]]:
    """What must be the same on every rank: item -> (the value compared, what to show)."""
    out: dict[str, tuple[str, str]] = {"the program version": (__version__, __version__)}
    for field in fields(RunOptions):
        name, value = field.name, getattr(opts, field.name)
        if name == "resume":
            continue
        if name in BY_CONTENTS:
            digest = file_digest(value)
            out[f"the contents of {option_name(name)}"] = (digest, f"{value} (sha256 {digest})")
        elif name in PER_RANK:
            agree = PER_RANK[name]
            if agree == "count":
                out[option_name(name)] = (str(len(value)), f"{_shown(value)} ({len(value)} "
                                                            f"device(s))")
            elif agree == "given":
                out[option_name(name)] = (str(value is not None), _shown(value))
        else:
            shown = (slow_device_text(value) if name == "slow_device" and value is not None
                     else _shown(value))
            out[option_name(name)] = (shown, shown)
    if opts.resume is None:
        out["the contents of --load-file"] = ("none", "none")
    else:
        digest = file_digest(opts.resume.checkpoint)
        out["the contents of --load-file"] = (digest, f"{opts.resume.checkpoint} "
                                                        f"(sha256 {digest})")
    out["--no-winograd"] = (str(no_winograd), str(no_winograd))
    return out


def _shown(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]} has" if len(ranks) == 1 else \
        f"ranks {', '.join(map(str, ranks))} have"


def disagreements(descriptions: list[dict[str, tuple[str, str]]]) -> list[str]:
    """One text per item on which the ranks' descriptions (in rank order) differ:
    ``--epochs: rank 0 has 2, rank 1 has 4`` (ranks with the same value together)."""
    items = list(dict.fromkeys(item for description in descriptions for item in description))
    out = []
    for item in items:
        ranks_of: dict[str, list[int]] = {}
        shown: dict[str, str] = {}
        for rank, description in enumerate(descriptions):
            compared, text = description.get(item, ("missing", "nothing"))
            ranks_of.setdefault(compared, []).append(rank)
            shown.setdefault(compared, text)
        if len(ranks_of) > 1:
            out.append(f"{item}: " + ", ".join(f"{_ranks(ranks)} {shown[compared]}"
                                                for compared, ranks in ranks_of.items()))
    return out


def check_started_alike(comm, opts: RunOptions, no_winograd: bool) -> None:
    """Exchange the ranks' descriptions (every rank calls this at the same point, before
    any other collective of the run); a UsageError naming what differs, if anything."""
    if comm.size == 1:
        return
    descriptions = comm.allgather(run_description(opts, no_winograd),
                                  what="starting up: comparing how the ranks were started")
    differences = disagreements(descriptions)
    if differences:
        raise UsageError("the ranks were started differently: ranks disagree on "
                         + "; ".join(differences)
                         + " (start every rank with the same options, config files and "
                           "checkpoint)")


__all__ = ["PER_RANK", "check_started_alike", "disagreements", "run_description"]
