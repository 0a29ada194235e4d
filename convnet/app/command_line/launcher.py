"""Where the program starts: ``python convnet.py`` and the installed ``convnet`` script.

The signal handlers that turn Ctrl-C and SIGTERM into a clean exit (130, 143)
go in before anything heavy is imported, so a signal during start-up never
shows a traceback, whichever way the program was started.

After a CUDA failure (:mod:`convnet.runtime.devices.cuda_failures`) the process
ends here without the interpreter's shutdown: the one-line error is printed and
every file the run wrote was closed on the way out of the command, but CuPy's
objects still alive (compiled kernel modules, streams, the memory pool) would be
finalised at shutdown on a broken GPU context, where each fails and prints a
traceback, and a driver call there may even hang.  Skipping that shutdown loses
nothing: the GPU's memory goes back to the driver when the process ends.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    from convnet.stop_signals import exit_cleanly_on_early_signals

    exit_cleanly_on_early_signals()
    try:
        from convnet.app.command_line.main import main as run_command_line
    except ModuleNotFoundError as error:
        print(not_installed(error), file=sys.stderr)
        return 2
    code = run_command_line()
    end_at_once_after_a_cuda_failure(code)
    return code


def not_installed(error: ModuleNotFoundError) -> str:
    """The one line for a Python that lacks the package's own modules or what it needs
    (``python convnet.py`` by a Python other than the one it was installed in: the
    ``kernels/`` folder is ``convnet.kernels`` only through the installed package)."""
    return (f"error: this Python ({sys.executable}) cannot import {error.name!r}: the package "
            "and what it needs are not installed in it; run 'make run' once (it installs "
            "them into .venv/), then '.venv/bin/python convnet.py'")


def end_at_once_after_a_cuda_failure(code: int) -> None:
    """End the process with ``code`` without the interpreter's shutdown when a CUDA
    failure was reported (see the module docstring); return otherwise."""
    failures = sys.modules.get("convnet.runtime.devices.cuda_failures")
    if failures is None or not failures.failed():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)
