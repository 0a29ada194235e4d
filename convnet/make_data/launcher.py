"""Where make-data starts: ``python -m convnet.make_data`` and the installed
``convnet-make-data`` script.

The handlers that turn Ctrl-C and SIGTERM into a clean exit (130, 143) go in
before anything heavy is imported (:mod:`convnet.stop_signals`), so a signal during
start-up never shows a traceback, whichever way make-data was started.
"""

from __future__ import annotations


def main() -> int:
    from convnet.stop_signals import exit_cleanly_on_early_signals

    exit_cleanly_on_early_signals()
    from convnet.make_data.cli import main as run_command_line

    return run_command_line()
