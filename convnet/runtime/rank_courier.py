"""``--sync async:S`` across processes: the thread that deals shards and carries updates.

Every rank runs the replicas of its own devices
(:class:`~convnet.runtime.async_replicas.AsyncReplicas`); what crosses
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
  every other rank in one ``UPDATE`` message (:class:`UpdateLayout`), sent
  without blocking.  Its arrival also tells the receiver that the shard is
  finished, which the staleness bound reads.

Every transfer is a non-blocking send or receive that the courier polls with
``test``, about once a millisecond: with MPICH a message, and a rank's
progress in general, moves only while some thread of the receiving process
is inside MPI, so a polling thread keeps the dealing prompt while the
replicas compute (a one-sided counter, ``MPI_Fetch_and_op``, would need the
same polling on rank 0, and its window must be freed collectively, which a
rank ending on an error cannot do).  A courier that fails hands its error to
the replica set (``fail``); a rank that dies or aborts ends the run through
the launcher (``MPI_Abort``), as in any multi-process run.
"""

from __future__ import annotations

import collections
import json
import threading
import time

import numpy as np

from convnet.runtime.communicator import Communicator

UPDATE, CLAIM, GRANT = 1, 2, 3  # the message tags
TRAINING = 0  # the stream of training shards; a test's minibatch is stream 1, 2, ...
_POLL_SECONDS = 0.001
_CLOSE_SECONDS = 30  # how long close waits for its own sends to be taken
META_BYTES = 4096  # the JSON head of an UPDATE message (shard number and costs)


class UpdateLayout:
    """The bytes of an ``UPDATE`` message: a JSON head of :data:`META_BYTES` (the shard's
    number, case count, seconds and costs), then every increment as float32, layers and
    array names in sorted order.  ``shapes`` is layer -> array name -> shape (the same
    on every rank: one net)."""

    def __init__(self, shapes: dict[str, dict[str, tuple[int, ...]]]):
        self.fields = [(layer, k, tuple(shapes[layer][k]))
                       for layer in sorted(shapes) for k in sorted(shapes[layer])]
        self.floats = sum(int(np.prod(shape)) for _, _, shape in self.fields)
        self.nbytes = META_BYTES + 4 * self.floats

    def pack(self, ordinal: int, cases: int, seconds: float, costs: dict,
             increments: dict) -> np.ndarray:
        """One message; ``increments`` holds host arrays (layer -> name -> array)."""
        head = json.dumps({"ordinal": ordinal, "cases": cases, "seconds": seconds,
                           "costs": costs}).encode()
        if len(head) > META_BYTES:
            raise ValueError(f"the costs of a shard need {len(head)} bytes; an update "
                             f"message has room for {META_BYTES}")
        message = np.zeros(self.nbytes, np.uint8)
        message[:len(head)] = np.frombuffer(head, np.uint8)
        np.concatenate([np.asarray(increments[layer][k], np.float32).reshape(-1)
                        for layer, k, _ in self.fields],
                       out=message[META_BYTES:].view(np.float32))
        return message

    def unpack(self, message: np.ndarray) -> tuple[dict, dict]:
        """(the JSON head, layer -> name -> array): the arrays are views of ``message``."""
        head = json.loads(message[:META_BYTES].tobytes().rstrip(b"\0"))
        floats = message[META_BYTES:].view(np.float32)
        increments: dict[str, dict[str, np.ndarray]] = {}
        offset = 0
        for layer, k, shape in self.fields:
            size = int(np.prod(shape))
            increments.setdefault(layer, {})[k] = floats[offset:offset + size].reshape(shape)
            offset += size
        return head, increments


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


class RankCourier:
    """This rank's dealing and update traffic with the other ranks of ``comm``.

    ``deliver(message)`` is called (on the courier's thread) with every
    ``UPDATE`` message that arrives, and ``fail(error)`` if the courier's thread
    raises (it stops then).
    """

    def __init__(self, comm: Communicator, message_bytes: int, deliver, fail):
        self.comm = comm
        self._deliver, self._fail = deliver, fail
        self._lock = threading.Lock()
        self._dealer = Dealer()  # used on rank 0 only
        self._asking: collections.deque = collections.deque()  # callbacks awaiting a grant
        self._sends: list = []  # (request, buffer) of the sends still pending
        others = [q for q in range(comm.size) if q != comm.rank]
        wanted = [(UPDATE, q, message_bytes) for q in others]
        wanted += ([(CLAIM, q, 16) for q in others] if comm.rank == 0 else [(GRANT, 0, 8)])
        self._receives = {(tag, q): self._post(tag, q, np.empty(size, np.uint8))
                          for tag, q, size in wanted}
        self._others = others
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="rank-courier")
        self._thread.start()

    def claim(self, stream: int, limit: int, granted) -> int | None:
        """The next number of ``stream`` (see :meth:`Dealer.claim`): at once on rank 0;
        elsewhere None, and ``granted(number)`` is called (on the courier's thread) when
        rank 0 answers."""
        with self._lock:
            if self.comm.rank == 0:
                return self._dealer.claim(stream, limit)
            self._asking.append(granted)
            self._send(np.array([stream, limit], np.int64).view(np.uint8), 0, CLAIM)
        return None

    def send_update(self, message: np.ndarray) -> None:
        """Send one ``UPDATE`` message to every other rank."""
        with self._lock:
            for q in self._others:
                self._send(message, q, UPDATE)

    def close(self) -> None:
        """Stop polling once this rank's own sends are taken (or after a while: a peer
        that is gone ends the run anyway), and give up the pending receives."""
        self._closing.set()
        self._thread.join(timeout=_CLOSE_SECONDS + 5)
        for request, _ in self._receives.values():
            self.comm.cancel(request)
        self._receives.clear()

    # --------------------------------------------------------- the courier's thread
    def _post(self, tag: int, source: int, buffer: np.ndarray):
        return self.comm.irecv_bytes(buffer, source, tag), buffer

    def _send(self, message: np.ndarray, dest: int, tag: int) -> None:
        """(Holding the lock.)"""
        self._sends.append((self.comm.isend_bytes(message, dest, tag), message))

    def _serve(self) -> None:
        try:
            deadline = None
            while True:
                busy = self._receive_some()
                with self._lock:
                    self._sends = [s for s in self._sends if not self.comm.test(s[0])]
                    sending = bool(self._sends)
                if self._closing.is_set():
                    deadline = deadline or time.monotonic() + _CLOSE_SECONDS
                    if not sending or time.monotonic() > deadline:
                        return
                if not busy:
                    time.sleep(_POLL_SECONDS)
        except BaseException as error:  # noqa: BLE001 - handed to the replica set
            self._fail(error)

    def _receive_some(self) -> bool:
        """Handle every message that has arrived; whether there was any."""
        arrived = False
        for (tag, source), (request, buffer) in list(self._receives.items()):
            if not self.comm.test(request):
                continue
            arrived = True
            if tag == UPDATE:
                self._deliver(buffer)
                buffer = np.empty_like(buffer)  # the delivered one now belongs to the replicas
            elif tag == CLAIM:
                stream, limit = (int(v) for v in buffer.view(np.int64))
                with self._lock:
                    number = self._dealer.claim(stream, limit)
                    self._send(np.array([number], np.int64).view(np.uint8), source, GRANT)
            else:
                with self._lock:
                    granted = self._asking.popleft()
                granted(int(buffer.view(np.int64)[0]))
            self._receives[(tag, source)] = self._post(tag, source, buffer)
        return arrived


__all__ = ["Dealer", "META_BYTES", "RankCourier", "TRAINING", "UpdateLayout"]
