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
