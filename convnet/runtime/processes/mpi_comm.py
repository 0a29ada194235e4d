"""MPI through mpi4py: the :class:`~convnet.runtime.processes.communicator.Communicator` of a multi-process run.

Several worker threads of one process send and receive at the same time, so
MPI must run at thread level ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it by
default; an MPI library that grants less is refused here rather than
corrupting messages later).  Arrays travel as raw float32 buffers, the async
courier's messages as raw bytes, and the collectives' small objects pickled.

*Bounded waits.*  Every wait on another rank (a receive, the sends of a step,
a collective, duplicating the communicator) is a non-blocking request tested
with a growing pause between tests (:func:`await_requests`), never a blocking
call: a rank that is stopped (SIGSTOP), hung or gone would otherwise hold its
peers forever, and MPICH's blocking calls spin at 100% CPU while they wait.
After :attr:`wait_limit` seconds the wait raises a
:class:`~convnet.errors.RankError` naming the ranks waited on and what for,
which ends the run (``MPI_Abort``).  An MPI error during a wait (MPICH's
``process_vm_readv failed`` when a peer was killed) becomes a ``RankError``
naming the peers too, instead of a traceback.  Importing this module
initialises MPI.
"""

from __future__ import annotations

import pickle
import sys
import time
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI

from convnet.errors import DeviceError, RankError
from convnet.runtime.processes.communicator import (DEFAULT_WAIT_LIMIT, Communicator,
                                                    WaitBound, ranks_text)


ABORT_PAUSE_SECONDS = 0.2  # before MPI_Abort, for the launcher to forward the last output
_SPINS = 100  # tests before the first pause: a transfer in flight often lands in them
_FIRST_PAUSE, _LONGEST_PAUSE = 20e-6, 1e-3  # seconds; the pause grows by half each time


def await_requests(requests: list, bound: WaitBound) -> None:
    """Wait until every MPI request of ``requests`` is done, testing them with pauses
    that grow from 20 µs to 1 ms (a late message costs at most half the time already
    waited, or 1 ms, and a long wait almost no CPU); ``bound`` ends a wait that lasts
    too long with a :class:`RankError`."""
    tries, pause = 0, _FIRST_PAUSE
    while not MPI.Request.Testall(requests):
        tries += 1
        if tries <= _SPINS:
            continue
        bound.check()
        time.sleep(pause)
        pause = min(pause * 1.5, _LONGEST_PAUSE)


@contextmanager
def peer_failures(peers, what: str):
    """An MPI error inside the block (a peer that died mid-transfer) as a RankError."""
    try:
        yield
    except MPI.Exception as error:
        lines = [line.strip() for line in error.Get_error_string().splitlines() if line.strip()]
        detail = lines[-1] if lines else f"MPI error class {error.Get_error_class()}"
        raise RankError(f"lost {ranks_text(peers)} ({what}): the process died or was "
                        f"killed (MPI: {detail})") from None


class MpiCommunicator(Communicator):
    """``MPI.COMM_WORLD`` (every process the launcher started), or ``comm``, a duplicate
    of it (:meth:`duplicate`)."""

    def __init__(self, comm=None, wait_limit: float | None = DEFAULT_WAIT_LIMIT):
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise DeviceError("the MPI library does not support MPI_THREAD_MULTIPLE, which "
                              "the device worker threads need (use the mpich wheel of the "
                              "'mpi' extra)")
        self._comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()
        self.tag_limit = int(self._comm.Get_attr(MPI.TAG_UB)) + 1
        self.wait_limit = wait_limit

    @property
    def _others(self) -> list[int]:
        return [r for r in range(self.size) if r != self.rank]

    def _await(self, requests: list, peers, what: str) -> None:
        with peer_failures(peers, what):
            await_requests(requests, self.bound(what, peers))

    def isend(self, array, dest, tag):
        array = np.ascontiguousarray(array, dtype=np.float32)
        with peer_failures([dest], "sending"):
            return self._comm.Isend([array, MPI.FLOAT], dest=dest, tag=tag), array, dest

    def recv(self, out, source, tag, what="a transfer"):
        with peer_failures([source], what):
            request = self._comm.Irecv([out, MPI.FLOAT], source=source, tag=tag)
        self._await([request], [source], what)

    def wait_all(self, requests):
        self._await([request for request, _, _ in requests],
                    sorted({dest for _, _, dest in requests}), "the step's sends")

    def isend_bytes(self, message, dest, tag):
        with peer_failures([dest], "sending"):
            return self._comm.Isend([message, MPI.BYTE], dest=dest, tag=tag)

    def irecv_bytes(self, out, source, tag):
        with peer_failures([source], "receiving"):
            return self._comm.Irecv([out, MPI.BYTE], source=source, tag=tag)

    def test(self, request):
        with peer_failures(self._others, "a message"):
            return bool(request.Test())

    def cancel(self, request):
        """Give up a pending receive.  One that is done has nothing to give up: a test
        that completed it, or raised on it (a peer killed mid-transfer), left
        ``MPI_REQUEST_NULL``, which ``MPI_Cancel`` refuses; and the peer of one that
        fails now is gone, which the run is already ending on."""
        if not request:  # MPI_REQUEST_NULL
            return
        try:
            request.Cancel()
            request.Wait()
        except MPI.Exception:
            pass

    def allgather(self, obj, what="a collective"):
        data = _pickled(obj)
        sizes = np.empty(self.size, np.int64)
        self._await([self._comm.Iallgather([np.array([data.size], np.int64), MPI.INT64_T],
                                           [sizes, MPI.INT64_T])], self._others, what)
        counts, displs = _layout(sizes)
        out = np.empty(int(sizes.sum()), np.uint8)
        self._await([self._comm.Iallgatherv([data, MPI.BYTE], [out, (counts, displs), MPI.BYTE])],
                    self._others, what)
        return [pickle.loads(out[d:d + n]) for n, d in zip(counts, displs)]

    def gather(self, obj, root=0, what="a collective"):
        data = _pickled(obj)
        peers = self._others if self.rank == root else [root]
        sizes = np.empty(self.size, np.int64) if self.rank == root else None
        self._await([self._comm.Igather([np.array([data.size], np.int64), MPI.INT64_T],
                                        [sizes, MPI.INT64_T] if sizes is not None else None,
                                        root=root)], peers, what)
        if sizes is None:
            self._await([self._comm.Igatherv([data, MPI.BYTE], None, root=root)], peers, what)
            return None
        counts, displs = _layout(sizes)
        out = np.empty(int(sizes.sum()), np.uint8)
        self._await([self._comm.Igatherv([data, MPI.BYTE], [out, (counts, displs), MPI.BYTE],
                                         root=root)], peers, what)
        return [pickle.loads(out[d:d + n]) for n, d in zip(counts, displs)]

    def duplicate(self):
        # Never freed: MPI_Comm_free is collective, which a rank ending on an error cannot
        # take part in; a run makes one or two, and MPI_Finalize releases them.
        with peer_failures(self._others, "duplicating the communicator"):
            comm, request = self._comm.Idup()
        self._await([request], self._others, "duplicating the communicator")
        return MpiCommunicator(comm, self.wait_limit)

    def abort(self, code):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        # The launcher forwards each rank's output through its own proxy, and Abort
        # kills the proxies at once: a rank's last lines, flushed just now, were lost
        # once under a loaded test run (an empty stderr from a failed run).  A short
        # pause lets them through before the run ends.
        time.sleep(ABORT_PAUSE_SECONDS)
        self._comm.Abort(code)
        raise SystemExit(code)  # Abort does not return; this keeps the type checker honest


def _pickled(obj) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)


def _layout(sizes: np.ndarray) -> tuple[list[int], list[int]]:
    """Counts and displacements of every rank's part of a gathered byte buffer."""
    counts = [int(n) for n in sizes]
    return counts, [int(d) for d in np.concatenate([[0], np.cumsum(sizes)[:-1]])]


__all__ = ["MpiCommunicator", "await_requests", "peer_failures"]
