"""User-facing error types.

Every problem a user can cause (a bad config, a plan that breaks a rule, missing
data, an unusable checkpoint, a NaN cost) raises a subclass of
:class:`ConvnetError`.  The command line prints ``str(error)`` on one line and
exits non-zero; anything else escaping is a bug in the engine.
"""

from __future__ import annotations

import warnings


class ConvnetError(Exception):
    """Base class of all errors that are the user's to fix."""

    exit_code = 1


class UsageError(ConvnetError):
    """A bad command line: unknown option, bad value, options that do not go together."""

    exit_code = 2


class ConfigError(ConvnetError):
    """A layer-def or layer-params file that cannot be used.

    Carries where the problem is (file, section, key) so the message always
    points at the line to edit, plus an optional "did you mean" suggestion.
    """

    exit_code = 2

    def __init__(self, message: str, file: str | None = None, section: str | None = None,
                 key: str | None = None, suggestion: str | None = None):
        self.message = message
        self.file = file
        self.section = section
        self.key = key
        self.suggestion = suggestion
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.file:
            where.append(str(self.file))
        if self.section is not None:
            where.append(f"[{_cut(self.section)}]")
        if self.key is not None:
            where.append(f"key '{_cut(self.key)}'")
        text = (": ".join([" ".join(where), self.message]) if where else self.message)
        if self.suggestion:
            text += f" (did you mean '{self.suggestion}'?)"
        return text


#: Longest section or key name an error message shows; files may hold megabyte-long
#: names, and the error must stay one readable line.
NAME_LIMIT = 60


def _cut(name: str) -> str:
    return name if len(name) <= NAME_LIMIT else name[:NAME_LIMIT] + "..."


class OneLineWarning(UserWarning):
    """A warning for the user of the program: issued through :mod:`warnings`, so that
    library users can filter or record it; on the command line it is one
    ``warning: ...`` line on stderr (see :func:`_one_line`), never a traceback or a
    quoted source line."""


class ConfigWarning(OneLineWarning):
    """A config that loads, but not quite as written (a key given twice, say)."""


def _one_line(message, category, filename, lineno, line=None) -> str:
    if issubclass(category, OneLineWarning):
        return f"warning: {message}\n"
    return _format_other(message, category, filename, lineno, line)


_format_other, warnings.formatwarning = warnings.formatwarning, _one_line


class PlanError(ConfigError):
    """A config that parses but breaks a placement or update rule of the planner (docs/DESIGN.md)."""


class DataError(ConvnetError):
    """Missing, unreadable or mis-shaped training data."""


class CheckpointError(ConvnetError):
    """A checkpoint that cannot be written or read back."""


class TrainingError(ConvnetError):
    """Training cannot go on, e.g. a NaN cost or activation.

    ``summary`` is the message in a few words ("diverged at epoch 2, batch 3"), for
    places with room for no more, such as a ``--compare`` table cell; it defaults to
    the whole message.
    """

    def __init__(self, message: str, summary: str | None = None):
        super().__init__(message)
        self.summary = summary or message


class NonFiniteDataError(TrainingError):
    """The minibatch itself holds NaN or inf values: the data, not the training, is bad."""


class DivergedError(TrainingError):
    """A layer produced NaN or inf values (or a non-finite gradient): training diverged."""


class DeviceError(ConvnetError):
    """A logical device that cannot be used (bad index, missing backend)."""


class RankError(ConvnetError):
    """Another process of a multi-process run is gone, stopped or too slow to answer."""


class OutOfMemoryError(DeviceError):
    """An allocation failed: the machine, or a limit on this process (``ulimit -v``, a
    cgroup's ``memory.max``), had less memory than the run needed."""

    @classmethod
    def from_memory_error(cls, error: MemoryError) -> "OutOfMemoryError":
        """The one line for a ``MemoryError`` from anywhere in a run (numpy's
        ``Unable to allocate 1.2 GiB for an array with shape ...``, CuPy's
        out-of-memory error, a worker or loader thread's, which are re-raised in the
        main thread)."""
        detail = " ".join(str(error).split()) or "an allocation failed"
        return cls(f"out of memory: {detail}; use a smaller --mini or a smaller net "
                   "(--print-plan shows the plan's memory estimate)")
