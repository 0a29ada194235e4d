"""Set-up for the whole test session."""

from __future__ import annotations

import itertools
import signal

import pytest

_STORES = itertools.count()


def pytest_configure(config):
    """Give the runs that the tests start the default Ctrl-C.

    A suite started in the background by a non-interactive shell (``cmd &``)
    inherits SIGINT ignored, and so would every run it starts: the engine then
    rightly keeps ignoring Ctrl-C, as any program started with ``nohup`` or ``&``
    does, and the tests of what Ctrl-C does would fail.  A Python handler, unlike
    an ignored signal, is not inherited across ``exec``."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _own_side_by_side_store(tmp_path_factory, monkeypatch):
    """Give every test, and the runs it starts, a store of ``--simulate``'s side-by-side
    figures of its own (convnet.app.prediction.side_by_side), made only if a run writes
    it: a test's prediction must not rest on what another test's profile measured, nor
    the suite write into the user's cache."""
    base = tmp_path_factory.getbasetemp() / "side-by-side-stores"
    monkeypatch.setenv("CONVNET_CACHE_DIR", str(base / str(next(_STORES))))
