"""Ctrl-C and SIGTERM: the exit statuses and lines of both programs (training and
make-data), and how a signal in a program's first milliseconds still ends it that way.

Each program's launcher (``convnet.py``, ``python -m convnet.make_data``) blocks
both signals in its first statement, before it imports anything, and then calls
:func:`exit_cleanly_on_early_signals`, which puts handlers in place that exit at
once (nothing is open yet to close or save) and lets the signals through, so one
that came in between is handled now.  The program then replaces these handlers
with ones that unwind its main thread (:func:`raising_on_stop_signals`).

Before a launcher's first statement the interpreter is still starting; what a
signal does there is the interpreter's (docs/CHECKPOINTS.md).  One case reaches the
program: CPython reports a Ctrl-C that lands while it checks whether the script
is an import path entry ("Failed checking if argv[0] is an import path entry")
and then runs the script anyway; :func:`exit_cleanly_on_early_signals` finds that
interrupt (``sys.last_value``) and ends the program as if it had come a moment later.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager

#: Exit status and line of each stop signal (the shell's 128 + signal number).
STOP_EXITS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}


class Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives, to unwind like Ctrl-C."""


def stop_exception(signum: int) -> BaseException:
    """What a stop signal raises in the main thread."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def exit_at_once(signum, frame):
    """Before the program's own handlers are in place there is nothing to close or
    save, and an exception raised in the middle of an import would end as a traceback."""
    code, message = STOP_EXITS[signum]
    os.write(2, f"{message}\n".encode())
    os._exit(code)


def exit_cleanly_on_early_signals() -> None:
    """A launcher's first call: Ctrl-C and SIGTERM while the program starts up
    (importing numpy, parsing options) exit 130/143 with one line, like later ones;
    so does a Ctrl-C the interpreter caught and printed before the program started
    (see the module docstring).

    The launcher blocks both signals before it imports anything; they are let
    through here, once the handlers are in place, so one that came in between is
    handled now."""
    for signum in STOP_EXITS:
        if signum != signal.SIGINT or signal.getsignal(signum) is signal.default_int_handler:
            signal.signal(signum, exit_at_once)
    if isinstance(getattr(sys, "last_value", None), KeyboardInterrupt):
        exit_at_once(signal.SIGINT, None)
    if hasattr(signal, "pthread_sigmask"):  # POSIX only
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_EXITS))


@contextmanager
def stop_signal_handlers(handler):
    """Inside the block ``handler`` handles Ctrl-C and SIGTERM (a Ctrl-C that whoever
    started the program ignores or handles itself is left so); the handlers that were
    there before come back afterwards.  Outside the main thread nothing changes."""
    previous = {}
    for signum in STOP_EXITS:
        current = signal.getsignal(signum)
        if signum == signal.SIGINT and current not in (signal.default_int_handler,
                                                       exit_at_once):
            continue
        try:
            previous[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread (e.g. called from a test's thread)
            break
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _raise_stop(signum, frame):
    raise stop_exception(signum)


def raising_on_stop_signals():
    """Inside the block Ctrl-C raises ``KeyboardInterrupt`` and SIGTERM
    :class:`Terminated` in the main thread."""
    return stop_signal_handlers(_raise_stop)
