"""``--tensorboard DIR``: every test's figures as TensorBoard event files, as the run goes.

Written with tensorboardX (the ``tensorboard`` extra), which writes TensorBoard's
event files with no TensorFlow or PyTorch: 90 KB of Python on numpy and protobuf, kept
up by its authors; the format (records of protobuf messages with CRC32C checksums)
is not one to write by hand.  Each run adds a new event file to DIR, so several runs
in one DIR show side by side: tensorboardX names it by the second and the host and
opens it for writing from scratch, so the name also gets the process id and the count
of the process's runs, and a run that starts in the same second as another never
truncates its file.  TensorBoard's own format is appended as the run goes, so it does
not go through :mod:`convnet.outputs`, which writes files whole.

The step of each point is the training step (minibatches trained, resumed runs
included), the scalars: ``cost/train``, ``cost/test``, ``error/train``,
``error/test`` (fractions), ``learning_rate`` and ``images_per_second``.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from convnet.errors import ConvnetError
from convnet.optional import require_tensorboard

#: The scalar of each column of a log row.
SCALARS = (("cost/train", "cost"), ("cost/test", "test_cost"), ("error/train", "error"),
           ("error/test", "test_error"), ("learning_rate", "learning_rate"),
           ("images_per_second", "inputs_per_sec"))

_RUNS = itertools.count()  # the runs of this process that wrote event files


class EventFiles:
    """The run's TensorBoard writer into ``folder`` (None: nothing written), made at the
    first test, so that a run that fails before it leaves no event file."""

    def __init__(self, folder: Path | None):
        self._folder = folder
        self._writer = None
        if folder is not None:
            require_tensorboard("--tensorboard")  # a missing package before any training

    def add(self, row: dict, step: int) -> None:
        """The figures of one log row (see :data:`SCALARS`) at training step ``step``."""
        if self._folder is None:
            return
        if self._writer is None:
            try:
                self._writer = require_tensorboard("--tensorboard").SummaryWriter(
                    str(self._folder), filename_suffix=f".{os.getpid()}.{next(_RUNS)}")
            except OSError as error:
                raise ConvnetError(f"--tensorboard: cannot write into {self._folder}: "
                                   f"{error.strerror or error}") from None
        for tag, column in SCALARS:
            self._writer.add_scalar(tag, row[column], global_step=step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
