"""The processes of a run: which rank this is and how the logical devices are spread.

One training run may span several processes (``mpiexec -n 2 python
convnet.py ...``), on one machine or several.  Every process builds the same
plan over all logical devices of all processes; the devices are spread
*rank-major*: each process uses the ``--gpu`` list of its own machine, so
with ``k = len(--gpu)`` logical device ``i`` lives on rank ``i // k`` and
runs on physical device ``gpu[i % k]`` there.  A device of another rank is a
:class:`RemoteDevice`: the plan names it, but this process holds none of its
buffers and runs none of its work.

The ranks talk through a :class:`Communicator`, a small interface in the
manner of ChainerMN's communicators: point-to-point transfers of float32
arrays with tags, a few collectives on small Python objects, and abort.
:class:`LocalCommunicator` is the one-process case (nothing to talk to);
:class:`convnet.runtime.mpi_comm.MpiCommunicator` is MPI through mpi4py.
:func:`connect` picks one from the environment: mpi4py is imported only
when a launcher such as ``mpiexec`` or ``srun`` started several processes,
so a plain run never needs MPI.
"""

from __future__ import annotations

import os
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, NoReturn

from convnet.errors import DeviceError

# Environment variables a launcher sets to the number of processes it started:
# MPICH's hydra (and Slurm's srun with PMI-1/2), Open MPI, and PMIx-based launchers.
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")


def launched_size(environ=os.environ) -> int:
    """How many processes the launcher of this one started (1 without a launcher)."""
    for name in _SIZE_VARIABLES:
        value = environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


class Communicator(ABC):
    """What the executor needs from the processes of a run.

    Point-to-point transfers carry float32 numpy arrays; both sides know the
    shape (it follows from the plan), so a receive fills a buffer the receiver
    made.  Messages between two ranks with the same tag arrive in the order
    they were sent.  The collectives carry small picklable objects (costs,
    state of the weights for a checkpoint) and are called by every rank.
    """

    rank: int
    size: int
    tag_limit: int
    """Tags are ``0 .. tag_limit - 1``."""

    @abstractmethod
    def isend(self, array, dest: int, tag: int) -> Any:
        """Start sending ``array`` to ``dest``; returns a request for :meth:`wait_all`.
        The array must stay unchanged until then (the request keeps it alive)."""

    @abstractmethod
    def recv(self, out, source: int, tag: int) -> None:
        """Receive into the contiguous float32 array ``out``, blocking until it arrived."""

    @abstractmethod
    def wait_all(self, requests: list) -> None:
        """Wait until the sends of ``requests`` have completed."""

    @abstractmethod
    def allgather(self, obj) -> list:
        """Every rank's ``obj``, in rank order, on every rank."""

    @abstractmethod
    def gather(self, obj, root: int = 0) -> list | None:
        """Every rank's ``obj`` in rank order on ``root``; None elsewhere."""

    @abstractmethod
    def abort(self, code: int) -> NoReturn:
        """End every process of the run now, with exit status ``code``."""


class LocalCommunicator(Communicator):
    """The only process of a run: the collectives return what they were given."""

    rank = 0
    size = 1
    tag_limit = 1

    def isend(self, array, dest, tag):
        raise RuntimeError("a one-process run has no other rank to send to")

    def recv(self, out, source, tag):
        raise RuntimeError("a one-process run has no other rank to receive from")

    def wait_all(self, requests):
        if requests:
            raise RuntimeError("a one-process run has no pending sends")

    def allgather(self, obj):
        return [obj]

    def gather(self, obj, root=0):
        return [obj]

    def abort(self, code):
        raise SystemExit(code)


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


def connect() -> tuple[Communicator, tuple[str, ...]]:
    """The communicator of the processes this one was started with, and every rank's
    host name: this process alone, or every rank of an MPI launch."""
    if launched_size() == 1:
        return LocalCommunicator(), (socket.gethostname(),)
    try:
        from convnet.runtime.mpi_comm import MpiCommunicator
    except ImportError as error:
        raise DeviceError(f"this process was started by an MPI launcher with "
                          f"{launched_size()} processes, but mpi4py cannot be imported "
                          f"({error}); install the 'mpi' extra: pip install -e '.[mpi]'") from None
    comm = MpiCommunicator()
    return comm, tuple(comm.allgather(socket.gethostname()))


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
    from convnet.runtime.devices import make_devices

    gpus = tuple(gpus)
    local = make_devices(gpus, backend, first_index=cluster.local_devices.start)
    devices = []
    for index in range(cluster.num_devices):
        if cluster.is_local(index):
            devices.append(local[index - cluster.local_devices.start])
        else:
            devices.append(RemoteDevice(index, gpus[index % len(gpus)], cluster.rank_of(index)))
    return devices


__all__ = ["Cluster", "Communicator", "LocalCommunicator", "RemoteDevice", "cluster_devices",
           "connect", "launched_size", "single_process"]
