"""``--sync async:S`` of a hybrid net across processes (convnet/runtime/processes/increment_exchange.py,
increment_link.py).

Each case runs ``tests/support/mpi_programs/hybrid_async_steps.py`` under
``mpiexec`` with one logical device per rank: the model-parallel layers
cross processes in lockstep, and the replicated layer's increments go
between the ranks apart.  Checked as in one process
(tests/runtime/sync/test_async_hybrid.py): with S = 0 every rank holds sync's weights up
to float rounding; with deliveries slowed on purpose no increment is added
more than S steps late (checked from a log of every post and take on both
ranks, kept outside the exchange); the replicas agree once drained; and a
failing replica or courier ends every process with its error, at once.
"""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from tests.support.mpi import needs_mpi, run_failing, run_ranks
from tests.support.mpi_programs import hybrid_async_steps as program

PROGRAM = program.__file__
RANKS = 2
SLOW_STEPS = 20
HANG_SECONDS = 30

pytestmark = needs_mpi


def _run(folder, mode: str, staleness: int, steps: int) -> list[dict]:
    return run_ranks(RANKS, PROGRAM, [mode, str(staleness), str(steps)], folder, mode)


def _sync(mode: str, devices: int, steps: int):
    """Synchronous SGD of mode ``mode``'s net and minibatches over the same logical
    devices in this process: (its plan, state, costs of the evaluation)."""
    net = program.net_of(mode)
    plan = make_plan(net, (0,) * devices, program.MINI)
    sync = Executor(net, plan, make_devices((0,) * devices, "cpu"), seed=3)
    try:
        for batch in program.training_batches(mode, steps):
            sync.step(batch)
        evaluation = sync.evaluate(program.batches(steps + 1)[-1]).costs["cost"]
        return plan, sync.state_arrays(), evaluation
    finally:
        sync.close()


@pytest.mark.parametrize("mode, devices", [("train", 2), ("train-wide", 4),
                                           ("train-three", 4)])
def test_with_s_0_every_rank_holds_syncs_weights(tmp_path, mode, devices):
    """Each replica's update with 1/R of the rate, plus the other replicas' increments of
    the same step before the next forward: sync's weights, on every replica of every
    rank (in the wide net two replicas per rank; in the three-level net with a layer
    that updates twice per step and an uneven last minibatch)."""
    steps = 6
    ranks = _run(tmp_path, mode, 0, steps)
    plan, want, evaluation = _sync(mode, devices, steps)
    compared = set()
    for got in ranks:
        for key in (k for k in got if k.startswith("weights/")):
            _, layer, replica, array = key.split("/")
            np.testing.assert_allclose(got[key], want[f"weights/{layer}/{array}"], rtol=1e-5,
                                       atol=1e-6, err_msg=key)
            compared.add((layer, int(replica)))
    assert compared == {(name, q) for name, p in plan.layers.items() if p.param_count
                        for q in range(p.replicas)}
    # the checkpoint is replica 0's, gathered on rank 0
    for key in (k for k in want if k.startswith("weights/")):
        np.testing.assert_allclose(ranks[0][f"state/{key}"], want[key], rtol=1e-5, atol=1e-6)
    assert not any(k.startswith("state/") for k in ranks[1])
    assert np.array_equal(ranks[0]["evaluation"], ranks[1]["evaluation"])
    np.testing.assert_allclose(ranks[0]["evaluation"],
                               [evaluation["cost"], evaluation["error"]], rtol=1e-5)


def _lateness(ranks: list[dict], staleness: int) -> tuple[list, int]:
    """From the programs' own logs: (the takes that left an increment posted to their
    replica more than ``staleness`` steps before untaken, the takes that left one of
    the previous step untaken: late adds)."""
    posted = collections.Counter()  # (receiver, step) -> increments posted to it then
    for r in ranks:
        for sender, step in r["posts"]:
            for receiver in range(RANKS):
                if receiver != sender:
                    posted[(receiver, int(step))] += 1
    violations, late = [], 0
    for r in ranks:
        taken = collections.Counter()
        for receiver, step, count in r["takes"]:
            taken[int(receiver)] += int(count)
            due = sum(n for (q, s), n in posted.items() if q == receiver
                      and s <= step - 1 - staleness)
            on_time = sum(n for (q, s), n in posted.items() if q == receiver and s <= step - 1)
            if taken[int(receiver)] < due:
                violations.append((int(receiver), int(step)))
            late += taken[int(receiver)] < on_time
    return violations, late


@pytest.fixture(scope="module")
def slow_runs(tmp_path_factory):
    """The slowed runs with S = 0 and S = 3, made once for the tests below."""
    return {s: _run(tmp_path_factory.mktemp(f"slow{s}"), "slow", s, SLOW_STEPS)
            for s in (0, 3)}


@pytest.mark.parametrize("staleness", [0, 3])
def test_no_increment_is_added_more_than_s_steps_late(slow_runs, staleness):
    ranks = slow_runs[staleness]
    violations, late = _lateness(ranks, staleness)
    assert violations == []
    for r in ranks:
        assert int(r["max_late"]) <= staleness
        assert len(r["posts"]) == SLOW_STEPS  # one update of its replica per step
        assert int(r["added"]) == SLOW_STEPS  # every one the other rank posted, drained
    if staleness == 0:
        assert late == 0 and all(int(r["waits"]) > 0 for r in ranks)  # slowed: waited for
    else:
        assert late > 0  # the slow deliveries were late, within the bound


def test_the_log_sees_a_bound_broken(slow_runs):
    """The check above can fail: against S = 0, the run with S = 3 took increments late."""
    violations, _ = _lateness(slow_runs[3], 0)
    assert violations


@pytest.mark.parametrize("staleness", [0, 3])
def test_replicas_on_both_ranks_agree_once_drained(slow_runs, staleness):
    first, second = slow_runs[staleness]
    for key in ("W0", "b"):
        np.testing.assert_allclose(first[f"weights/fc1/0/{key}"],
                                   second[f"weights/fc1/1/{key}"], rtol=1e-5, atol=1e-7)


def _fail(tmp_path, mode: str, staleness: int = 1) -> str:
    return run_failing(RANKS, PROGRAM, [mode, str(staleness), "200"], tmp_path, mode,
                       HANG_SECONDS)


def test_a_failing_replica_ends_every_process_with_its_error(tmp_path):
    stderr = _fail(tmp_path, "fail-replica")
    # not an engine error: the command line's line for a bug, then its traceback
    assert "error: rank 1: internal error: RuntimeError: device lost" in stderr


def test_a_failing_courier_ends_every_process_with_its_error(tmp_path):
    """Rank 1's courier fails; whichever rank's wait sees it first ends the run."""
    stderr = _fail(tmp_path, "fail-courier")
    assert re.search(r"error: rank [01]: moving the replicas' increments failed"
                     r"( on rank 1)?: OSError: link down", stderr), stderr
    assert "Traceback" not in stderr


def test_a_failing_link_ends_a_rank_that_waits_for_it(tmp_path):
    """Rank 1's increment of step 3 never leaves; rank 0 waits for it before its forward
    in step 4, and rank 1, past its own wait, for rank 0 in a lockstep receive: the
    failure must reach rank 0's exchange, whose wait then ends the run."""
    stderr = _fail(tmp_path, "fail-link", staleness=0)
    assert "error: rank 0: moving the replicas' increments failed on rank 1: OSError: " \
           "link down" in stderr, stderr
    assert "Traceback" not in stderr
