"""MPI through mpi4py: the :class:`~convnet.runtime.processes.communicator.Communicator` of a multi-process run.

Several worker threads of one process send and receive at the same time, so
MPI must run at thread level ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it by
default; an MPI library that grants less is refused here rather than
corrupting messages later).  Arrays travel as raw float32 buffers
(``Isend``/``Recv``, no pickling), the async courier's messages as raw
bytes (``Isend``/``Irecv`` polled with ``Test``); the collectives on small objects use
mpi4py's pickling ones.  Importing this module initialises MPI.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

from convnet.errors import DeviceError
from convnet.runtime.processes.communicator import Communicator


ABORT_PAUSE_SECONDS = 0.2  # before MPI_Abort, for the launcher to forward the last output


class MpiCommunicator(Communicator):
    """``MPI.COMM_WORLD`` (every process the launcher started), or ``comm``, a duplicate
    of it (:meth:`duplicate`)."""

    def __init__(self, comm=None):
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise DeviceError("the MPI library does not support MPI_THREAD_MULTIPLE, which "
                              "the device worker threads need (use the mpich wheel of the "
                              "'mpi' extra)")
        self._comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()
        self.tag_limit = int(self._comm.Get_attr(MPI.TAG_UB)) + 1

    def isend(self, array, dest, tag):
        array = np.ascontiguousarray(array, dtype=np.float32)
        return self._comm.Isend([array, MPI.FLOAT], dest=dest, tag=tag), array

    def recv(self, out, source, tag):
        self._comm.Recv([out, MPI.FLOAT], source=source, tag=tag)

    def wait_all(self, requests):
        MPI.Request.Waitall([request for request, _ in requests])

    def isend_bytes(self, message, dest, tag):
        return self._comm.Isend([message, MPI.BYTE], dest=dest, tag=tag)

    def irecv_bytes(self, out, source, tag):
        return self._comm.Irecv([out, MPI.BYTE], source=source, tag=tag)

    def test(self, request):
        return bool(request.Test())

    def cancel(self, request):
        request.Cancel()
        request.Wait()

    def allgather(self, obj):
        return self._comm.allgather(obj)

    def gather(self, obj, root=0):
        return self._comm.gather(obj, root=root)

    def duplicate(self):
        # Never freed: MPI_Comm_free is collective, which a rank ending on an error cannot
        # take part in; a run makes one or two, and MPI_Finalize releases them.
        return MpiCommunicator(self._comm.Dup())

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


__all__ = ["MpiCommunicator"]
