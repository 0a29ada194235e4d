"""Ctrl-C and SIGTERM in the first milliseconds of ``python convnet.py`` and of
``python -m convnet.make_data``: once the program's first statement has run, always the
one-line exit (130, 143), never a traceback.

The program starts at the first statement of its launcher (``convnet.py``,
``convnet/make_data/__main__.py``).  What comes before it is the interpreter's: its C
start-up, ``site`` running the environment's ``.pth`` files (about 10 ms for an
editable install's import finder), setting up ``__main__`` (for ``-m``, ``runpy``
importing the packages above the module: ``convnet/__init__.py`` and what it imports,
``convnet/make_data/__init__.py``), and the check for signals at the entry of each
module (reported as line 0).  A signal there ends the process by the signal
itself, or a Ctrl-C ends it with the interpreter's ``KeyboardInterrupt`` (a traceback
and status -2, or "Fatal Python error" and status 1 while ``site`` runs).  These runs
tell the interpreter's outcomes from the program's by what the interpreter printed
(one of them a Ctrl-C it prints and drops, after which the program runs as usual),
and assert only what the program controls, so they cannot fail by chance: one of
those outcomes, or the program's exit.  CPython also prints a Ctrl-C that lands while
it checks whether the script is an import path entry and then runs the script anyway;
the program ends such a run in its first statements
(:func:`test_an_interrupt_the_interpreter_printed_and_went_on_from_ends_the_program`).
(The interpreter starts with its ``site`` as a user's does: an editable install finds
``convnet.kernels`` and ``convnet.layers`` only through the import finder its ``.pth``
file installs.)
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
from tests.support.image_trees import image_bytes

DELAYS_MS = (0, 5, 10, 20, 40, 80, 300)
REPEATS = 2
EXITS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}
FRAME = re.compile(r'^  File "([^"]*)", line (\d+)', re.MULTILINE)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Enough photos that make-data on two workers is still busy after 300 ms."""
    src = tmp_path_factory.mktemp("early") / "src"
    for k in range(120):
        (src / f"class{k % 2}").mkdir(parents=True, exist_ok=True)
        (src / f"class{k % 2}" / f"{k}.jpg").write_bytes(image_bytes(160, 120, k))
    return src


def _command(program: str, photos, out) -> list[str]:
    if program == "convnet.py":
        return [sys.executable, str(CONVNET), *DUMMY, "--epochs", "50"]
    return [sys.executable, "-m", "convnet.make_data", "--src-dir", str(photos), "--tgt-dir",
            str(out), "--size", "64", "--workers", "2", "--no-progress"]


def _interpreters(report: str) -> bool:
    """Whether ``report`` is the interpreter's account of an interrupt before the
    program's first statement: a ``KeyboardInterrupt`` (or Python's fatal start-up
    error) whose traceback has no frame in the program's statements (line 0 is a
    module's entry, before its first statement)."""
    return ("KeyboardInterrupt" in report or "Fatal Python error" in report) and not any(
        _in_the_program(path) and line != "0" for path, line in FRAME.findall(report))


# What ``python -m convnet.make_data`` imports before its ``__main__`` runs: a
# Ctrl-C in these statements comes before the program could hold signals back.
BEFORE_THE_LAUNCHER = {str(ROOT / "convnet" / name)
                       for name in ("__init__.py", "version.py", "make_data/__init__.py")}


def _discarded(report: str) -> bool:
    """Whether ``report`` is the interpreter's account of a Ctrl-C it dropped: one that
    landed in a callback of its import machinery (a module lock's weak reference) is
    printed as "Exception ignored in" and discarded, and the start goes on as if none
    had come (in about 1 of 50 make-data runs interrupted 20-60 ms after starting)."""
    return report.startswith("Exception ignored in") and _interpreters(report)


def _in_the_program(path: str) -> bool:
    """Whether a traceback frame is the project's code once the launcher has started,
    not the interpreter's (its environment may be a virtual environment inside the
    project's folder) nor the packages ``runpy`` imports before the launcher."""
    return (path.startswith(str(ROOT)) and path not in BEFORE_THE_LAUNCHER
            and not path.startswith((sys.prefix, sys.base_prefix)))


@pytest.mark.parametrize("program", ["convnet.py", "make-data"])
@pytest.mark.parametrize("signum", list(EXITS), ids=lambda s: signal.Signals(s).name)
def test_a_signal_at_any_early_moment_exits_cleanly(tmp_path, photos, program, signum):
    code, line = EXITS[signum]
    handled = 0
    for attempt, delay in enumerate(DELAYS_MS * REPEATS):
        out = tmp_path / f"out{attempt}"
        proc = subprocess.Popen(_command(program, photos, out), cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(delay / 1000)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        before_the_program = (proc.returncode == -signum and err == "") or (
            _interpreters(err) and not err.endswith(f"{line}\n"))
        if _discarded(err) and proc.returncode == 0:
            continue  # the interpreter dropped the Ctrl-C; the program ran as if none came
        if before_the_program:
            # nothing written (the earlier runs' targets aside)
            assert not out.exists() and not [p for p in tmp_path.iterdir()
                                             if not p.name.startswith("out")]
            continue
        # the program ran: its one line, after what the interpreter printed before it
        assert proc.returncode == code and err.endswith(f"{line}\n"), (delay, proc.returncode, err)
        assert err == f"{line}\n" or _interpreters(err[:-len(line) - 1]), (delay, err)
        handled += 1
    assert handled >= REPEATS  # the 300 ms runs at least reached the program's handlers


def test_an_interrupt_the_interpreter_printed_and_went_on_from_ends_the_program(tmp_path):
    """CPython prints a Ctrl-C that lands while it checks whether the script is an import
    path entry ("Failed checking if argv[0] is an import path entry", ``PyErr_Print``,
    which sets ``sys.last_value``) and then runs the script: the launcher's first call
    ends it as it would a moment later, instead of the whole run going on."""
    started = ("import runpy, sys\n"
               "sys.last_value = KeyboardInterrupt()\n"  # as PyErr_Print leaves it
               f"sys.argv = [{str(CONVNET)!r}, *{DUMMY!r}]\n"
               f"runpy.run_path({str(CONVNET)!r}, run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", started], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stderr, done.stdout) == (130, "interrupted\n", "")
