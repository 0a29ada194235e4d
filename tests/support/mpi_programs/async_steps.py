"""``--sync async:S`` across processes, as one process of an MPI run.

``mpiexec -n N python async_steps.py MODE S STEPS OUT`` trains the small
data-parallel fc net of tests/runtime/sync/test_async_replicas.py asynchronously with
staleness bound S, one replica per rank, and writes what the test checks to
``OUT.RANK.npz``:

* ``lockstep``: every replica's shard step waits (a collective) until every
  other replica is inside one too, so each replica trains exactly one shard
  of each minibatch; with S = 0 the run is then synchronous SGD up to float
  rounding (the increments are linear in the gradients, momentum included).
  Writes the rank's weights and momentum after a drain, and the costs of an
  evaluation (its pieces shared by the ranks).
* ``log``: rank 1's replica is a straggler (it sleeps 10x as long as rank 0's
  before each shard).
  Writes, kept outside the machinery, when each shard started and ended
  (``time.monotonic_ns``, one clock for all processes of a machine) and its
  number, and the rank's shard count and staleness record.
* ``lag``: like ``log``, but both replicas are equally fast and rank 1's
  training loop starts late: it waits before queueing its first minibatch until
  rank 0 has started ``AHEAD`` shards (rank 0 leaves a file ``OUT.ahead`` then), so
  rank 0 trains shards that rank 1 has not queued yet, until rank 1 catches up
  (rank 0 slows to a straggler's pace from then until rank 1 has started, leaving
  ``OUT.joined``, so that it cannot finish alone however the machine's load
  schedules the two processes).  Also writes how many shards the rank still holds after the
  drain (none should be left).
* ``fail``: rank 1's replica raises on its third shard; the run goes through
  the command line's rank handling (an error ends every process).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from convnet.app.launch import run_as_rank
from convnet.plan.planner import make_plan
from convnet.runtime.sync.async_replicas import AsyncReplicas
from convnet.runtime.processes.cluster import Cluster, cluster_devices, connect
from tests.support.mpi_programs import as_command_line
from tests.support.plans import fc_net, small_batches

MINI = 8
LAYERS = [("fc1", "fc", ["data"], [0, 1], 0), ("fc2", "fc", ["fc1"], [0, 1], 0),
          ("probs", "softmax", ["fc2"], [0, 1], 0),
          ("cost", "cost.logreg", ["labels", "probs"], [0, 1], 0)]
STRAGGLER_SECONDS = 0.03
FAST_SECONDS = 0.003
AHEAD = 4  # shards rank 0 starts in the lag mode before rank 1's loop begins


def batches(count: int):
    return small_batches(count, seed=5, n=MINI)


def make(staleness: int, cluster: Cluster) -> AsyncReplicas:
    net = fc_net(LAYERS)
    plan = make_plan(net, (0,) * cluster.size, MINI)
    return AsyncReplicas(net, plan, cluster_devices(cluster, (0,), "cpu"), staleness,
                         seed=3, cluster=cluster)


def wrap_step(apart: AsyncReplicas, before=None, after=None) -> None:
    """Call ``before(shard number)`` and ``after(shard number)`` around every shard this
    rank's replica trains (the number read from the dropout step the machinery sets)."""
    replica = apart.replicas[0]
    inner = replica.step

    def step(batch, progress=0.0, **kw):
        shard = replica.step_count
        if before is not None:
            before(shard)
        try:
            return inner(batch, progress, **kw)
        finally:
            if after is not None:
                after(shard)

    replica.step = step


def train(argv: list[str]) -> int:
    mode, staleness, steps, out = argv[0], int(argv[1]), int(argv[2]), argv[3]
    comm, hosts = connect()
    cluster = Cluster(comm, 1, hosts)
    apart = make(staleness, cluster)
    events: list[tuple[str, int, int]] = []  # (start|end, shard number, ns)
    try:
        if mode == "lockstep":
            wrap_step(apart, before=lambda shard: comm.allgather(shard))
        elif mode in ("log", "lag"):
            ahead, joined = Path(f"{out}.ahead"), Path(f"{out}.joined")

            def start(shard):
                events.append(("start", shard, time.monotonic_ns()))
                started = sum(what == "start" for what, _, _ in events)
                if mode == "lag" and comm.rank == 0 and started >= AHEAD:
                    ahead.touch()
                    if not joined.exists():  # until rank 1 has started
                        time.sleep(STRAGGLER_SECONDS)
                        return
                if mode == "lag" and comm.rank == 1:
                    joined.touch()
                # rank 0 not too fast either, so that rank 1 takes part
                time.sleep(STRAGGLER_SECONDS if comm.rank == 1 and mode == "log"
                           else FAST_SECONDS)

            wrap_step(apart, before=start,
                      after=lambda shard: events.append(("end", shard, time.monotonic_ns())))
        elif mode == "fail":
            trained = []

            def fail_on_third(shard):
                trained.append(shard)
                if comm.rank == 1 and len(trained) == 3:
                    raise RuntimeError("injected failure")

            wrap_step(apart, before=fail_on_third)
        comm.allgather(None)  # both ranks ready: neither trains the first shards alone
        if mode == "lag" and comm.rank == 1:
            _wait_for(Path(f"{out}.ahead"))
        cases = sum(apart.step(batch).num_cases for batch in batches(steps))
        cases += apart.settle().num_cases
        leftover = len(apart._shards)
        state = apart.replicas[0].state_arrays()
        evaluation = apart.evaluate(batches(steps + 1)[-1]).costs["cost"]
        record = apart.record
    finally:
        apart.close()
    np.savez(f"{out}.{comm.rank}.npz", **state, cases=cases, leftover=leftover,
             evaluation=np.array([evaluation["cost"], evaluation["error"]]),
             shards=np.array(record.shards), max_lead=record.max_lead,
             starts=np.array([(s, ns) for what, s, ns in events if what == "start"], np.int64),
             ends=np.array([(s, ns) for what, s, ns in events if what == "end"], np.int64))
    return 0


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear within {seconds:.0f} s")
        time.sleep(0.001)


if __name__ == "__main__":
    sys.exit(run_as_rank(lambda argv: as_command_line(train, argv), sys.argv[1:]))
