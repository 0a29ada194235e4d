"""``--tensorboard DIR``: every test's figures as TensorBoard event files, as the run goes.

Written with tensorboardX (the ``tensorboard`` extra), which writes TensorBoard's
event files with no TensorFlow or PyTorch: 90 KB of Python on numpy and protobuf, kept
up by its authors; the format (records of protobuf messages with CRC32C checksums)
is not one to write by hand.  Each run adds a new event file to DIR (named by time,
host, process and a random part, so never one already there, even for two runs that
start their files in the same second), so several runs in one DIR show side by side;
TensorBoard's own format is appended as the run goes, so it does not go through
:mod:`convnet.outputs`, which writes files whole.

The records are written on the training thread with tensorboardX's plain
``EventsWriter``, not its ``SummaryWriter``, whose writer thread and exit hook print
tracebacks when the disk fills and, once the thread has died, block the run on its
full queue.  The folder is checked before any training (``check_options``); a write
that fails later (a full disk) is said in one warning and ends the event files, not
the run: they are a view of the log, whose checkpoint is saved as ever.

The step of each point is the training step (minibatches trained, resumed runs
included), the scalars: ``cost/train``, ``cost/test``, ``error/train``,
``error/test`` (fractions), ``learning_rate`` and ``images_per_second``.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Callable

from convnet.errors import ConvnetError
from convnet.optional import require_tensorboard

#: The scalar of each column of a log row.
SCALARS = (("cost/train", "cost"), ("cost/test", "test_cost"), ("error/train", "error"),
           ("error/test", "test_error"), ("learning_rate", "learning_rate"),
           ("images_per_second", "inputs_per_sec"))


class EventFiles:
    """The run's TensorBoard writer into ``folder`` (None: nothing written), made at the
    first test, so that a run that fails before it leaves no event file; ``warn`` says
    in one line why no more events are written."""

    def __init__(self, folder: Path | None, warn: Callable[[str], None]):
        self._folder = folder
        self._warn = warn
        self._writer = None
        if folder is not None:
            require_tensorboard("--tensorboard")  # a missing package before any training

    def add(self, row: dict, step: int) -> None:
        """The figures of one log row (see :data:`SCALARS`) at training step ``step``."""
        if self._folder is None:
            return
        if self._writer is None:
            self._writer = self._open()
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        try:
            for tag, column in SCALARS:
                self._writer.write_event(Event(summary=scalar(tag, row[column]), step=step,
                                               wall_time=time.time()))
            self._writer.flush()
        except OSError as error:
            self._warn(f"--tensorboard: cannot write into {self._folder}: "
                       f"{error.strerror or error}; no more event files this run")
            self._folder = None
            self._close_quietly()

    def close(self) -> None:
        self._close_quietly()

    def _open(self):
        """A new event file in the folder (made if need be)."""
        from tensorboardX.event_file_writer import EventsWriter

        try:
            os.makedirs(self._folder, exist_ok=True)
            return EventsWriter(os.path.join(self._folder, "events"),
                                f".{os.getpid()}.{secrets.token_hex(4)}")
        except OSError as error:
            raise ConvnetError(f"--tensorboard: cannot write into {self._folder}: "
                               f"{error.strerror or error}") from None

    def _close_quietly(self) -> None:
        """Close the file; what it could not flush was said when the write failed."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except OSError:
                pass
