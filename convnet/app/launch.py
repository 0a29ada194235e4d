"""Running the command line as one process of a multi-process (MPI) run.

``mpiexec -n 2 python convnet.py --gpu 0,1 ...`` starts two processes that
train one plan over 2 x 2 logical devices: logical device ``i`` lives on rank
``i // len(--gpu)`` and uses ``--gpu[i % len(--gpu)]`` of that rank's
machine (see :mod:`convnet.runtime.processes.cluster`).  Without a launcher nothing
changes and MPI is never imported.

What each rank does: all ranks read the config, the data and (with
``--load-file``) the checkpoint themselves, so these must be on every
machine; rank 0 alone prints, writes the log and the checkpoint (the others
send it their share of the state first) and writes features.  The other
ranks print nothing but their errors and the line of a stop signal.  An error on any
rank is printed as ``error: rank N: ...`` and ends every process of the run
(MPI_Abort), so no rank waits forever for one that is gone.
"""

from __future__ import annotations

import io
import os
import sys
import time
import traceback

from convnet.errors import ConvnetError, PlanError, UsageError
from convnet.plan.planner import make_plan
from convnet.plan.schedules import DEFAULT_SCHEDULE
from convnet.runtime.processes.cluster import Cluster, connect
from convnet.runtime.processes.communicator import DEFAULT_WAIT_LIMIT, Communicator
from convnet.stop_signals import STOP_EXITS

_STOP_LINES = frozenset(line for _, line in STOP_EXITS.values())
_STOP_CODES = frozenset(code for code, _ in STOP_EXITS.values())

#: How long a rank other than 0 that a signal stopped waits before ending every process:
#: a Ctrl-C in a terminal (or a scheduler's SIGTERM) reaches every rank, and rank 0 then
#: says which checkpoint survived and draws log.png before it ends the run itself; a
#: signal to that rank alone ends the run this much later.
STOP_GRACE_SECONDS = 10.0

_processes: tuple[Communicator, tuple[str, ...]] | None = None


def processes(wait_limit: float | None = DEFAULT_WAIT_LIMIT) -> tuple[Communicator,
                                                                      tuple[str, ...]]:
    """This run's communicator and host names (connected once per process, the first
    call's ``wait_limit`` bounding MPI's start-up)."""
    global _processes
    if _processes is None:
        _processes = connect(wait_limit)
    return _processes


def cluster_for(gpus) -> Cluster:
    """The run's processes, each with the devices of ``--gpu``."""
    comm, hosts = processes()
    return Cluster(comm, len(tuple(gpus)), hosts)


def logical_gpus(gpus) -> tuple[int, ...]:
    """The physical device of every logical device of the run (``--gpu`` once per rank)."""
    return tuple(gpus) * process_count()


def plan_across_ranks(net, gpus, minibatch: int, micro_batches: int = 1,
                      schedule: str = DEFAULT_SCHEDULE):
    """The plan over every rank's devices; an error if a rank would have nothing to do."""
    cluster = cluster_for(gpus)
    if cluster.size == 1:
        return make_plan(net, gpus, minibatch, micro_batches, schedule)
    layout = (f"{cluster.size} processes x --gpu {','.join(map(str, gpus))} give "
              f"{cluster.num_devices} logical devices")
    try:
        plan = make_plan(net, logical_gpus(gpus), minibatch, micro_batches, schedule)
    except PlanError as error:
        error.message = f"{error.message} ({layout})"
        raise
    used = plan.used_devices
    idle = [r for r in range(cluster.size)
            if not any(cluster.rank_of(d) == r for d in used)]
    if idle:
        raise PlanError(f"rank(s) {', '.join(map(str, idle))} would have no work: the config "
                        f"uses logical devices {', '.join(map(str, used))}, and {layout}; "
                        f"start fewer processes or list fewer devices in --gpu")
    return plan


def process_count() -> int:
    """How many processes the run has (1 without an MPI launcher)."""
    return processes()[0].size


def is_root() -> bool:
    """True in the process that prints and writes files (the only one, or rank 0)."""
    return processes()[0].rank == 0


def require_one_process(what: str) -> None:
    if process_count() > 1:
        raise UsageError(f"{what} runs in one process; start it without mpiexec")


class _RankStderr(io.TextIOBase):
    """Standard error of one rank: ``error: ...`` lines become ``error: rank N: ...``;
    with ``errors_only`` (ranks other than 0) every other line is dropped, except the
    line of a stop signal (``rank N: terminated``), so a rank stopped on its own says so.

    Text is passed on a whole line at a time (or at a flush, for a progress bar), so
    that the lines several ranks print at once cannot interleave mid-line."""

    def __init__(self, target, rank: int, errors_only: bool):
        self._target = target
        self._rank = rank
        self._errors_only = errors_only
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        kept = [line for line in map(self._shown, lines) if line is not None]
        if kept:
            self._target.write("".join(line + "\n" for line in kept))
            self._target.flush()
        return len(text)

    def _shown(self, line: str) -> str | None:
        """The line as this rank shows it, or None where it stays quiet."""
        if line.startswith("error: "):
            return f"error: rank {self._rank}: {line[len('error: '):]}"
        if not self._errors_only:
            return line
        if line in _STOP_LINES:
            return f"rank {self._rank}: {line}"
        return None

    def flush(self) -> None:
        if self._pending and not self._errors_only:  # a progress bar redrawn in place
            self._target.write(self._pending)
            self._pending = ""
        self._target.flush()

    def isatty(self) -> bool:
        return self._target.isatty()


def run_as_rank(main, argv, wait_limit: float | None = DEFAULT_WAIT_LIMIT) -> int:
    """``main(argv)`` as this process's part of the run; returns its exit code.

    In a multi-process run a non-zero code (or an unexpected exception) ends
    every process of the run with that code.  ``wait_limit`` (``--rank-timeout``)
    bounds MPI's start-up, before the command line is parsed.
    """
    try:
        comm, _ = processes(wait_limit)
    except ConvnetError as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return error.exit_code
    if comm.size == 1:
        return main(argv)
    stdout, stderr = sys.stdout, sys.stderr
    sys.stderr = rank_stderr = _RankStderr(stderr, comm.rank, errors_only=comm.rank != 0)
    if comm.rank != 0:
        sys.stdout = open(os.devnull, "w")
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException as error:  # noqa: BLE001 - a bug: say where, then end the run
        print(f"error: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        traceback.print_exc(file=stderr)
        code = 1
    finally:
        rank_stderr.flush()
        sys.stdout, sys.stderr = stdout, stderr
    if code:
        if comm.rank != 0 and code in _STOP_CODES:
            time.sleep(STOP_GRACE_SECONDS)
        comm.abort(code)
    return code


__all__ = ["cluster_for", "is_root", "logical_gpus", "plan_across_ranks", "process_count",
           "processes", "require_one_process", "run_as_rank"]
