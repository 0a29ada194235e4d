"""One writer per run folder, and no earlier run's checkpoint replaced unasked.

Two runs saving into one folder would delete each other's temporary files and
interleave their CSV rows, so a training run holds an exclusive ``flock`` on
``SAVE_PATH/.lock`` (which holds its pid) from before its first write until it
ends; a second run is refused and told the holder's pid.  The lock goes with
the process, so a killed run never leaves the folder locked; the lock file is
removed when the run ends.  Holding the lock, a run removes the temporary files
a run killed mid-write left beside its checkpoint, log and picture.

Before anything is trained the folder is also checked for what would be lost
or fail later: a ``checkpoint.npz`` that is not a regular file (found only at
the first save otherwise), or the files of an earlier run (its checkpoint, or
the log and picture of a run that saved none), which only ``--overwrite`` (or
resuming that very checkpoint) may replace.  The lock file is opened with
``O_NOFOLLOW``: a link planted as ``.lock`` is refused, not written through.

The folder is made only when the run can start (a run refused for its data or
its net leaves nothing behind), which may be long after the data began to load;
:func:`check_run_folder` finds those refusals first, creating nothing, and
:func:`claim_run_folder` makes them again under the lock.  A folder the run made is
removed again when the run ends with nothing saved in it (it failed before its
first test).
"""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from convnet.app.checkpoint import CHECKPOINT_NAME
from convnet.app.run.log import CSV_NAME
from convnet.app.run.log_plot import PNG_NAME
from convnet.errors import CheckpointError, UsageError
from convnet.filekind import not_a_regular_file
from convnet.outputs import remove_stale_temps

LOCK_NAME = ".lock"
#: What a run writes into its folder; found there, they are an earlier run's.
RUN_FILES = (CHECKPOINT_NAME, CSV_NAME, PNG_NAME)


@contextmanager
def claim_run_folder(folder: Path, loaded: Path | None = None,
                     overwrite: bool = False) -> Iterator[Path]:
    """Hold ``folder`` (created if need be) for one run's writes; yields it.

    ``loaded`` is the checkpoint the run resumes, which it may replace;
    ``overwrite`` allows replacing any other checkpoint found there.
    """
    folder = Path(folder)
    _check_is_folder(folder)
    made = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CheckpointError(f"cannot write to the save path {folder}: "
                              f"{error.strerror or error}") from None
    try:
        fd = _lock(folder)
        try:
            check_checkpoint_slot(folder, loaded, overwrite)
            for name in RUN_FILES:  # what a killed run left mid-write; no other run writes
                remove_stale_temps(folder / name)
            yield folder
        finally:
            _unlock(folder, fd)
    finally:
        if made:
            _remove_if_empty(folder)


def _remove_if_empty(folder: Path) -> None:
    """The folder this run made, when it ended with nothing saved in it (it failed or
    stopped before its first test), so that it leaves nothing behind."""
    try:
        folder.rmdir()  # only ever removes an empty folder
    except OSError:
        pass  # something was saved, or it is gone already


def check_run_folder(folder: Path, loaded: Path | None = None, overwrite: bool = False) -> None:
    """Refuse now what :func:`claim_run_folder` would refuse later (a file in the
    folder's place, a folder another run holds, a checkpoint not to replace),
    without creating or locking anything."""
    folder = Path(folder)
    _check_is_folder(folder)
    if not folder.is_dir():
        return  # made when the run starts
    try:
        fd = os.open(folder / LOCK_NAME, os.O_RDONLY)
    except OSError:
        fd = None  # no lock file (no run holds the folder), or unreadable: the claim says
    if fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise _in_use(folder) from None
        finally:
            os.close(fd)  # releases the probe's lock, if it got one
    check_checkpoint_slot(folder, loaded, overwrite)


def _check_is_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(f"cannot save to {folder}: it is a file, not a folder")


def _in_use(folder: Path) -> CheckpointError:
    return CheckpointError(f"{folder} is in use by another run ({_holder(folder / LOCK_NAME)}); "
                           "wait for it to end, or give another --save-path")


def _lock(folder: Path) -> int:
    """Take the folder's lock and write our pid into it.  The file may be removed by
    the holder between our open and our flock; then we locked a file nobody else will
    ever look at, so we try again on the file that is there now."""
    path = folder / LOCK_NAME
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise CheckpointError(f"cannot lock the save path {folder}: {path} is a link; "
                                      "remove it (the lock is never written through one)"
                                      ) from None
            raise CheckpointError(f"cannot write to the save path {folder}: "
                                  f"{error.strerror or error}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise CheckpointError(f"cannot lock the save path {folder}: "
                                      f"{error.strerror or error}") from None
            raise _in_use(folder) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as error:
            _unlock(folder, fd)
            raise CheckpointError(f"cannot write to the save path {folder}: "
                                  f"{error.strerror or error}") from None
        return fd


def _holder(path: Path) -> str:
    """"pid N" from the lock file, read with a bound (it is only ever a pid)."""
    try:
        with open(path, "rb") as file:
            text = file.read(32).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "its pid is not recorded yet"


def _unlock(folder: Path, fd: int) -> None:
    """Remove the lock file while still holding it (see :func:`_lock`), then release."""
    try:
        os.remove(folder / LOCK_NAME)
    except OSError:
        pass  # already gone: the folder was removed under us
    os.close(fd)


def check_checkpoint_slot(folder: Path, loaded: Path | None, overwrite: bool,
                          resumable: bool = True) -> None:
    """Refuse a checkpoint slot that is not a regular file, or a folder holding an
    earlier run's files (:data:`RUN_FILES`) this run would replace; ``resumable``:
    whether the message may offer --load-file (``--compare`` cannot resume)."""
    target = folder / CHECKPOINT_NAME
    problem = not_a_regular_file(target) if os.path.lexists(target) else None
    if problem is not None:
        raise CheckpointError(f"cannot save to {target}: it {problem}")
    if overwrite or (loaded is not None and _same_file(target, loaded)):
        return
    earlier = [name for name in RUN_FILES if os.path.lexists(folder / name)]
    if not earlier:
        return
    if earlier[0] != CHECKPOINT_NAME:
        raise UsageError(f"{folder} holds the {earlier[0]} of an earlier run, which this run "
                         "would replace: to keep it, give another --save-path; to start "
                         "over and replace it, add --overwrite")
    resume = f"to continue that run use --load-file {folder}; " if resumable else ""
    raise UsageError(f"{folder} holds the checkpoint of an earlier run, which this run would "
                     f"replace: {resume}to keep it, give another --save-path; to start over "
                     "and replace it, add --overwrite")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
