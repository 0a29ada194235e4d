"""``--sync async:0`` of a hybrid net is synchronous SGD up to float rounding, also where
the lockstep schedule is not one update per step and one even shard per replica:

* a three-level net (4, 2 and 1 replicas) whose 2-replica layer updates twice per
  minibatch: its second pass must read the other replica's first update, as the
  all-reduce gives it under sync;
* an uneven last minibatch (43 cases cut 22/21): every replica's part of the update is
  weighted by the minibatch (1/M), not by its own shard (1/(R n_r)).

Large learning rates make a missed or mis-weighted increment show far above float
rounding (about 1e-2 before the positions of convnet/runtime/processes/increment_exchange.py).

And it is bitwise reproducible: a replica adds the increments it takes by position and
sender, not in the order they arrived (which follows thread timing, and changed the
last bits of the weights from run to run).
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.processes.increment_exchange import IncrementExchange
from convnet.runtime.step.executor import Executor
from tests.support.plans import (SMALL_HYBRID, THREE_LEVELS, fc_net, small_batches,
                                 with_rates)
from tests.support.threads import within

HANG_SECONDS = 30


def _weights(spec, gpus, mini, batches, staleness, parallel=True):
    net = with_rates(fc_net(spec), 1.0)
    executor = Executor(net, make_plan(net, gpus, mini), make_devices(gpus, "cpu"), seed=3,
                        parallel=parallel, async_staleness=staleness)
    try:
        within(HANG_SECONDS, lambda: [executor.step(b) for b in batches])
        state = executor.state_arrays()  # drained under async
    finally:
        executor.close()
    return {k: v for k, v in state.items() if "momentum" not in k}  # async's is per replica


def _assert_as_sync(spec, gpus, mini, batches, parallel=True):
    expected = _weights(spec, gpus, mini, batches, None, parallel)
    got = _weights(spec, gpus, mini, batches, 0, parallel)
    assert expected.keys() == got.keys()
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], rtol=0, atol=2e-6, err_msg=key)


def test_the_three_level_net_updates_its_middle_layer_twice_a_step():
    net = fc_net(THREE_LEVELS)
    plan = make_plan(net, (0, 1, 2, 3), 8)
    updates = [op for op in plan.ops if op.kind == "update" and op.layer == "fc2"]
    assert plan.scheme == "hybrid" and len(updates) == 4  # 2 replicas x 2 passes
    assert {op.pass_index for op in updates} == {1, 3}


@pytest.mark.parametrize("parallel", [True, False])
def test_a_layer_updating_twice_per_step_reads_the_others_first_update(parallel):
    _assert_as_sync(THREE_LEVELS, (0, 1, 2, 3), 8, small_batches(2, seed=7, n=8), parallel)


@pytest.mark.parametrize("parallel", [True, False])
def test_an_uneven_tail_is_weighted_by_the_minibatch(parallel):
    batches = small_batches(2, seed=7, n=44)
    batches[1] = [column[:43] for column in batches[1]]  # cut 22/21
    _assert_as_sync(SMALL_HYBRID, (0, 1), 44, batches, parallel)


def test_an_uneven_tail_on_three_levels():
    batches = small_batches(2, seed=5, n=8)
    batches[1] = [column[:7] for column in batches[1]]
    _assert_as_sync(THREE_LEVELS, (0, 1, 2, 3), 8, batches)


def test_the_increments_are_added_by_sender_not_in_arrival_order():
    """Replica 2's increment arrives at replica 0 before replica 1's (posted first, and
    the courier delivers in posting order); replica 0 still adds replica 1's first."""
    exchange = IncrementExchange({"fc": (0, 1, 2)}, make_devices((0, 1, 2), "cpu"), 0,
                                 {("fc", q): 1 for q in range(3)})
    try:
        for sender in (2, 1):
            exchange.post("fc", sender, 0, {"W": np.full(3, float(sender), np.float32)})
            within(HANG_SECONDS, exchange.drain)  # delivered before the next is posted
        taken = within(HANG_SECONDS, lambda: exchange.take("fc", 0, 1))
    finally:
        exchange.close()
    assert [float(increments["W"][0]) for increments in taken] == [1.0, 2.0]


def test_async_0_of_the_three_level_net_is_bitwise_reproducible():
    """Eight runs of 10 minibatches of 64 end with the same bits, within 1e-4 of sync."""
    batches = small_batches(10, seed=7, n=64)
    runs = [_weights(THREE_LEVELS, (0, 1, 2, 3), 64, batches, 0) for _ in range(8)]
    for run in runs[1:]:
        assert run.keys() == runs[0].keys()
        for key in run:
            np.testing.assert_array_equal(run[key], runs[0][key], err_msg=key)
    expected = _weights(THREE_LEVELS, (0, 1, 2, 3), 64, batches, None)
    for key in expected:
        np.testing.assert_allclose(runs[0][key], expected[key], rtol=0, atol=1e-4, err_msg=key)


def test_a_resumed_run_counts_its_increments_from_its_own_step():
    """A resume loads the weights (a drain, which takes) before it sets the step count:
    the positions before the resumed step are never due."""
    net = with_rates(fc_net(SMALL_HYBRID), 1.0)
    executor = Executor(net, make_plan(net, (0, 1), 8), make_devices((0, 1), "cpu"), seed=3,
                        async_staleness=0)
    try:
        executor.load_state_arrays(executor.state_arrays())
        executor.step_count = 50
        within(HANG_SECONDS, lambda: [executor.step(b) for b in small_batches(3, seed=1)])
        first, second = executor.store.weights["fc1"]
        within(HANG_SECONDS, executor.drain)
        np.testing.assert_allclose(first["W0"], second["W0"], rtol=1e-5, atol=1e-6)
    finally:
        executor.close()
