"""``--sync async:S`` across processes: the thread that deals shards and carries updates.

Every rank runs the replicas of its own devices
(:class:`~convnet.runtime.sync.async_replicas.AsyncReplicas`); what crosses
processes goes through one :class:`RankCourier` per rank:

* **Dealing.** The shards of the stream are numbered in the order the
  training loop queues them (every rank queues the same stream), and so are
  the pieces of each test's minibatches.  Rank 0's courier holds the
  :class:`Dealer` with the next number of each: its own replicas take
  numbers from it directly, the other ranks' replicas ask it with a
  ``CLAIM`` message and get the number back in a ``GRANT``.  A replica asks
  when it is free, so a faster rank takes more shards and more pieces.
* **Updates.** After a shard, its replica's increments (and the shard's
  costs, so that every rank reports the training cost of every shard) go to
  every other rank in one ``UPDATE`` message (:func:`update_layout`), sent
  without blocking.  Its arrival also tells the receiver that the shard is
  finished, which the staleness bound reads.

The messages travel through a
:class:`~convnet.runtime.processes.polling_courier.PollingCourier` (non-blocking,
polled by a thread of their own: see there why MPICH needs one); dealing by
message rather than by a one-sided counter (``MPI_Fetch_and_op``) because
that would need the same polling on rank 0, and its window must be freed
collectively, which a rank ending on an error cannot do.  A courier that
fails hands its error to the replica set (``fail``).
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from convnet.runtime.processes.communicator import Communicator
from convnet.runtime.processes.message_layout import MessageLayout
from convnet.runtime.processes.polling_courier import PollingCourier

UPDATE, CLAIM, GRANT = 1, 2, 3  # the message tags
TRAINING = 0  # the stream of training shards; a test's minibatch is stream 1, 2, ...
META_BYTES = 4096  # the JSON head of an UPDATE message (shard number and costs)


def update_layout(shapes: dict[str, dict[str, tuple[int, ...]]]) -> MessageLayout:
    """The bytes of an ``UPDATE`` message: a JSON head of :data:`META_BYTES` (the shard's
    ``ordinal``, ``cases``, ``seconds`` and ``costs``), then every increment (``shapes``:
    layer -> array name -> shape)."""
    return MessageLayout(shapes, META_BYTES)


class Dealer:
    """The numbers dealt so far: of the training shards (no end), and of the pieces of
    the test minibatch being evaluated (``limit`` of them; -1 once all are dealt).

    Every rank evaluates the same minibatches in the same order and they end with a
    collective, so a claim for a test stream never comes after one for a later test
    stream: only the latest test's counter is kept.  Not thread-safe: callers lock.
    """

    def __init__(self):
        self._next = {TRAINING: 0}

    def claim(self, stream: int, limit: int = 0, granted=None) -> int:
        """The next number of ``stream`` (``granted`` is unused: the answer is at once)."""
        if stream not in self._next:
            self._next = {TRAINING: self._next[TRAINING], stream: 0}
        number = self._next[stream]
        if stream != TRAINING and number >= limit:
            return -1
        self._next[stream] = number + 1
        return number


class RankCourier(PollingCourier):
    """This rank's dealing and update traffic with the other ranks of ``comm``.

    ``deliver(message)`` is called (on the courier's thread) with every
    ``UPDATE`` message that arrives, and ``fail(error)`` if the courier's thread
    raises (it stops then).
    """

    def __init__(self, comm: Communicator, message_bytes: int, deliver, fail):
        self._deliver = deliver
        self._lock = threading.Lock()
        self._dealer = Dealer()  # used on rank 0 only
        self._asking: collections.deque = collections.deque()  # callbacks awaiting a grant
        self._others = [q for q in range(comm.size) if q != comm.rank]
        wanted = {(UPDATE, q): message_bytes for q in self._others}
        wanted.update({(CLAIM, q): 16 for q in self._others} if comm.rank == 0
                      else {(GRANT, 0): 8})
        super().__init__(comm, wanted, fail, "rank-courier")

    def claim(self, stream: int, limit: int, granted) -> int | None:
        """The next number of ``stream`` (see :meth:`Dealer.claim`): at once on rank 0;
        elsewhere None, and ``granted(number)`` is called (on the courier's thread) when
        rank 0 answers."""
        with self._lock:
            if self.comm.rank == 0:
                return self._dealer.claim(stream, limit)
            self._asking.append(granted)
            self.send(np.array([stream, limit], np.int64).view(np.uint8), 0, CLAIM)
        return None

    def send_update(self, message: np.ndarray) -> None:
        """Send one ``UPDATE`` message to every other rank."""
        for q in self._others:
            self.send(message, q, UPDATE)

    def _arrived(self, tag: int, source: int, message: np.ndarray) -> None:
        if tag == UPDATE:
            self._deliver(message)  # it now belongs to the replicas
        elif tag == CLAIM:
            stream, limit = (int(v) for v in message.view(np.int64))
            with self._lock:
                number = self._dealer.claim(stream, limit)
                self.send(np.array([number], np.int64).view(np.uint8), source, GRANT)
        else:
            with self._lock:
                granted = self._asking.popleft()
            granted(int(message.view(np.int64)[0]))


__all__ = ["Dealer", "META_BYTES", "RankCourier", "TRAINING", "update_layout"]
