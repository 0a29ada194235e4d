"""Starting MPI with a bound on how long it waits for the other processes.

``MPI_Init`` returns only once every process of the launch has called it, and
it waits inside MPI: a process stopped (SIGSTOP) or hung before it would hold
every other one forever, spinning.  mpi4py initialises MPI when it is imported,
holding Python's global lock, so no Python thread could even notice.  So MPI is
started here through ``ctypes`` instead (which lets go of the lock during the
call), with a timer that ends this process with one line when the wait passes
its bound; the launcher then ends the others.  Where the MPI library cannot be
found among the loaded files (not Linux), mpi4py starts MPI as usual, unbounded.
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from pathlib import Path

from convnet.errors import DeviceError

_LIBRARY = re.compile(r"libmpi(\.so|\.\d|-)")  # libmpi.so.12 (MPICH), libmpi.so.40 (Open MPI)


def start_mpi(wait_limit: float | None) -> None:
    """Initialise MPI at thread level MULTIPLE, ending this process with one line on
    stderr if that waits more than ``wait_limit`` seconds (None: no bound)."""
    import mpi4py

    mpi4py.rc.initialize = False  # this module does it (read when MPI is first imported)
    mpi4py.rc.finalize = True
    from mpi4py import MPI

    if MPI.Is_initialized():
        return
    timer = threading.Timer(wait_limit, _give_up, (wait_limit,)) if wait_limit else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        library = _loaded_mpi_library()
        if library is None:
            MPI.Init_thread(MPI.THREAD_MULTIPLE)
        else:
            provided = ctypes.c_int()
            code = ctypes.CDLL(library).MPI_Init_thread(
                None, None, ctypes.c_int(MPI.THREAD_MULTIPLE), ctypes.byref(provided))
            if code != 0:
                raise DeviceError(f"MPI could not be started (MPI_Init_thread returned {code})")
    finally:
        if timer is not None:
            timer.cancel()
    for comm in (MPI.COMM_SELF, MPI.COMM_WORLD):  # errors as exceptions, as mpi4py sets them
        comm.Set_errhandler(MPI.ERRORS_RETURN)


def _loaded_mpi_library() -> str | None:
    """The path of the MPI library mpi4py loaded (from /proc/self/maps), or None."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    for line in maps:
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if path.startswith("/") and _LIBRARY.match(os.path.basename(path)):
            return path
    return None


def _give_up(limit: float) -> None:
    """(On the timer's thread, while MPI_Init waits.)"""
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "?"))
    os.write(2, f"error: rank {rank}: waited {limit:g} s for the other processes to start "
                f"MPI (MPI_Init) without an answer: one is stopped, hung or far slower "
                f"(--rank-timeout SECONDS sets the bound)\n".encode())
    os._exit(1)


__all__ = ["start_mpi"]
