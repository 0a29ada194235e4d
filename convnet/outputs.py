"""Writing output files: whole or not at all, never through a link, never over a
file nobody asked to replace.

Every file the engine writes (the checkpoint, the run's log and its picture,
features, the ``--compare`` table and picture, the plan graph, ``--auto-place``'s
config pair) goes through :func:`write_output` or :func:`write_outputs`.  The
bytes go to a new temporary file ``.<name>.<pid>.<random>.tmp`` beside the
target, created with ``O_EXCL | O_NOFOLLOW`` (a link planted under that name is
refused, not followed), are fsynced, and the temporary file is renamed onto the
target with ``os.replace``.  A rename replaces a link found at the target by the
new file: what the link points to is never written.  A process killed mid-write
leaves the previous file (or none) and at most a temporary file; a failed write
(a full disk) removes its temporary file and raises the ``OSError``.

:func:`refuse_existing` is the ``--overwrite`` rule, and :func:`file_name_part`
keeps a name taken from a config (a layer, a config file's stem) from leading out
of the folder a file name is made in.
"""

from __future__ import annotations

import os
import secrets
from typing import BinaryIO, Callable, Union

from convnet.errors import UsageError

#: What to write: the bytes, or a function that writes them into an open binary file.
Content = Union[bytes, Callable[[BinaryIO], None]]

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def temp_prefix(name: str) -> str:
    """The start of the temporary files' names for a target called ``name``."""
    return f".{name}."


def remove_stale_temps(path: str | os.PathLike) -> None:
    """Remove the temporary files a killed writer of ``path`` left beside it.  Only for
    a writer that knows no other process writes ``path`` now (a run holding its save
    folder's lock): another writer's temporary file would vanish under it."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    prefix = temp_prefix(name)
    for entry in os.listdir(directory):
        if entry.startswith(prefix) and entry.endswith(".tmp"):
            _remove(os.path.join(directory, entry))


def _write_temp(path: str, content: Content) -> str:
    """Write ``content`` whole into a new temporary file beside ``path``; its name."""
    directory, name = os.path.split(path)
    temp = os.path.join(directory, f"{temp_prefix(name)}{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, _NEW_FILE, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            if callable(content):
                content(file)
            else:
                file.write(content)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        _remove(temp)
        raise
    return temp


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass  # never made, or gone already


def _fsync_directory(directory: str) -> None:
    """Make the renames durable.  Some file systems cannot fsync a directory; the
    renames have happened either way, so that is not an error."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_output(path: str | os.PathLike, content: Content) -> None:
    """Replace ``path`` by a file holding ``content``, atomically (see the module)."""
    write_outputs([(path, content)])


def write_outputs(files: list[tuple[str | os.PathLike, Content]]) -> None:
    """Write files that belong together: all to temporary files first, renamed onto
    their targets only when every one is whole.  On any failure the temporary files
    are removed and so is any target already renamed in this call, so the set is
    written whole or not at all; the ``OSError`` is raised."""
    paths = [os.path.abspath(os.fspath(path)) for path, _ in files]
    temps: list[str] = []
    renamed: list[str] = []
    try:
        for path, (_, content) in zip(paths, files):
            temps.append(_write_temp(path, content))
        for temp, path in zip(temps, paths):
            os.replace(temp, path)
            renamed.append(path)
    except BaseException:
        for temp in temps:
            _remove(temp)
        if len(renamed) < len(paths):
            for path in renamed:
                _remove(path)
        raise
    for directory in sorted({os.path.dirname(path) for path in paths}):
        _fsync_directory(directory)


def refuse_existing(path: str | os.PathLike, overwrite: bool,
                    keep: str = "remove or rename it",
                    replace: str = "add --overwrite") -> None:
    """The ``--overwrite`` rule: an output that exists (a link counts, even a
    dangling one) is replaced only with ``--overwrite``; ``keep`` says how else to
    keep it, e.g. ``"give another --feature-path"``, and ``replace`` how to replace it
    where the caller is not the command line (``"give overwrite=True"``)."""
    if overwrite or not os.path.lexists(path):
        return
    raise UsageError(f"{os.fspath(path)} exists and this run would replace it: to keep it, "
                     f"{keep}; to replace it, {replace}")


def file_name_part(name: str) -> str:
    """``name`` made safe to use in one file name: path separators and NUL become
    ``_``, and a name of dots only (``.``, ``..``) has its dots made ``_`` too, so a
    layer named ``../../x`` names a file inside its folder, not outside it."""
    safe = "".join("_" if ch in ("/", "\\", "\0") else ch for ch in name)
    return safe if safe.strip(".") else safe.replace(".", "_") or "_"
