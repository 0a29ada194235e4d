"""The processes of a run: which rank this is and how the logical devices are spread.

One training run may span several processes (``mpiexec -n 2 python
convnet.py ...``), on one machine or several.  Every process builds the same
plan over all logical devices of all processes; the devices are spread
*rank-major*: each process uses the ``--gpu`` list of its own machine, so
with ``k = len(--gpu)`` logical device ``i`` lives on rank ``i // k`` and
runs on physical device ``gpu[i % k]`` there.  A device of another rank is a
:class:`RemoteDevice`: the plan names it, but this process holds none of its
buffers and runs none of its work.

The ranks talk through a :class:`~convnet.runtime.processes.communicator.Communicator`;
:func:`connect` picks one from the environment: mpi4py is imported only when
a launcher such as ``mpiexec`` or ``srun`` started several processes, so a
plain run never needs MPI.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from convnet.errors import DeviceError
from convnet.runtime.processes.communicator import (DEFAULT_WAIT_LIMIT, Communicator,
                                                    LocalCommunicator)
from convnet.runtime.devices.backends import make_devices

# Environment variables a launcher sets to the number of processes it started:
# MPICH's hydra (and Slurm's srun with PMI-1/2), and Open MPI's mpirun.
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


def launched_size(environ=os.environ) -> int:
    """How many processes the launcher of this one started (1 without a launcher)."""
    for name in _SIZE_VARIABLES:
        value = environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


@dataclass
class Cluster:
    """This process's place in the run: its communicator and its share of the devices."""

    comm: Communicator
    devices_per_rank: int
    hosts: tuple[str, ...]  # the host name of every rank

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def size(self) -> int:
        return self.comm.size

    @property
    def num_devices(self) -> int:
        return self.size * self.devices_per_rank

    def rank_of(self, device: int) -> int:
        return device // self.devices_per_rank

    def is_local(self, device: int) -> bool:
        return self.rank_of(device) == self.rank

    @property
    def local_devices(self) -> range:
        first = self.rank * self.devices_per_rank
        return range(first, first + self.devices_per_rank)


def single_process(devices_per_rank: int) -> Cluster:
    """The cluster of a plain one-process run."""
    return Cluster(LocalCommunicator(), devices_per_rank, (socket.gethostname(),))


def connect(wait_limit: float | None = DEFAULT_WAIT_LIMIT) -> tuple[Communicator, tuple[str, ...]]:
    """The communicator of the processes this one was started with, and every rank's
    host name: this process alone, or every rank of an MPI launch.  No wait on another
    process lasts more than ``wait_limit`` seconds (None: no bound), MPI's start-up
    included."""
    if launched_size() == 1:
        return LocalCommunicator(), (socket.gethostname(),)
    try:
        from convnet.runtime.processes.mpi_start import start_mpi

        start_mpi(wait_limit)
        from convnet.runtime.processes.mpi_comm import MpiCommunicator
    except ImportError as error:
        raise DeviceError(f"this process was started by an MPI launcher with "
                          f"{launched_size()} processes, but mpi4py cannot be imported "
                          f"({error}); install the 'mpi' extra: pip install -e '.[mpi]'") from None
    comm = MpiCommunicator(wait_limit=wait_limit)
    return comm, tuple(comm.allgather(socket.gethostname(),
                                        what="starting up: the host names"))


class RemoteDevice:
    """Stand-in for a logical device of another rank: it has a place in the plan and
    nothing else (it holds no buffers; this process runs none of its work)."""

    kind = "remote"
    xp = None

    def __init__(self, index: int, physical: int, rank: int):
        self.index = index
        self.physical = physical
        self.rank = rank

    def __repr__(self) -> str:
        return f"remote:{self.index}@rank{self.rank}"

    def activate(self) -> None:
        """Nothing runs here: its worker thread, if any, stays idle."""

    def synchronize(self) -> None:
        """Nothing is queued here."""


def cluster_devices(cluster: Cluster, gpus, backend: str) -> list:
    """All logical devices of the run: this rank's real ones, placeholders for the rest."""
    gpus = tuple(gpus)
    local = make_devices(gpus, backend, first_index=cluster.local_devices.start)
    devices = []
    for index in range(cluster.num_devices):
        if cluster.is_local(index):
            devices.append(local[index - cluster.local_devices.start])
        else:
            devices.append(RemoteDevice(index, gpus[index % len(gpus)], cluster.rank_of(index)))
    return devices


__all__ = ["Cluster", "RemoteDevice", "cluster_devices",
           "connect", "launched_size", "single_process"]
