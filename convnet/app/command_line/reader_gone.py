"""Standard output and error whose reader may go away (``python convnet.py ... | head -1``,
or ``2>&1 | head -1``).

A command's lines are a report of its work, not the work: once the reader has gone,
the lines stop and the work goes on, so that a training run still trains and saves its
checkpoint, ``--auto-place`` still writes its config and ``--compare`` its table and
picture, and the command ends with the status of its work.  (Ending at the first line
that could not be printed, as a filter would, left a run with exit status 0 that had
trained nothing.)
"""

from __future__ import annotations

import contextlib
import io
import os
import sys


class ReaderGoneStream(io.TextIOBase):
    """``target`` (the process's stdout or stderr) until a write or flush finds its reader gone,
    then nothing: the file descriptor is pointed at the null device, so that the
    interpreter's own last flush finds no broken pipe either."""

    def __init__(self, target):
        self._target = target
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._target.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._target.flush()
            except BrokenPipeError:
                self._gone()

    def isatty(self) -> bool:
        return self._target.isatty()

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self):
        return self._target.encoding

    def _gone(self) -> None:
        self.reader_gone = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._target.fileno())
            os.close(null)
        except (OSError, ValueError, io.UnsupportedOperation):
            pass  # not a file descriptor (a test's capture): nothing flushes it later


@contextlib.contextmanager
def lines_stop_work_goes_on():
    """``sys.stdout`` and ``sys.stderr`` as :class:`ReaderGoneStream` for the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ReaderGoneStream(saved[0]), ReaderGoneStream(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
