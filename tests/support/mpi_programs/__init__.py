"""Programs that tests start under ``mpiexec``, each run as one process of the run.

They import ``convnet`` and ``tests.support`` from the repository root, which
:func:`tests.support.mpi.env` puts on the child processes' ``PYTHONPATH``."""

from __future__ import annotations

import sys

from convnet.errors import ConvnetError


def as_command_line(train, argv: list[str]) -> int:
    """``train(argv)`` as the command line runs it: an engine error is one line on
    stderr and its exit code."""
    try:
        return train(argv)
    except ConvnetError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
