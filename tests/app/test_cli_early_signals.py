"""Ctrl-C and SIGTERM in the first milliseconds of ``python convnet.py``: once the
program's first statement has run, always the one-line exit (130, 143), never a traceback.

The program starts at the first statement of ``convnet.py``.  What comes before it is
the interpreter's: its C start-up, ``site`` running the environment's ``.pth`` files
(about 50 ms for an editable install's import finder), and the check for signals at
the very start of the module (reported as line 0).  A signal there ends the process by
the signal itself (a shell reports the same 130 or 143), or a Ctrl-C ends it with the
interpreter's ``KeyboardInterrupt``.  So these runs tell the interpreter's outcomes
from the program's by where the interrupt was raised.  (The interpreter starts with
its ``site`` as a user's does: an editable install finds ``convnet.kernels`` and
``convnet.layers`` only through the import finder its ``.pth`` file installs.)
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from tests.support import ROOT
from tests.support.cli import CONVNET, DUMMY

DELAYS_MS = (0, 5, 10, 20, 40, 80, 300)
REPEATS = 2
EXITS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}
FRAME = re.compile(r'^  File "([^"]*)", line (\d+)', re.MULTILINE)


def _start(cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CONVNET), *DUMMY, "--epochs", "50"],
                            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def _before_the_program(signum, returncode: int, err: str) -> bool:
    """Whether the process ended in the interpreter, before the program's first statement."""
    if returncode == -signum and err == "":  # the signal's default action
        return True
    if signum != signal.SIGINT or returncode not in (1, -signal.SIGINT):
        return False
    # a KeyboardInterrupt raised while no statement of the program had run: in the C
    # start-up (no frame, or a fatal error initialising the interpreter), in the frozen
    # import machinery or the standard library it runs (setting up ``__main__``), or
    # at line 0 of convnet.py (the module's entry)
    frames = FRAME.findall(err)
    return ("KeyboardInterrupt" in err or "Fatal Python error" in err) and not any(
        _in_the_program(path) and (path, line) != (str(CONVNET), "0")
        for path, line in frames)


def _in_the_program(path: str) -> bool:
    """Whether a traceback frame is the project's code, not the interpreter's (its
    environment may be a virtual environment inside the project's folder)."""
    return path.startswith(str(ROOT)) and not path.startswith((sys.prefix, sys.base_prefix))


@pytest.mark.parametrize("signum", list(EXITS), ids=lambda s: signal.Signals(s).name)
def test_a_signal_at_any_early_moment_exits_cleanly(tmp_path, signum):
    code, line = EXITS[signum]
    handled = 0
    for delay in DELAYS_MS * REPEATS:
        proc = _start(tmp_path)
        time.sleep(delay / 1000)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        if _before_the_program(signum, proc.returncode, err):
            assert not any(tmp_path.iterdir())  # nothing written
            continue
        assert (proc.returncode, err) == (code, f"{line}\n"), (delay, proc.returncode, err)
        handled += 1
    assert handled >= REPEATS  # the 300 ms runs at least reached the program's handlers
