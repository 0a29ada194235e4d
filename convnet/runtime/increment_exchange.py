"""The replicated layers' updates of a lockstep net under ``--sync async:S``.

In a hybrid net the model-parallel layers need every shard of a pass at once,
so the steps stay lockstep; only the exchange between the replicas of a
data-parallel layer can run apart.  There, each replica updates its own
weights and momentum from its own shards at once (the learning rates divided
by the replica count R, so that the R updates of a step add up to
synchronous SGD's) and *posts* the increment its update added (the
optimizer's ``inc``).  A courier thread copies each posted increment onto the
other replicas' devices, off the step's critical path; a replica adds what
has arrived before its first forward of that layer in a later step.

Staleness is bounded: an increment posted in step s is *on time* when it is
added before step s + 1's forward (when synchronous SGD would have it), and
*k steps late* when added before step s + 1 + k's.  Before its forward in
step t a replica waits only for increments of steps up to t - 1 - S still
in transit, so none is ever more than S steps late.  An increment is never
added in the step that posted it.

The courier delivers in posting order; the replicas add what they received
in arrival order, so with S > 0 (and in general, float addition order) runs
are not bitwise reproducible.  :meth:`IncrementExchange.drain` waits until
everything posted has arrived, for a test, a checkpoint or features.  A
courier that fails hands its error to every waiting and later call; nothing
waits without watching for it.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field

from convnet.errors import ConvnetError

_POLL_SECONDS = 0.05


class ExchangeFailed(ConvnetError):
    """The courier that moves the increments between the replicas raised an error."""


@dataclass
class LatenessRecord:
    """What the bound did: the most steps an added increment was late, and how often a
    replica waited for one in transit."""

    max_late: int = 0
    waits: int = 0
    added: int = 0
    late_counts: collections.Counter = field(default_factory=collections.Counter)


class IncrementExchange:
    """Moves increments between the replicas of the layers in ``replicas`` (layer ->
    the device index of each replica) on ``devices``, with staleness bound
    ``staleness``.  ``delay``, if given, is called by the courier before each
    delivery (tests use it to make deliveries slow or fail)."""

    def __init__(self, replicas: dict[str, tuple[int, ...]], devices: list, staleness: int,
                 delay=None):
        if staleness < 0:
            raise ValueError(f"the staleness bound is a number of steps >= 0, not {staleness}")
        self.replicas, self.devices, self.staleness = replicas, devices, staleness
        self.record = LatenessRecord()
        self._delay = delay
        self._cv = threading.Condition()
        self._outbox: collections.deque = collections.deque()
        # (layer, receiver) -> [(step, arrays on the receiver's device)] in arrival order
        self._inbox: dict[tuple[str, int], list] = collections.defaultdict(list)
        # (layer, receiver) -> steps of the increments posted to it and not yet arrived
        self._transit: dict[tuple[str, int], collections.Counter] = \
            collections.defaultdict(collections.Counter)
        self._error: BaseException | None = None
        self._closing = False
        self._courier = threading.Thread(target=self._serve, daemon=True, name="increments")
        self._courier.start()

    def post(self, layer: str, sender: int, step: int, increments: dict) -> None:
        """Send a copy of replica ``sender``'s ``increments`` (array name -> array, on its
        device) of ``step`` to the layer's other replicas."""
        devices = self.replicas[layer]
        if len(devices) < 2:
            return
        source = self.devices[devices[sender]]
        snapshot = {k: source.copy_from(v) for k, v in increments.items()}
        source.synchronize()
        with self._cv:
            self._raise_if_failed()
            for receiver in range(len(devices)):
                if receiver != sender:
                    self._transit[(layer, receiver)][step] += 1
                    self._outbox.append((layer, receiver, step, snapshot))
            self._cv.notify_all()

    def take(self, layer: str, receiver: int, step: int) -> list[dict]:
        """The increments that replica ``receiver`` of ``layer`` adds before its forward in
        ``step``: every one arrived from an earlier step, after waiting for those in
        transit that would otherwise be more than S steps late."""
        oldest_allowed = step - 1 - self.staleness
        key = (layer, receiver)
        with self._cv:
            waited = False
            while any(s <= oldest_allowed for s, n in self._transit[key].items() if n):
                self._raise_if_failed()
                if not waited:
                    self.record.waits += 1
                    waited = True
                self._cv.wait(_POLL_SECONDS)
            self._raise_if_failed()
            inbox = self._inbox[key]
            ready = [(s, arrays) for s, arrays in inbox if s < step]
            self._inbox[key] = [(s, arrays) for s, arrays in inbox if s >= step]
            for s, _ in ready:
                late = step - 1 - s
                self.record.max_late = max(self.record.max_late, late)
                self.record.late_counts[late] += 1
                self.record.added += 1
        return [arrays for _, arrays in ready]

    def drain(self) -> None:
        """Wait until every posted increment has arrived."""
        with self._cv:
            while self._outbox or any(n for c in self._transit.values() for n in c.values()):
                self._raise_if_failed()
                self._cv.wait(_POLL_SECONDS)
            self._raise_if_failed()

    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._courier.join(timeout=5)

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is not None:
            raise ExchangeFailed(f"moving the replicas' increments failed: "
                                 f"{type(error).__name__}: {error}") from error

    def _serve(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._outbox and not self._closing:
                        self._cv.wait(_POLL_SECONDS)
                    if self._closing:
                        return
                    layer, receiver, step, snapshot = self._outbox.popleft()
                if self._delay is not None:
                    self._delay()
                target = self.devices[self.replicas[layer][receiver]]
                target.activate()
                arrived = {k: target.copy_from(v) for k, v in snapshot.items()}
                target.synchronize()
                with self._cv:
                    self._inbox[(layer, receiver)].append((step, arrived))
                    self._transit[(layer, receiver)][step] -= 1
                    self._cv.notify_all()
        except BaseException as error:  # noqa: BLE001 - handed to every caller
            with self._cv:
                self._error = error
                self._cv.notify_all()


__all__ = ["ExchangeFailed", "IncrementExchange", "LatenessRecord"]
