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

The exit statuses, :class:`~convnet.stop_signals.Terminated` and the handling of
signals during start-up are both programs' (:mod:`convnet.stop_signals`).
"""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

from convnet.stop_signals import Terminated, stop_exception, stop_signal_handlers

_stop_signal: int | None = None
_deferring = False  # inside deferred_interrupt()
_stop_requested = False  # a first Ctrl-C arrived while deferring


def _on_stop_signal(signum, frame):
    """Ctrl-C and SIGTERM: raise in the main thread, and remember it (see raise_if_stopped)."""
    global _stop_signal, _stop_requested
    if signum == signal.SIGINT and _deferring and not _stop_requested:
        _stop_requested = True
        print("\nCtrl-C: stopping after this batch to save a checkpoint "
              "(press Ctrl-C again to stop at once)", file=sys.stderr, flush=True)
        return
    _stop_signal = signum
    raise stop_exception(signum)


def raise_if_stopped() -> None:
    """Raise the pending Ctrl-C/SIGTERM again.  The training loop calls this between
    steps: an exception raised by a signal handler is lost when the signal lands while
    Python runs a finaliser (``__del__``, a generator being closed), and the run would
    otherwise go on as if no signal had come."""
    if _stop_signal is not None:
        raise stop_exception(_stop_signal)


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
    global _stop_signal
    _stop_signal = None
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable(previous_hook)
    try:
        with stop_signal_handlers(_on_stop_signal):
            yield
    finally:
        sys.unraisablehook = previous_hook
