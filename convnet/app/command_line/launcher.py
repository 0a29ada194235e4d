"""Where the program starts: ``python convnet.py`` and the installed ``convnet`` script.

The signal handlers that turn Ctrl-C and SIGTERM into a clean exit (130, 143)
go in before anything heavy is imported, so a signal during start-up never
shows a traceback, whichever way the program was started.
"""

from __future__ import annotations


def main() -> int:
    from convnet.stop_signals import exit_cleanly_on_early_signals

    exit_cleanly_on_early_signals()
    from convnet.app.command_line.main import main as run_command_line

    return run_command_line()
