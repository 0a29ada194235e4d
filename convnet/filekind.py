"""What a path is, in words, for errors about files that must be regular files.

Opening a FIFO blocks until a writer appears, and a link to ``/dev/zero``
reads forever, so every loader of user-named files (batches, checkpoints)
asks :func:`not_a_regular_file` before it opens anything, and the error then
says what the path really is instead of "does not exist".
"""

from __future__ import annotations

import os
import stat

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def not_a_regular_file(path: str | os.PathLike) -> str | None:
    """None for a regular file (or a link to one); else what the path is, e.g.
    ``"does not exist"``, ``"is a folder"``, ``"is a link to /dev/zero, a character
    device"``."""
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"is a link to {os.readlink(path)}, which does not exist"
        return "does not exist"
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    if os.path.islink(path):
        return f"is a link to {os.readlink(path)}, {kind}, not a regular file"
    return f"is {kind}, not a regular file"


def cannot_write_folder(path: str | os.PathLike) -> str | None:
    """None when files can be made in the folder ``path``, or, where it does not exist
    yet, in the folder it would be made in (its nearest ancestor that exists); else why
    not, e.g. ``"runs/a is not a folder"``, ``"/mnt/ro is on a read-only file system"``.
    For outputs made only after some training, so that they fail before it."""
    path = os.path.abspath(os.fspath(path))
    existing = path
    while not os.path.lexists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is not a folder"
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return f"{existing} is {'on a read-only file system' if read_only else 'not writable'}"
