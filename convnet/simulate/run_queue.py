"""How much of a profiled block a thread really ran: the rest, other work on the machine took.

A profile on a shared machine measures the machine's load as much as the net: with two
busy processes on two cores the profile's thread gets about two thirds of a core, and
every operation it times is half as long again.  Linux counts, per thread, the time it
ran on a core and the time it waited on a run queue, runnable but with every core
taken by something else (``/proc/self/task/TID/schedstat``: nanoseconds run,
nanoseconds waited, time slices).  A block's *share* is run / (run + waited): the
fraction of the time it could run that it did.  Scaling the block's timings by its
share reads them at the machine's own speed, whatever the load beside it.

A thread asleep (on a queue, a lock, the interpreter lock held by another worker) is
not runnable, so that time is neither run nor waited: the waits the engine causes
itself stay in the profile, only what other processes took is taken out.  Where the
counts cannot be read (not Linux, a kernel without them), the share is 1: the timings
stay as measured.

A block run on one thread, task after task (the profile's steps on one device), is read
more closely: the executor reads the thread's wait before and after each task
(:func:`waited_seconds`, given to it as ``core_waits``), and each task's time is taken
less its own wait.  A block's share is an average over its steps, the warm-up step
and the gaps between tasks included; where the waits fall unevenly, scaling every task
by it misreads them: the CIFAR-10 net's one-device step, profiled beside two busy
processes at a share of 0.63-0.72, read 155-180 ms, against 190-197 ms on the idle
machine minutes apart.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

#: The least share a block is given: a thread that ran less than this of its runnable
#: time (a machine many times oversubscribed) is not scaled further, so that one odd
#: reading cannot shrink a profile to nothing.
LEAST_SHARE = 0.2


@dataclass(frozen=True)
class RunCounts:
    """A thread's seconds on a core and waiting for one, since it started."""

    ran: float
    waited: float


def _counts_path(native_id: int) -> str:
    return f"/proc/self/task/{native_id}/schedstat"


def _parsed(text) -> RunCounts:
    """The counts in a schedstat file's text (nanoseconds run, waited, time slices)."""
    ran, waited = text.split()[:2]
    return RunCounts(int(ran) / 1e9, int(waited) / 1e9)


def read_counts(native_id: int | None = None) -> RunCounts | None:
    """The counts of the thread ``native_id`` (default: the calling thread), or None
    where they cannot be read."""
    tid = threading.get_native_id() if native_id is None else native_id
    try:
        with open(_counts_path(tid)) as f:
            return _parsed(f.read())
    except (OSError, ValueError):
        return None


def share(before: RunCounts | None, after: RunCounts | None) -> float:
    """The share of its runnable time a thread ran between two readings (1 when either
    is missing or it was never runnable)."""
    if before is None or after is None:
        return 1.0
    ran, waited = after.ran - before.ran, after.waited - before.waited
    if ran <= 0 or waited <= 0:
        return 1.0
    return max(ran / (ran + waited), LEAST_SHARE)


class _CountsFile:
    """This thread's counts file, kept open (a read is then 1-2 us, against 12 us to open
    it each time: a profile reads it twice per operation); closed with the thread."""

    def __init__(self):
        self.fd = None
        self.fd = os.open(_counts_path(threading.get_native_id()), os.O_RDONLY)

    def __del__(self):
        if self.fd is not None:
            os.close(self.fd)


_this_thread = threading.local()


def waited_seconds() -> float:
    """The seconds the calling thread has waited for a core, runnable, since it started
    (0 where that cannot be read).  Exact at any moment the thread itself reads it: a
    wait is counted when it ends, and the thread reading runs."""
    counts = getattr(_this_thread, "counts", None)
    if counts is None:
        try:
            counts = _CountsFile()
        except OSError:
            counts = False  # not readable here: not tried again on this thread
        _this_thread.counts = counts
    if not counts:
        return 0.0
    try:
        return _parsed(os.pread(counts.fd, 64, 0)).waited
    except (OSError, ValueError, IndexError):
        return 0.0


class Shares:
    """The shares of several threads over one block: ``with Shares(ids) as block: ...``,
    then ``block.shares`` (one per thread id, in order) and ``block.cores_busy``: the
    seconds the threads ran, together, over the block's wall time (how many cores they
    kept busy at once on average; None where the counts cannot be read).  The counts
    of a thread on a core lag behind until it next leaves it, so read them where the
    threads sleep, between steps, not inside one."""

    def __init__(self, native_ids: list[int | None]):
        self._ids = list(native_ids)
        self._before: list[RunCounts | None] = []
        self._started = 0.0
        self.shares: list[float] = [1.0] * len(self._ids)
        self.cores_busy: float | None = None

    def __enter__(self) -> Shares:
        self._before = [read_counts(tid) for tid in self._ids]
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        wall = time.perf_counter() - self._started
        after = [read_counts(tid) for tid in self._ids]
        self.shares = [share(b, a) for b, a in zip(self._before, after)]
        pairs = list(zip(self._before, after))
        if wall > 0 and all(b is not None and a is not None for b, a in pairs):
            self.cores_busy = sum(a.ran - b.ran for b, a in pairs) / wall
