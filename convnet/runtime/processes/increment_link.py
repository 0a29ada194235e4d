"""The replicated layers' increments between ranks (``--sync async:S`` of a hybrid net).

In a multi-process run the replicas of a replicated layer may live on
several ranks.  Each rank's :class:`~convnet.runtime.processes.increment_exchange.IncrementExchange`
copies a posted increment onto the replicas of its own rank and hands it to
this rank's :class:`IncrementLink` for the others: one message per posted
increment to every other rank that holds a replica of the layer (a rank
with several such replicas gets it once and copies it onto each).  A
message is the position of the update that posted it and the replica that
posted it (a small JSON head; see
:mod:`~convnet.runtime.processes.increment_exchange`), then the layer's
increments as float32
(:class:`~convnet.runtime.processes.message_layout.MessageLayout`); its tag is 1 + the
layer's position among the replicated layers in name order.

Tag 0 says that this rank's exchange failed (:meth:`IncrementLink.tell_failure`,
with why): a rank may be blocked in a lockstep receive from another while
that one waits for an increment the failed exchange will never send, so the
failure must reach the other ranks' exchanges, whose waits then end with
it; one error line then ends the run wherever it is raised first.

The messages travel on a communicator of their own, a duplicate of the
run's (``MPI_Comm_dup``) that every rank makes at the same point, when its
executor is made.  The lockstep step's own transfers number their tags by
their position in the step's task list, modulo the tag limit
(:mod:`convnet.runtime.step.rank_tasks`), so any tag may be one of theirs; on
another communicator a message can only match a receive of that
communicator, so the two cannot collide whatever tags they use, and neither
side's numbering has to leave room for the other's.
"""

from __future__ import annotations

import numpy as np

from convnet.runtime.processes.communicator import Communicator
from convnet.runtime.processes.message_layout import MessageLayout
from convnet.runtime.processes.polling_courier import PollingCourier

HEAD_BYTES = 64  # {"position": ..., "sender": ...}
FAILED = 0  # the tag of the message that says this rank's exchange failed
FAILURE_BYTES = 1024  # its text (why), cut to fit


class IncrementLink(PollingCourier):
    """This rank's increment traffic with the other ranks of ``comm`` (a communicator of
    its own, see the module docstring).

    ``ranks`` maps every replicated layer to the rank of each of its replicas and
    ``shapes`` each layer with a replica on this rank to its increments' shapes (array
    name -> shape).  ``deliver(layer, position, sender, arrays)`` is called on the
    link's thread with every increment that arrives (host arrays, which then belong to
    the caller), ``failed_elsewhere(rank, why)`` when another rank's exchange failed, and
    ``fail(error)`` if the link's thread raises.
    """

    def __init__(self, comm: Communicator, ranks: dict[str, tuple[int, ...]],
                 shapes: dict[str, dict[str, tuple[int, ...]]], deliver, failed_elsewhere,
                 fail):
        self._deliver, self._failed_elsewhere = deliver, failed_elsewhere
        self._tags = {layer: 1 + i for i, layer in enumerate(sorted(ranks))}
        self._layers = {tag: layer for layer, tag in self._tags.items()}
        # layer -> the other ranks with a replica of it (of the layers with one here)
        self.peers = {layer: sorted(set(held) - {comm.rank}) for layer, held in ranks.items()
                      if comm.rank in held and set(held) - {comm.rank}}
        self._layouts = {layer: MessageLayout({layer: shapes[layer]}, HEAD_BYTES)
                         for layer in self.peers}
        # the ranks this one exchanges increments with
        self._neighbours = sorted({p for peers in self.peers.values() for p in peers})
        receives = {(self._tags[layer], p): self._layouts[layer].nbytes
                    for layer, peers in self.peers.items() for p in peers}
        receives.update({(FAILED, p): FAILURE_BYTES for p in self._neighbours})
        super().__init__(comm, receives, fail, "increment-link")

    def send_increments(self, layer: str, position: int, sender: int, arrays: dict) -> None:
        """Send the increments replica ``sender`` of ``layer`` posted at ``position`` (host
        arrays: name -> array) to every other rank with a replica of the layer."""
        message = self._layouts[layer].pack({"position": position, "sender": sender},
                                            {layer: arrays})
        for p in self.peers[layer]:
            self.send(message, p, self._tags[layer])

    def tell_failure(self, why: str) -> None:
        """Tell every rank this one exchanges increments with that its exchange failed
        (see the module docstring).  If the link's own thread is what failed, nothing
        polls this send any more: it then arrives only if MPI sends it at once."""
        text = why.encode()[:FAILURE_BYTES]
        message = np.zeros(FAILURE_BYTES, np.uint8)
        message[:len(text)] = np.frombuffer(text, np.uint8)
        for p in self._neighbours:
            self.send(message, p, FAILED)

    def _arrived(self, tag: int, source: int, message: np.ndarray) -> None:
        if tag == FAILED:
            self._failed_elsewhere(source, message.tobytes().rstrip(b"\0").decode(
                errors="replace"))
            return
        layer = self._layers[tag]
        head, arrays = self._layouts[layer].unpack(message)
        self._deliver(layer, head["position"], head["sender"], arrays[layer])


__all__ = ["FAILED", "FAILURE_BYTES", "HEAD_BYTES", "IncrementLink"]
