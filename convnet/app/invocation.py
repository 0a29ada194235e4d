"""How the user ran the program, so that what it prints can be pasted back.

``--help`` names the program as it was invoked (``convnet.py`` or the installed
``convnet`` script), and the commands printed at the end of a run (how to resume) start
the same way; a run started from Python (:func:`convnet.train`, inside
:func:`called_from_python`) is resumed by a call. Paths are shown one way everywhere:
relative to the current folder when they lie inside it, absolute otherwise, whether they
came from the command line or from a checkpoint (which stores them absolute).
"""

from __future__ import annotations

import os
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path

_from_python = False  # inside called_from_python()


@contextmanager
def called_from_python():
    """Inside the block the program runs for the Python API: the commands it prints to
    go on are Python calls."""
    global _from_python
    before, _from_python = _from_python, True
    try:
        yield
    finally:
        _from_python = before


def program_name() -> str:
    """The name the program was started under (``convnet.py``, ``convnet``)."""
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "convnet"


def command_prefix() -> str:
    """The start of a command line that runs this program again."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "convnet"
    if argv0.endswith(".py"):
        return f"python {shlex.quote(argv0)}"
    return shlex.quote(os.path.basename(argv0))


def shown_path(path: Path | str) -> str:
    """``path`` relative to the current folder when inside it, else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def resume_command(save_dir: Path, epochs: int | None = None, processes: int = 1) -> str:
    """The command that continues the run saved in ``save_dir`` (under ``mpiexec`` with
    as many processes when the run had several: its saved --gpu list is per process)."""
    if _from_python and processes == 1:
        more = f", epochs={epochs}" if epochs is not None else ""
        return f"convnet.train(load_file={shown_path(save_dir)!r}{more})"
    more = f" --epochs {epochs}" if epochs is not None else ""
    launcher = f"mpiexec -n {processes} " if processes > 1 else ""
    return f"{launcher}{command_prefix()} --load-file {shlex.quote(shown_path(save_dir))}{more}"
