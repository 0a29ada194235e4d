#!/usr/bin/env python3
"""Command-line launcher: ``python convnet.py [options]``.

This file shares its name with the ``convnet`` package; when Python imports
``convnet`` the package wins, so this launcher only calls the package's entry
point (also installed as the ``convnet`` console script).

Its first statement holds Ctrl-C and SIGTERM back (blocks them) until the
entry point has put its handlers in place and lets them through: a signal
while the package is being imported is then delivered to those handlers (a
clean exit, 130 or 143) instead of raising inside an import (a traceback) or
ending the process by the signal itself.  A Ctrl-C that the interpreter had
caught just before, but not yet raised, raises at the first check after that
statement, and ends the run the same way (see convnet/stop_signals.py).
"""

if __name__ == "__main__":
    # _signal, the C module under signal.py, is built in and already loaded: importing
    # signal.py would first import enum (milliseconds in which a Ctrl-C is a traceback).
    import _signal
    import sys

    try:
        if hasattr(_signal, "pthread_sigmask"):  # POSIX only
            _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT, _signal.SIGTERM})
        from convnet.app.command_line.launcher import main

        code = main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
