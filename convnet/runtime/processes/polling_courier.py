"""A thread that moves raw byte messages between ranks while the other threads compute.

Both ``--sync async`` couriers that cross processes, the data-parallel one
(:mod:`convnet.runtime.processes.rank_courier`) and the hybrid nets' increment link
(:mod:`convnet.runtime.processes.increment_link`), are a :class:`PollingCourier`: every
transfer is a non-blocking send or receive of raw bytes that one thread
polls with ``test``, about once a millisecond.  With MPICH a message, and a
rank's progress in general, moves only while some thread of the receiving
process is inside MPI, so a polling thread keeps the messages moving while
the replicas or the steps compute; a thread blocked in a receive could not
also complete the sends.

The courier keeps one receive posted for every (tag, source) it expects, each
of a size known in advance; a message that arrives is handed to
:meth:`PollingCourier._arrived` (on the courier's thread, which then owns
the buffer) and the next receive is posted.  Sends start at once and the
polling completes them.  A courier whose thread raises hands the error to
``fail`` and stops; a rank that dies or aborts ends the run through the
launcher (``MPI_Abort``), as in any multi-process run.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from convnet.runtime.processes.communicator import Communicator

_POLL_SECONDS = 0.001
CLOSE_SECONDS = 30  # how long close waits for its own sends to be taken


def close_seconds(comm: Communicator) -> float:
    """How long closing waits for the peers to take what was sent: :data:`CLOSE_SECONDS`,
    or the run's bound on waits for other ranks if that is shorter (a stopped peer never
    takes anything, and the run is ending on an error then)."""
    return min(CLOSE_SECONDS, comm.wait_limit or CLOSE_SECONDS)


class PollingCourier:
    """Polls ``receives`` ((tag, source) -> message bytes) and the sends started by
    :meth:`send` on ``comm``, on a thread named ``name``; ``fail(error)`` is called if
    that thread raises.  The thread starts here, so a subclass sets up what
    :meth:`_arrived` reads before calling this."""

    def __init__(self, comm: Communicator, receives: dict[tuple[int, int], int], fail,
                 name: str):
        self.comm = comm
        self._fail = fail
        self._send_lock = threading.Lock()
        self._sends: list = []  # (request, buffer) of the sends still pending
        self._receives = {(tag, source): self._post(tag, source, size)
                          for (tag, source), size in receives.items()}
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name=name)
        self._thread.start()

    def send(self, message: np.ndarray, dest: int, tag: int) -> None:
        """Start sending the uint8 array ``message`` (left unchanged from now on)."""
        with self._send_lock:
            self._sends.append((self.comm.isend_bytes(message, dest, tag), message))

    def close(self) -> None:
        """Stop polling once this rank's own sends are taken (or after
        :func:`close_seconds`: a peer that is gone ends the run anyway), and give up the
        pending receives."""
        self._closing.set()
        self._thread.join(timeout=close_seconds(self.comm) + 5)
        for request, _ in self._receives.values():
            self.comm.cancel(request)
        self._receives.clear()

    def _arrived(self, tag: int, source: int, message: np.ndarray) -> None:
        """(On the courier's thread.)  Handle a message that arrived from rank ``source``."""
        raise NotImplementedError

    # --------------------------------------------------------- the courier's thread
    def _post(self, tag: int, source: int, size: int):
        buffer = np.empty(size, np.uint8)
        return self.comm.irecv_bytes(buffer, source, tag), buffer

    def _serve(self) -> None:
        try:
            deadline = None
            while True:
                busy = self._receive_some()
                with self._send_lock:
                    self._sends = [s for s in self._sends if not self.comm.test(s[0])]
                    sending = bool(self._sends)
                if self._closing.is_set():
                    deadline = deadline or time.monotonic() + close_seconds(self.comm)
                    if not sending or time.monotonic() > deadline:
                        return
                if not busy:
                    time.sleep(_POLL_SECONDS)
        except BaseException as error:  # noqa: BLE001 - handed to the courier's owner
            self._fail(error)

    def _receive_some(self) -> bool:
        """Handle every message that has arrived; whether there was any."""
        arrived = False
        for (tag, source), (request, buffer) in list(self._receives.items()):
            if not self.comm.test(request):
                continue
            arrived = True
            self._arrived(tag, source, buffer)
            self._receives[(tag, source)] = self._post(tag, source, buffer.size)
        return arrived


__all__ = ["CLOSE_SECONDS", "PollingCourier", "close_seconds"]
