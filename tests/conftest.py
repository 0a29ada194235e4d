"""Set-up for the whole test session."""

from __future__ import annotations

import signal


def pytest_configure(config):
    """Give the runs that the tests start the default Ctrl-C.

    A suite started in the background by a non-interactive shell (``cmd &``)
    inherits SIGINT ignored, and so would every run it starts: the engine then
    rightly keeps ignoring Ctrl-C, as any program started with ``nohup`` or ``&``
    does, and the tests of what Ctrl-C does would fail.  A Python handler, unlike
    an ignored signal, is not inherited across ``exec``."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
