"""``--sync async:S`` across processes (convnet/runtime/sync/async_replicas.py, rank_courier.py).

Each case runs ``tests/support/mpi_programs/async_steps.py`` under ``mpiexec`` with
one replica per rank.  With every replica held to one shard per minibatch
and S = 0 the run must be synchronous SGD up to float rounding on every
rank; with a straggler, every shard must be trained exactly once over the
ranks, the faster rank must train more, and no shard may start before the
shards of the steps more than S back have finished (checked from a log the
program keeps outside the machinery); a failing replica must end the run
with its error, at once.
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from tests.support.mpi import needs_mpi, run_failing, run_ranks
from tests.support.mpi_programs import async_steps

PROGRAM = async_steps.__file__
RANKS = 2

pytestmark = needs_mpi


def _run(tmp_path, mode: str, staleness: int, steps: int) -> list[dict]:
    return run_ranks(RANKS, PROGRAM, [mode, str(staleness), str(steps)], tmp_path, mode)


def test_one_shard_per_replica_and_step_with_s0_is_synchronous_sgd(tmp_path):
    steps = 6
    ranks = _run(tmp_path, "lockstep", 0, steps)
    net = async_steps.fc_net(async_steps.LAYERS)
    sync = Executor(net, make_plan(net, (0, 0), async_steps.MINI), make_devices((0, 0), "cpu"),
                    seed=3)
    try:
        data = async_steps.batches(steps + 1)
        for batch in data[:steps]:
            sync.step(batch)
        want = sync.state_arrays()
        evaluation = sync.evaluate(data[-1]).costs["cost"]
    finally:
        sync.close()
    weights = [k for k in want if k.startswith("weights/")]
    assert weights
    for got in ranks:
        assert int(got["cases"]) == steps * async_steps.MINI  # every rank saw every cost
        assert list(got["shards"]) == [steps]  # one shard of each minibatch per replica
        for key in weights:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    # every rank returns the same evaluation, its pieces evaluated by both ranks
    assert np.array_equal(ranks[0]["evaluation"], ranks[1]["evaluation"])
    np.testing.assert_allclose(ranks[0]["evaluation"],
                               [evaluation["cost"], evaluation["error"]], rtol=1e-5)
    # the sums of the momenta are sync's (each replica's own is its shards' share)
    for key in (k for k in want if k.startswith("momentum/")):
        np.testing.assert_allclose(ranks[0][key] + ranks[1][key], want[key], rtol=1e-5,
                                   atol=1e-6, err_msg=key)


def _largest_lead(ranks: list[dict], replicas: int) -> int:
    """From the programs' own log: over every shard start, its step minus the oldest step
    with a shard not yet ended at that moment (on any rank)."""
    ends = {int(s): ns for r in ranks for s, ns in r["ends"]}
    lead = 0
    for r in ranks:
        for shard, started in r["starts"]:
            unfinished = [s // replicas for s, ended in ends.items() if ended > started]
            lead = max(lead, int(shard) // replicas - min(unfinished))
    return lead


@pytest.mark.parametrize("staleness", [0, 2])
def test_a_straggler_rank_takes_fewer_shards_and_the_bound_holds(tmp_path, staleness):
    steps = 24
    ranks = _run(tmp_path, "log", staleness, steps)
    trained = sorted(int(s) for r in ranks for s, _ in r["starts"])
    assert trained == list(range(steps * RANKS))  # every shard once, over both ranks
    assert [int(r["shards"][0]) for r in ranks] == [len(r["starts"]) for r in ranks]
    for r in ranks:
        assert int(r["cases"]) == steps * async_steps.MINI
    assert _largest_lead(ranks, RANKS) <= staleness
    assert max(int(r["max_lead"]) for r in ranks) <= staleness
    if staleness:  # S = 0 is lockstep: the fast rank may not start the next step early
        assert len(ranks[0]["starts"]) > len(ranks[1]["starts"])
    for key in (k for k in ranks[0] if k.startswith("weights/")):  # drained: they agree
        np.testing.assert_allclose(ranks[0][key], ranks[1][key], rtol=1e-5, atol=1e-6)


def test_a_lagging_training_loop_loses_no_shard_and_keeps_none(tmp_path):
    """Rank 1's loop starts late, so rank 0 trains shards before rank 1 has queued them:
    still every shard once, the bound, every cost on every rank, and no shard data left
    behind on either rank."""
    steps = 24
    ranks = _run(tmp_path, "lag", 2, steps)
    trained = sorted(int(s) for r in ranks for s, _ in r["starts"])
    assert trained == list(range(steps * RANKS))
    first = [min(int(s) for s, _ in r["starts"]) for r in ranks]
    assert first[0] == 0 and first[1] > RANKS  # rank 0 trained ahead of rank 1's loop
    assert len(ranks[1]["starts"]) > 0  # and rank 1 took part once it caught up
    assert _largest_lead(ranks, RANKS) <= 2
    for r in ranks:
        assert int(r["cases"]) == steps * async_steps.MINI
        assert int(r["leftover"]) == 0


def test_without_a_bound_the_log_sees_a_larger_lead(tmp_path):
    """The check above can fail: a loose bound lets the fast rank run further ahead."""
    ranks = _run(tmp_path, "log", 50, 24)
    assert _largest_lead(ranks, RANKS) > 2


def test_a_failing_replica_ends_every_process_with_its_error(tmp_path):
    stderr = run_failing(RANKS, PROGRAM, ["fail", "1", "200"], tmp_path, "fail")
    assert "error: rank 1: replica 1 (device 1) failed: RuntimeError: injected failure" \
        in stderr
    assert "Traceback" not in stderr
