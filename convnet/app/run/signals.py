"""Ctrl-C and SIGTERM during a run: unwind the main thread like an exception, reliably.

Inside :func:`stop_handlers` both signals raise in the main thread
(``KeyboardInterrupt`` for Ctrl-C, :class:`Terminated` for SIGTERM) so that
``finally`` blocks close devices and data loaders.  An exception raised by a
signal handler is lost when the signal lands while Python runs a finaliser,
so the training loop also calls :func:`raise_if_stopped` between steps.

Inside :func:`deferred_interrupt` (a run that saves checkpoints) the first
Ctrl-C does not raise: it asks the loop to stop at the end of the current
data batch and save there (:func:`interrupt_requested`), so the checkpoint
holds a consistent state that a resumed run continues exactly; a second
Ctrl-C raises at once.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager

#: Exit status and message of each stop signal (the shell's 128 + signal number).
STOP_EXITS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}


class Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives, to unwind like Ctrl-C."""


_stop_signal: int | None = None
_deferring = False  # inside deferred_interrupt()
_stop_requested = False  # a first Ctrl-C arrived while deferring


def _stop_exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()


def _on_stop_signal(signum, frame):
    """Ctrl-C and SIGTERM: raise in the main thread, and remember it (see raise_if_stopped)."""
    global _stop_signal, _stop_requested
    if signum == signal.SIGINT and _deferring and not _stop_requested:
        _stop_requested = True
        print("\nCtrl-C: stopping after this batch to save a checkpoint "
              "(press Ctrl-C again to stop at once)", file=sys.stderr, flush=True)
        return
    _stop_signal = signum
    raise _stop_exception(signum)


def raise_if_stopped() -> None:
    """Raise the pending Ctrl-C/SIGTERM again.  The training loop calls this between
    steps: an exception raised by a signal handler is lost when the signal lands while
    Python runs a finaliser (``__del__``, a generator being closed), and the run would
    otherwise go on as if no signal had come."""
    if _stop_signal is not None:
        raise _stop_exception(_stop_signal)


def _exit_at_once(signum, frame):
    """Before :func:`stop_handlers` is in place there is nothing to close or save, and
    an exception raised in the middle of an import would end as a traceback."""
    code, message = STOP_EXITS[signum]
    os.write(2, f"{message}\n".encode())
    os._exit(code)


def exit_cleanly_on_early_signals() -> None:
    """The launcher's first statement: Ctrl-C and SIGTERM while the program starts up
    (importing numpy, parsing options) exit 130/143 with one line, like later ones.

    ``convnet.py`` blocks both signals before it imports anything; they are let
    through here, once the handlers are in place, so one that came in between is
    handled now."""
    for signum in STOP_EXITS:
        if signum != signal.SIGINT or signal.getsignal(signum) is signal.default_int_handler:
            signal.signal(signum, _exit_at_once)
    if hasattr(signal, "pthread_sigmask"):  # POSIX only
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_EXITS))


def interrupt_requested() -> bool:
    """Whether a first Ctrl-C asked a deferring run to stop at the next batch end."""
    return _stop_requested


@contextmanager
def deferred_interrupt(enabled: bool = True):
    """Inside the block (when ``enabled``) a first Ctrl-C only sets
    :func:`interrupt_requested`; a second one raises as usual."""
    global _deferring, _stop_requested
    _deferring, _stop_requested = enabled, False
    try:
        yield
    finally:
        _deferring, _stop_requested = False, False


def _install_signal_handlers() -> dict:
    global _stop_signal
    _stop_signal = None
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(signum)
        if signum == signal.SIGINT and current not in (signal.default_int_handler,
                                                       _exit_at_once):
            continue  # Ctrl-C ignored or handled by whoever started us: leave it so
        try:
            previous[signum] = signal.signal(signum, _on_stop_signal)
        except ValueError:  # not the main thread (e.g. called from a test's thread)
            break
    return previous


def _quiet_unraisable(previous_hook):
    """An interrupt lost inside a finaliser is not an error to print (it is raised again
    by :func:`raise_if_stopped`); anything else goes to the usual hook."""
    def hook(unraisable):
        if isinstance(unraisable.exc_value, (KeyboardInterrupt, Terminated)):
            return
        previous_hook(unraisable)
    return hook


@contextmanager
def stop_handlers():
    """Inside the block Ctrl-C and SIGTERM raise in the main thread; the handlers (and
    the hook for errors in finalisers) that were there before come back afterwards."""
    previous = _install_signal_handlers()
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable(previous_hook)
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)
