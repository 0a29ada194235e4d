"""``--sync async:S`` of a hybrid net across processes, as one process of an MPI run.

``mpiexec -n 2 python hybrid_async_steps.py MODE S STEPS OUT`` trains the
small hybrid net of tests/runtime/sync/test_async_hybrid.py (``fc1`` replicated on both
ranks, model-parallel fc layers under it) on one logical device per rank,
lockstep with the replicated layer's increments exchanged apart with
staleness bound S, and writes what the test checks to ``OUT.RANK.npz``:

* ``train``: after the steps and a drain, the weights of every replica on
  this rank (``weights/LAYER/REPLICA/KEY``), the checkpoint state (rank 0)
  and the costs of an evaluation.
* ``train-wide``: the same with :data:`WIDE` on two logical devices per
  rank, so that each rank also copies increments between its own replicas,
  and hands each one from the other rank to both of them.
* ``train-three``: the same with :data:`~tests.support.plans.THREE_LEVELS` on two
  logical devices per rank (``fc2``, on one device of each rank, updates twice
  per step), large learning rates (:data:`THREE_LEVEL_RATE`) and the last
  minibatch cut to :data:`TAIL` cases (shards of 2 and 1).
* ``slow``: every delivery of an increment sleeps first, so they fall
  behind the steps.  Writes, kept outside the exchange, every post
  ``(sender, step)`` and every take ``(receiver, step, increments taken)``
  of ``fc1`` on this rank, the exchange's lateness record, and this rank's
  replica of ``fc1`` after a drain.
* ``fail-replica``: rank 1's update of its ``fc1`` replica raises in step 3.
* ``fail-courier``: rank 1's courier raises on its fourth delivery.
* ``fail-link``: sending rank 1's increment of step 3 to rank 0 fails, a
  while after it was posted: by then rank 1 has gone on into step 4, where
  it waits in a lockstep receive for rank 0, which waits for that increment.

The failing modes go through the command line's rank handling (an error
ends every process).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from convnet.app.launch import run_as_rank
from convnet.plan.planner import make_plan
from convnet.runtime.processes.cluster import Cluster, cluster_devices, connect
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.tasks import TaskAction
from tests.support.mpi_programs import as_command_line
from tests.support.plans import SMALL_HYBRID, THREE_LEVELS, fc_net, small_batches, with_rates

MINI = 8
SLOW_SECONDS = 0.02  # each delivery in mode slow
HOLD_SECONDS = 0.2  # how long rank 1's update waits in mode fail-link
LATE_FAILURE_SECONDS = 0.3  # how long its failing send takes then
REPLICATED = "fc1"
#: fc1 replicated on all four devices of two ranks, model-parallel layers on 0 and 3
WIDE = [("fc1", "fc", ["data"], [0, 1, 2, 3], 0),
        ("fca", "fc", ["fc1"], [0], 0), ("fcb", "fc", ["fc1"], [3], 0),
        ("top", "fc", ["fca", "fcb"], [0], 0), ("probs", "softmax", ["top"], None, 0),
        ("cost", "cost.logreg", ["labels", "probs"], [0], 0)]
#: mode -> (net, logical devices per rank); else SMALL_HYBRID on one
NETS = {"train-wide": (WIDE, 2), "train-three": (THREE_LEVELS, 2)}
THREE_LEVEL_RATE = 1.0
TAIL = 7  # the cases of the last training minibatch of train-three


def net_of(mode: str):
    """The net mode ``mode`` trains."""
    spec = NETS.get(mode, (SMALL_HYBRID, 1))[0]
    return with_rates(fc_net(spec), THREE_LEVEL_RATE) if mode == "train-three" else fc_net(spec)


def training_batches(mode: str, steps: int):
    """The ``steps`` minibatches mode ``mode`` trains on."""
    data = batches(steps)
    if mode == "train-three":
        data[-1] = [column[:TAIL] for column in data[-1]]
    return data


def batches(count: int):
    """The minibatches of tests/runtime/sync/test_async_hybrid.py."""
    return small_batches(count, seed=7, n=MINI)


def make(net, staleness: int, cluster: Cluster, delay=None) -> Executor:
    plan = make_plan(net, (0,) * cluster.num_devices, MINI)
    return Executor(net, plan, cluster_devices(cluster, (0,) * cluster.devices_per_rank, "cpu"),
                    seed=3, cluster=cluster, async_staleness=staleness, exchange_delay=delay)


def log_exchange(exchange, posts: list, takes: list) -> None:
    """Record every post and take of the replicated layer, outside the exchange."""
    post, take = exchange.post, exchange.take

    def logged_post(layer, sender, step, increments):
        posts.append((sender, step))
        post(layer, sender, step, increments)

    def logged_take(layer, receiver, step):
        got = take(layer, receiver, step)
        takes.append((receiver, step, len(got)))
        return got

    exchange.post, exchange.take = logged_post, logged_take


def wrap_update(executor: Executor, before) -> None:
    """Call ``before(task)`` before every update of the replicated layer."""
    update = executor._actions[TaskAction.UPDATE]

    def wrapped(task, buffers, device):
        if task.op.layer == REPLICATED:
            before(task)
        update(task, buffers, device)

    executor._actions[TaskAction.UPDATE] = wrapped


def fail_update_in_step(executor: Executor, rank: int, step: int) -> None:
    """Make the update of the replicated layer on ``rank`` raise in ``step``."""
    def fail(task):
        if executor.cluster.rank == rank and executor.step_count == step:
            raise RuntimeError("device lost")

    wrap_update(executor, fail)


def fail_send_of_step(executor: Executor, rank: int, step: int) -> None:
    """Make sending ``rank``'s increment of ``step`` to the other rank fail, late.  Its
    update in ``step`` waits first, so that the other rank's increment of the step is
    delivered here before this one is posted: the wait before the forward in the next
    step then passes, and the failure comes while this rank is past it."""
    def hold(task):
        if executor.cluster.rank == rank and executor.step_count == step:
            time.sleep(HOLD_SECONDS)

    wrap_update(executor, hold)
    link = executor.exchange._link
    send = link.send_increments

    def failing(layer, position, sender, arrays):
        if executor.cluster.rank == rank and position == step:  # fc1 updates once a step
            time.sleep(LATE_FAILURE_SECONDS)
            raise OSError("link down")
        send(layer, position, sender, arrays)

    link.send_increments = failing


def local_weights(executor: Executor) -> dict:
    """The weights of every replica on this rank, on the host."""
    out = {}
    for layer, replicas in executor.store.weights.items():
        devices = executor.plan.layers[layer].devices
        for q, weights in enumerate(replicas):
            for k, v in (weights or {}).items():
                out[f"weights/{layer}/{q}/{k}"] = np.array(executor.devices[devices[q]].to_host(v))
    return out


def train(argv: list[str]) -> int:
    mode, staleness, steps, out = argv[0], int(argv[1]), int(argv[2]), argv[3]
    per_rank = NETS.get(mode, (SMALL_HYBRID, 1))[1]
    comm, hosts = connect()
    cluster = Cluster(comm, per_rank, hosts)
    delay = None
    if mode == "slow":
        def delay():
            time.sleep(SLOW_SECONDS)
    elif mode == "fail-courier":
        deliveries = []

        def delay():
            deliveries.append(1)
            if comm.rank == 1 and len(deliveries) > 3:
                raise OSError("link down")
    executor = make(net_of(mode), staleness, cluster, delay)
    posts: list = []
    takes: list = []
    results: dict = {}
    try:
        if mode == "slow":
            log_exchange(executor.exchange, posts, takes)
        if mode == "fail-replica":
            fail_update_in_step(executor, 1, 3)
        if mode == "fail-link":
            fail_send_of_step(executor, 1, 3)
        data = training_batches(mode, steps) + batches(steps + 1)[steps:]
        for batch in data[:steps]:
            executor.step(batch)
        executor.drain()
        results.update(local_weights(executor))
        if mode.startswith("train"):
            results.update({f"state/{k}": v for k, v in executor.state_arrays().items()})
            costs = executor.evaluate(data[-1]).costs["cost"]
            results["evaluation"] = np.array([costs["cost"], costs["error"]])
        record = executor.exchange.record
    finally:
        executor.close()
    np.savez(f"{out}.{comm.rank}.npz", **results,
             posts=np.array(posts, np.int64).reshape(-1, 2),
             takes=np.array(takes, np.int64).reshape(-1, 3),
             max_late=record.max_late, waits=record.waits, added=record.added)
    return 0


if __name__ == "__main__":
    sys.exit(run_as_rank(lambda argv: as_command_line(train, argv), sys.argv[1:]))
