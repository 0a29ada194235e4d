"""How the processes of a run talk to each other: one small interface, two implementations.

In the manner of ChainerMN's communicators: point-to-point transfers of
float32 arrays with tags, raw byte messages that a polling thread sends and
receives without blocking (the ``--sync async`` couriers), a few collectives
on small Python objects, a duplicate whose messages keep apart, and abort.  :class:`LocalCommunicator` is the one-process case (nothing to talk
to); :class:`convnet.runtime.processes.mpi_comm.MpiCommunicator` is MPI through mpi4py;
:func:`convnet.runtime.processes.cluster.connect` picks one.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any, NoReturn

from convnet.errors import RankError

#: Seconds a wait on another rank may last (``--rank-timeout``'s default): longer than
#: any wait of a healthy run (a slow rank's step of a big net on CPU devices, rank 0
#: writing a large checkpoint to a slow disk while the others wait in the next step),
#: short enough that a stopped or hung rank does not hold a run for hours.
DEFAULT_WAIT_LIMIT = 600.0


def ranks_text(ranks) -> str:
    """``rank 1`` or ``ranks 1, 2``."""
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


class WaitBound:
    """The deadline of one wait on other ranks: :meth:`check` raises a
    :class:`~convnet.errors.RankError` naming ``peers`` (the ranks waited on) and
    ``what`` once ``limit`` seconds have passed (never with ``limit`` None)."""

    def __init__(self, limit: float | None, peers, what: str):
        self.limit, self.peers, self.what = limit, peers, what
        self._deadline = None if limit is None else time.monotonic() + limit

    def check(self) -> None:
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise RankError(f"waited {self.limit:g} s for {ranks_text(self.peers)} "
                            f"({self.what}) without an answer: stopped, hung or far slower "
                            f"than this rank (--rank-timeout SECONDS sets the bound)")


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
    wait_limit: float | None = None
    """Seconds any wait on another rank may last before the run ends with a
    :class:`~convnet.errors.RankError` naming that rank (None: no bound)."""

    def bound(self, what: str, peers=None) -> WaitBound:
        """The deadline of a wait starting now on ``peers`` (default: every other rank);
        none in a one-process run, where nothing waits on another rank."""
        if peers is None:
            peers = [r for r in range(self.size) if r != self.rank]
        return WaitBound(self.wait_limit if self.size > 1 else None, peers, what)

    @abstractmethod
    def isend(self, array, dest: int, tag: int) -> Any:
        """Start sending ``array`` to ``dest``; returns a request for :meth:`wait_all`.
        The array must stay unchanged until then (the request keeps it alive)."""

    @abstractmethod
    def recv(self, out, source: int, tag: int, what: str = "a transfer") -> None:
        """Receive into the contiguous float32 array ``out``, blocking until it arrived
        (``what`` names it in the error if it does not)."""

    @abstractmethod
    def wait_all(self, requests: list) -> None:
        """Wait until the sends of ``requests`` have completed."""

    @abstractmethod
    def isend_bytes(self, message, dest: int, tag: int) -> Any:
        """Start sending the uint8 array ``message``; returns a request for :meth:`test`.
        The array must stay unchanged until the request is done."""

    @abstractmethod
    def irecv_bytes(self, out, source: int, tag: int) -> Any:
        """Start receiving a message of exactly ``out.nbytes`` bytes into the uint8 array
        ``out``; returns a request for :meth:`test`."""

    @abstractmethod
    def test(self, request) -> bool:
        """Whether a request of :meth:`isend_bytes` or :meth:`irecv_bytes` is done (it
        also lets MPI make progress); never blocks."""

    @abstractmethod
    def cancel(self, request) -> None:
        """Give up a pending :meth:`irecv_bytes` (when the courier stops); one that is
        done already, or failed with its peer, is left as it is, never an error."""

    @abstractmethod
    def allgather(self, obj, what: str = "a collective") -> list:
        """Every rank's ``obj``, in rank order, on every rank."""

    @abstractmethod
    def gather(self, obj, root: int = 0, what: str = "a collective") -> list | None:
        """Every rank's ``obj`` in rank order on ``root``; None elsewhere."""

    @abstractmethod
    def duplicate(self) -> Communicator:
        """A communicator over the same processes whose messages never match this one's,
        whatever their tags (``MPI_Comm_dup``).  Every rank must call it, at the same
        point of the run."""

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

    def recv(self, out, source, tag, what="a transfer"):
        raise RuntimeError("a one-process run has no other rank to receive from")

    def wait_all(self, requests):
        if requests:
            raise RuntimeError("a one-process run has no pending sends")

    def isend_bytes(self, message, dest, tag):
        raise RuntimeError("a one-process run has no other rank to send to")

    def irecv_bytes(self, out, source, tag):
        raise RuntimeError("a one-process run has no other rank to receive from")

    def test(self, request):
        raise RuntimeError("a one-process run has no pending transfers")

    def cancel(self, request):
        raise RuntimeError("a one-process run has no pending transfers")

    def allgather(self, obj, what="a collective"):
        return [obj]

    def gather(self, obj, root=0, what="a collective"):
        return [obj]

    def duplicate(self):
        return LocalCommunicator()

    def abort(self, code):
        raise SystemExit(code)


__all__ = ["DEFAULT_WAIT_LIMIT", "Communicator", "LocalCommunicator", "WaitBound",
           "ranks_text"]
