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

**Several processes.** Each rank's exchange serves the replicas on its own
devices: the courier copies a posted increment onto the other replicas of
the same rank, as above, and sends it to the ranks that hold the layer's
other replicas (:class:`~convnet.runtime.processes.increment_link.IncrementLink`),
whose couriers copy it onto theirs.  A receiver counts a local increment as
in transit from its post on; one from another rank it cannot see posted,
but the steps are lockstep and the plan says how many updates each replica
posts in a step, so once a step has ended (its costs were gathered from
every rank, so every rank has posted in it) the receiver counts that many
increments of the step as in transit until they arrive
(:meth:`IncrementExchange.step_ended`).  The bound then holds across
processes as in one, and every rank drains at the same point (a test, a
checkpoint, features), so a drain leaves every increment posted anywhere
arrived everywhere.  A step that failed on some rank never ended, so
nothing waits for its increments; a failing exchange tells the other ranks'
exchanges, so that none of them waits for what it will never send.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field

from convnet.errors import ConvnetError
from convnet.runtime.processes.cluster import Cluster
from convnet.runtime.processes.increment_link import IncrementLink
from convnet.runtime.processes.polling_courier import close_seconds

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
    delivery (tests use it to make deliveries slow or fail).

    In a multi-process run ``cluster`` is this rank's place in it: only the replicas
    on its devices post and take here; ``shapes`` gives the increments' shapes of every
    layer with a replica here (layer -> array name -> shape) and ``posts`` how many
    increments each replica posts in a step ((layer, replica) -> count, from the
    plan).  Every rank must make its exchange at the same point: it duplicates the
    run's communicator (see :mod:`convnet.runtime.processes.increment_link`).
    """

    def __init__(self, replicas: dict[str, tuple[int, ...]], devices: list, staleness: int,
                 delay=None, cluster: Cluster | None = None, shapes: dict | None = None,
                 posts: dict[tuple[str, int], int] | None = None):
        if staleness < 0:
            raise ValueError(f"the staleness bound is a number of steps >= 0, not {staleness}")
        self.replicas, self.devices, self.staleness = replicas, devices, staleness
        self.record = LatenessRecord()
        self._delay = delay
        here = cluster.is_local if cluster is not None else (lambda device: True)
        # layer -> the replicas on this rank's devices (all of them in one process)
        self.local = {layer: [q for q, d in enumerate(devs) if here(d)]
                      for layer, devs in replicas.items()}
        self._cv = threading.Condition()
        # (layer, receiver, step, arrays) to copy onto a replica here, or
        # (layer, None, step, (sender, arrays)) to send to the other ranks
        self._outbox: collections.deque = collections.deque()
        # (layer, receiver) -> [(step, arrays on the receiver's device)] in arrival order
        self._inbox: dict[tuple[str, int], list] = collections.defaultdict(list)
        # (layer, receiver) -> steps of the increments posted to it and not yet arrived
        # (below 0 for a step that has not ended here but whose increments from another
        # rank arrived already: none of them is in transit)
        self._transit: dict[tuple[str, int], collections.Counter] = \
            collections.defaultdict(collections.Counter)
        self._failure: str | None = None  # why the exchange failed, once it has
        self._error: BaseException | None = None  # what raised here, if it failed here
        self._closing = False
        # (layer, receiver here) -> increments the replicas on other ranks post to it per step
        self._remote_posts: dict[tuple[str, int], int] = {}
        self._link = None
        self._cluster = cluster
        if cluster is not None and cluster.size > 1:
            for layer, devs in replicas.items():
                remote = sum(posts.get((layer, r), 0) for r, d in enumerate(devs) if not here(d))
                if remote:
                    self._remote_posts.update({(layer, q): remote for q in self.local[layer]})
            self._link = IncrementLink(cluster.comm.duplicate(),
                                       {layer: tuple(cluster.rank_of(d) for d in devs)
                                        for layer, devs in replicas.items()},
                                       shapes, self._arrived, self._failed_elsewhere,
                                       self._fail)
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
            for receiver in self.local[layer]:
                if receiver != sender:
                    self._transit[(layer, receiver)][step] += 1
                    self._outbox.append((layer, receiver, step, snapshot))
            if self._link is not None and layer in self._link.peers:
                self._outbox.append((layer, None, step, (sender, snapshot)))
            self._cv.notify_all()

    def step_ended(self, step: int) -> None:
        """Step ``step`` ended on every rank (see the module docstring): the increments
        the replicas on other ranks posted in it are in transit to the replicas here
        until they arrive.  Nothing to count in one process."""
        if not self._remote_posts:
            return
        with self._cv:
            for key, count in self._remote_posts.items():
                self._transit[key][step] += count
            self._cv.notify_all()

    def take(self, layer: str, receiver: int, step: int) -> list[dict]:
        """The increments that replica ``receiver`` of ``layer`` adds before its forward in
        ``step``: every one arrived from an earlier step, after waiting for those in
        transit that would otherwise be more than S steps late."""
        oldest_allowed = step - 1 - self.staleness
        key = (layer, receiver)
        with self._cv:
            waited = False
            bound = self._bound(f"layer {layer}'s increments")
            while any(s <= oldest_allowed for s, n in self._transit[key].items() if n > 0):
                self._raise_if_failed()
                if bound is not None:
                    bound.check()
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
        """Wait until every increment posted to the replicas here has arrived (in a
        multi-process run: of every step that ended)."""
        with self._cv:
            bound = self._bound("every increment, before a test or a save")
            while not self._settled():
                self._raise_if_failed()
                if bound is not None:
                    bound.check()
                self._cv.wait(_POLL_SECONDS)
            self._raise_if_failed()

    def _bound(self, what: str):
        """The bound of a wait for increments from other ranks (none in one process)."""
        return self._cluster.comm.bound(what) if self._cluster is not None else None

    def close(self) -> None:
        """Stop the courier (and the link to the other ranks: first, for at most
        :func:`~convnet.runtime.processes.polling_courier.close_seconds`, wait for what they sent
        in the steps that ended, so that their links see their sends taken and stop at
        once too; not after a failure)."""
        if self._link is not None:
            with self._cv:
                self._cv.wait_for(lambda: self._failure is not None or self._settled(),
                                  timeout=close_seconds(self._cluster.comm))
            self._link.close()
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._courier.join(timeout=5)

    def _settled(self) -> bool:
        """(Holding the lock.)  Nothing to send or deliver, nothing in transit."""
        return not self._outbox and not any(n > 0 for c in self._transit.values()
                                            for n in c.values())

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ExchangeFailed(f"moving the replicas' increments failed{self._failure}") \
                from self._error

    def _fail(self, error: BaseException) -> None:
        """The courier's or the link's thread raised: every waiting and later call here
        says so, and so do the other ranks' exchanges."""
        with self._cv:
            if self._failure is not None:
                return
            self._error, self._failure = error, f": {type(error).__name__}: {error}"
            self._cv.notify_all()
        if self._link is not None:
            self._link.tell_failure(f"{type(error).__name__}: {error}")

    def _failed_elsewhere(self, rank: int, why: str) -> None:
        """(On the link's thread.)  The exchange of rank ``rank`` failed: the increments
        it owes may never come, so every waiting and later call here says so."""
        with self._cv:
            if self._failure is None:
                self._failure = f" on rank {rank}: {why}"
            self._cv.notify_all()

    def _arrived(self, layer: str, step: int, arrays: dict) -> None:
        """(On the link's thread.)  An increment of ``step`` from another rank, as host
        arrays: for the courier to copy onto every replica of ``layer`` here."""
        with self._cv:
            for receiver in self.local[layer]:
                self._outbox.append((layer, receiver, step, arrays))
            self._cv.notify_all()

    def _serve(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._outbox and not self._closing:
                        self._cv.wait(_POLL_SECONDS)
                    if self._closing:
                        return
                    layer, receiver, step, arrays = self._outbox.popleft()
                if receiver is None:
                    self._send_out(layer, step, *arrays)
                else:
                    self._deliver(layer, receiver, step, arrays)
        except BaseException as error:  # noqa: BLE001 - handed to every caller
            self._fail(error)

    def _send_out(self, layer: str, step: int, sender: int, snapshot: dict) -> None:
        source = self.devices[self.replicas[layer][sender]]
        source.activate()
        self._link.send_increments(layer, step, {k: source.to_host(v)
                                                 for k, v in snapshot.items()})

    def _deliver(self, layer: str, receiver: int, step: int, arrays: dict) -> None:
        """Copy ``arrays`` (of any device, or the host) onto replica ``receiver``."""
        if self._delay is not None:
            self._delay()
        target = self.devices[self.replicas[layer][receiver]]
        target.activate()
        arrived = {k: target.copy_from(v) for k, v in arrays.items()}
        target.synchronize()
        with self._cv:
            self._inbox[(layer, receiver)].append((step, arrived))
            self._transit[(layer, receiver)][step] -= 1
            self._cv.notify_all()


__all__ = ["ExchangeFailed", "IncrementExchange", "LatenessRecord"]
