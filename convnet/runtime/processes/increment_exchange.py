"""The replicated layers' updates of a hybrid net under ``--sync async:S``.

In a hybrid net the model-parallel layers need every shard of a pass at once,
so the steps stay lockstep; only the exchange between the replicas of a
data-parallel layer can run apart.  There, each replica updates its own
weights and momentum from its own shards at once (the learning rates divided
by the replica count R, so that the R updates of a step add up to
synchronous SGD's) and *posts* the increment its update added (the
optimizer's ``inc``).  A courier thread copies each posted increment onto the
other replicas' devices, off the step's critical path; a replica adds what
has arrived before each of its forwards of that layer.

*Positions.*  A replica of a layer that updates U times a step (a layer
with fewer replicas than the widest one runs several passes a step) makes its
k-th update of step s at position ``s * U + k``; every replica of the layer
updates at the same positions, so each position brings R - 1 increments to
each replica.  A forward that follows n updates of its replica reads the
weights synchronous SGD has after n updates, so an increment at position i
is *on time* when it is added before the first forward that follows the
receiver's own update i (in the same step when the layer updates twice in
it), and *k steps late* when k * U positions later.  Before a forward after
n updates a replica waits until every increment at a position below
n - S * U has arrived, so none is ever more than S steps late, and adds
every one that has arrived at a position below n.  With S = 0 that is
synchronous SGD's order: every other replica's update is added exactly
where the all-reduce would have applied it.

*Order.*  Which increments a forward takes depends, with S > 0, on what has
arrived by then; with S = 0 it does not (every one below the forward's position,
and each only once).  A replica adds what it takes in a fixed order, by position
and then by sender (the replica index), never in arrival order, which follows
thread timing: float addition is not associative, and an addition order that
changed from run to run moved the weights by a few float roundings and could flip
a near-tie (a max-pool window) after them.  So S = 0 is bitwise reproducible, also
across processes, and equal to synchronous SGD up to float rounding (the
all-reduce sums in another order); with S > 0 runs are not reproducible.
:meth:`IncrementExchange.drain` waits until
everything posted has arrived, for a test, a checkpoint or features.  A
courier that fails hands its error to every waiting and later call; nothing
waits without watching for it.

**Several processes.** Each rank's exchange serves the replicas on its own
devices: the courier copies a posted increment onto the other replicas of
the same rank, as above, and sends it to the ranks that hold the layer's
other replicas (:class:`~convnet.runtime.processes.increment_link.IncrementLink`),
whose couriers copy it onto theirs.  A receiver need not see a post to
wait for it: the plan says how many updates each replica makes in a step,
so it counts the increments that have arrived at each position against the
R - 1 due there, wherever the senders are.  The bound then holds across
processes as in one.  A drain waits for the positions of the steps that
ended (:meth:`IncrementExchange.step_ended`: their costs were gathered from
every rank, so every rank has posted in them), and every rank drains at the
same point (a test, a checkpoint, features), so a drain leaves every
increment posted anywhere arrived everywhere.  A step that failed on some
rank never ended, so no drain waits for its increments; a failing exchange
tells the other ranks' exchanges, so that none of them waits for what it
will never send.
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
    ``staleness``.  ``posts`` gives how many increments each replica posts in a step
    ((layer, replica) -> count, from the plan; the same for every replica of a layer).
    ``delay``, if given, is called by the courier before each delivery (tests use it
    to make deliveries slow or fail).

    In a multi-process run ``cluster`` is this rank's place in it: only the replicas
    on its devices post and take here, and ``shapes`` gives the increments' shapes of
    every layer with a replica here (layer -> array name -> shape).  Every rank must
    make its exchange at the same point: it duplicates the run's communicator (see
    :mod:`convnet.runtime.processes.increment_link`).
    """

    def __init__(self, replicas: dict[str, tuple[int, ...]], devices: list, staleness: int,
                 posts: dict[tuple[str, int], int], delay=None, cluster: Cluster | None = None,
                 shapes: dict | None = None):
        if staleness < 0:
            raise ValueError(f"the staleness bound is a number of steps >= 0, not {staleness}")
        self.replicas, self.devices, self.staleness = replicas, devices, staleness
        self.record = LatenessRecord()
        self._delay = delay
        here = cluster.is_local if cluster is not None else (lambda device: True)
        # layer -> the replicas on this rank's devices (all of them in one process)
        self.local = {layer: [q for q, d in enumerate(devs) if here(d)]
                      for layer, devs in replicas.items()}
        # layer -> U, the updates each replica makes (and positions it posts at) per step
        self._per_step = {layer: max(1, posts.get((layer, 0), 1)) for layer in replicas}
        self._cv = threading.Condition()
        # (layer, receiver, position, sender, arrays) to copy onto a replica here, or
        # (layer, None, position, sender, arrays) to send to the other ranks
        self._outbox: collections.deque = collections.deque()
        # (layer, receiver) -> [(position, sender, arrays on the receiver's device)]
        self._inbox: dict[tuple[str, int], list] = collections.defaultdict(list)
        # (layer, replica here) -> [step, updates it made in that step]
        self._own: dict[tuple[str, int], list[int]] = {}
        # (layer, receiver) -> position -> increments arrived there (of the R - 1 due)
        self._got: dict[tuple[str, int], collections.Counter] = \
            collections.defaultdict(collections.Counter)
        # (layer, receiver) -> the first position whose increments have not all arrived
        # (set from the first step that posts or ends: a resumed run starts past 0)
        self._complete: dict[tuple[str, int], int] = {}
        self._ended: int | None = None  # 1 + the last step that ended on every rank
        self._failure: str | None = None  # why the exchange failed, once it has
        self._error: BaseException | None = None  # what raised here, if it failed here
        self._closing = False
        self._link = None
        self._cluster = cluster
        if cluster is not None and cluster.size > 1:
            self._link = IncrementLink(cluster.comm.duplicate(),
                                       {layer: tuple(cluster.rank_of(d) for d in devs)
                                        for layer, devs in replicas.items()},
                                       shapes, self._arrived, self._failed_elsewhere,
                                       self._fail)
        self._courier = threading.Thread(target=self._serve, daemon=True, name="increments")
        self._courier.start()

    def post(self, layer: str, sender: int, step: int, increments: dict) -> None:
        """Send a copy of replica ``sender``'s ``increments`` (array name -> array, on its
        device), its next update of ``step``, to the layer's other replicas."""
        devices = self.replicas[layer]
        if len(devices) < 2:
            return
        source = self.devices[devices[sender]]
        snapshot = {k: source.copy_from(v) for k, v in increments.items()}
        source.synchronize()
        with self._cv:
            self._raise_if_failed()
            self._begin(step)
            position = self._position(layer, sender, step)
            self._own[(layer, sender)] = [step, position - step * self._per_step[layer] + 1]
            for receiver in self.local[layer]:
                if receiver != sender:
                    self._outbox.append((layer, receiver, position, sender, snapshot))
            if self._link is not None and layer in self._link.peers:
                self._outbox.append((layer, None, position, sender, snapshot))
            self._cv.notify_all()

    def step_ended(self, step: int) -> None:
        """Step ``step`` ended on every rank (see the module docstring): a drain waits
        for the increments posted in it."""
        with self._cv:
            self._begin(step)
            self._ended = step + 1
            self._cv.notify_all()

    def take(self, layer: str, receiver: int, step: int) -> list[dict]:
        """The increments that replica ``receiver`` of ``layer`` adds before a forward in
        ``step`` after the updates it made so far: every one arrived at an earlier
        position, after waiting for those that would otherwise be more than S steps
        late, in the order to add them (by position, then by sender)."""
        key = (layer, receiver)
        per_step = self._per_step[layer]
        with self._cv:
            now = self._position(layer, receiver, step)
            due = now - self.staleness * per_step
            waited = False
            bound = self._bound(f"layer {layer}'s increments")
            # (nothing is due before this exchange's first post or ended step)
            while self._complete and self._complete[key] < due:
                self._raise_if_failed()
                if bound is not None:
                    bound.check()
                if not waited:
                    self.record.waits += 1
                    waited = True
                self._cv.wait(_POLL_SECONDS)
            self._raise_if_failed()
            inbox = self._inbox[key]
            ready = sorted((entry for entry in inbox if entry[0] < now), key=lambda e: e[:2])
            self._inbox[key] = [entry for entry in inbox if entry[0] >= now]
            for i, _, _ in ready:
                late = (now - 1 - i) // per_step
                self.record.max_late = max(self.record.max_late, late)
                self.record.late_counts[late] += 1
                self.record.added += 1
        return [arrays for _, _, arrays in ready]

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

    def _position(self, layer: str, replica: int, step: int) -> int:
        """(Holding the lock.)  The position of replica ``replica``'s next update of
        ``layer`` in ``step`` (see the module docstring)."""
        made_in, made = self._own.get((layer, replica), (step, 0))
        return step * self._per_step[layer] + (made if made_in == step else 0)

    def _begin(self, step: int) -> None:
        """(Holding the lock.)  The first step that posts or ends here starts the count
        of arrived positions: nothing is due before it (a resumed run starts past 0,
        and its executor drains, and so takes, before its step count is set)."""
        if self._complete:
            return
        for layer, receivers in self.local.items():
            for receiver in receivers:
                self._complete[(layer, receiver)] = step * self._per_step[layer]
                self._advance((layer, receiver))

    def _advance(self, key: tuple[str, int]) -> None:
        """(Holding the lock.)  Move past the positions whose R - 1 increments arrived."""
        if key not in self._complete:
            return
        got, due = self._got[key], len(self.replicas[key[0]]) - 1
        while got[self._complete[key]] >= due:
            del got[self._complete[key]]
            self._complete[key] += 1

    def _settled(self) -> bool:
        """(Holding the lock.)  Nothing to send or deliver, and every increment of the
        steps that ended here arrived."""
        if self._outbox:
            return False
        if self._ended is None:
            return True
        return all(self._complete[(layer, q)] >= self._ended * self._per_step[layer]
                   for layer, receivers in self.local.items() for q in receivers)

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

    def _arrived(self, layer: str, position: int, sender: int, arrays: dict) -> None:
        """(On the link's thread.)  Replica ``sender``'s increment at ``position``, from
        another rank, as host arrays: for the courier to copy onto every replica of
        ``layer`` here."""
        with self._cv:
            for receiver in self.local[layer]:
                self._outbox.append((layer, receiver, position, sender, arrays))
            self._cv.notify_all()

    def _serve(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._outbox and not self._closing:
                        self._cv.wait(_POLL_SECONDS)
                    if self._closing:
                        return
                    layer, receiver, position, sender, arrays = self._outbox.popleft()
                if receiver is None:
                    self._send_out(layer, position, sender, arrays)
                else:
                    self._deliver(layer, receiver, position, sender, arrays)
        except BaseException as error:  # noqa: BLE001 - handed to every caller
            self._fail(error)

    def _send_out(self, layer: str, position: int, sender: int, snapshot: dict) -> None:
        source = self.devices[self.replicas[layer][sender]]
        source.activate()
        self._link.send_increments(layer, position, sender, {k: source.to_host(v)
                                                         for k, v in snapshot.items()})

    def _deliver(self, layer: str, receiver: int, position: int, sender: int,
                 arrays: dict) -> None:
        """Copy replica ``sender``'s ``arrays`` (of any device, or the host) onto replica
        ``receiver``."""
        if self._delay is not None:
            self._delay()
        target = self.devices[self.replicas[layer][receiver]]
        target.activate()
        arrived = {k: target.copy_from(v) for k, v in arrays.items()}
        target.synchronize()
        with self._cv:
            key = (layer, receiver)
            self._inbox[key].append((position, sender, arrived))
            self._got[key][position] += 1
            self._advance(key)
            self._cv.notify_all()


__all__ = ["ExchangeFailed", "IncrementExchange", "LatenessRecord"]
