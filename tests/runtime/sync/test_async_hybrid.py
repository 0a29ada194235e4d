"""``--sync async:S`` in a hybrid net (convnet/runtime/processes/increment_exchange.py).

The steps stay lockstep; only the replicated layers' increments move apart.
Checked here: a net without replicated layers is synchronous SGD bit for bit;
with S = 0 every increment is added when synchronous SGD would add the update,
so the weights are sync's up to float rounding; no increment is ever added
more than S steps late (checked from a log of the posts kept outside the
exchange, against deliveries slowed on purpose); the replicas agree once
drained; and a failing replica or courier ends the step with its error,
never a hang.
"""

from __future__ import annotations

import collections
import threading
import time

import numpy as np
import pytest

from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.processes.increment_exchange import ExchangeFailed
from tests.support.plans import SMALL_HYBRID, fc_net, small_batches
from tests.support.threads import within

GPUS = (0, 1)
MINI = 8
HANG_SECONDS = 30
MODEL_PARALLEL = [("fca", "fc", ["data"], [0], 0), ("fcb", "fc", ["data"], [1], 0),
                  ("top", "fc", ["fca", "fcb"], [0], 0), ("probs", "softmax", ["top"], None, 0),
                  ("cost", "cost.logreg", ["labels", "probs"], [0], 0)]


def _batches(count: int):
    return small_batches(count, seed=7, n=MINI)


def _executor(spec, staleness=None, delay=None, parallel=True):
    net = fc_net(spec)
    plan = make_plan(net, GPUS, MINI)
    return Executor(net, plan, make_devices(GPUS, "cpu"), seed=3, parallel=parallel,
                    async_staleness=staleness, exchange_delay=delay)


def _train(executor, batches):
    try:
        within(HANG_SECONDS, lambda: [executor.step(b) for b in batches])
        return executor.state_arrays(), executor.evaluate(batches[0]).costs
    finally:
        executor.close()


def test_the_plan_is_hybrid_and_keeps_its_lockstep_tasks():
    executor = _executor(SMALL_HYBRID, staleness=2)
    try:
        assert executor.plan.scheme == "hybrid"
        assert set(executor.exchange.replicas) == {"fc1"}  # the one replicated layer
        kinds = collections.Counter(t.kind for t in executor.train_tasks())
        assert kinds["allreduce"] == 0  # its increments move beside the step instead
        assert kinds["forward"] == len([op for op in executor.plan.ops if op.kind == "forward"])
    finally:
        executor.close()


def test_without_replicated_layers_async_is_sync_bit_for_bit():
    expected, expected_costs = _train(_executor(MODEL_PARALLEL), _batches(6))
    got, got_costs = _train(_executor(MODEL_PARALLEL, staleness=2), _batches(6))
    assert expected_costs == got_costs
    for key in expected:
        assert np.array_equal(expected[key], got[key]), key


@pytest.mark.parametrize("parallel", [True, False])
def test_with_s_0_the_shard_updates_add_up_to_sync(parallel):
    """Each replica's update with 1/R of the rate, plus the others' increments of the
    same step before the next forward: sync's weights, up to float rounding."""
    expected, expected_costs = _train(_executor(SMALL_HYBRID, parallel=parallel), _batches(8))
    got, got_costs = _train(_executor(SMALL_HYBRID, staleness=0, parallel=parallel),
                            _batches(8))
    assert expected.keys() == got.keys()
    for key in expected:
        if "momentum" in key:  # sync's is the sum, here each replica's own part of it
            continue
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-4, atol=1e-6, err_msg=key)
    assert got_costs["cost"]["cost"] == pytest.approx(expected_costs["cost"]["cost"], rel=1e-4)


class _PostLog:
    """Every post and every take of an exchange, to check the bound from outside it:
    before replica q's forward in step t, every increment posted to q in a step up to
    t - 1 - S must have been handed to it."""

    def __init__(self, exchange, staleness: int):
        self.posted = collections.Counter()  # (layer, receiver, step) -> increments
        self.taken = collections.Counter()  # (layer, receiver) -> increments so far
        self.violations = []
        self.late_adds = 0
        post, take = exchange.post, exchange.take
        lock = threading.Lock()

        def logged_post(layer, sender, step, increments):
            with lock:
                for q in range(len(exchange.replicas[layer])):
                    if q != sender:
                        self.posted[(layer, q, step)] += 1
            post(layer, sender, step, increments)

        def logged_take(layer, receiver, step):
            got = take(layer, receiver, step)
            with lock:
                self.taken[(layer, receiver)] += len(got)
                due = sum(n for (l, q, s), n in self.posted.items()
                          if (l, q) == (layer, receiver) and s <= step - 1 - staleness)
                on_time = sum(n for (l, q, s), n in self.posted.items()
                              if (l, q) == (layer, receiver) and s <= step - 1)
                if self.taken[(layer, receiver)] < due:
                    self.violations.append((layer, receiver, step))
                self.late_adds += self.taken[(layer, receiver)] < on_time
            return got

        exchange.post, exchange.take = logged_post, logged_take


@pytest.mark.parametrize("staleness", [0, 1, 3])
def test_no_increment_is_added_more_than_s_steps_late(staleness):
    executor = _executor(SMALL_HYBRID, staleness=staleness, delay=lambda: time.sleep(0.004))
    log = _PostLog(executor.exchange, staleness)
    try:
        within(HANG_SECONDS, lambda: [executor.step(b) for b in _batches(20)])
        record = executor.exchange.record
    finally:
        executor.close()
    assert log.violations == []
    assert record.max_late <= staleness
    if staleness == 0:
        assert log.late_adds == 0 and record.waits > 0  # the slowed courier was waited for
    else:
        assert log.late_adds > 0  # the slow deliveries were late, within the bound


def test_the_log_sees_a_bound_broken():
    """The check above can fail: a log that expects S = 0 of a run with S = 3 and slow
    deliveries finds increments taken late."""
    executor = _executor(SMALL_HYBRID, staleness=3, delay=lambda: time.sleep(0.004))
    log = _PostLog(executor.exchange, 0)
    try:
        within(HANG_SECONDS, lambda: [executor.step(b) for b in _batches(20)])
    finally:
        executor.close()
    assert log.violations


def test_replicas_agree_once_drained():
    executor = _executor(SMALL_HYBRID, staleness=3, delay=lambda: time.sleep(0.002))
    try:
        within(HANG_SECONDS, lambda: [executor.step(b) for b in _batches(10)])
        within(HANG_SECONDS, executor.drain)
        first, second = executor.store.weights["fc1"]
        for key in first:
            np.testing.assert_allclose(first[key], second[key], rtol=1e-5, atol=1e-7)
    finally:
        executor.close()


def test_a_failing_replica_ends_the_step_with_its_error():
    executor = _executor(SMALL_HYBRID, staleness=1)
    update = executor._update

    def failing(task, buffers, device):
        if executor.step_count == 3 and task.op.layer == "fc1" and task.op.replica == 1:
            raise RuntimeError("device lost")
        update(task, buffers, device)

    executor._actions[next(a for a in executor._actions if a.value == "update")] = failing
    try:
        with pytest.raises(RuntimeError, match="device lost"):
            within(HANG_SECONDS, lambda: [executor.step(b) for b in _batches(6)])
    finally:
        within(HANG_SECONDS, executor.close)


def test_a_failing_courier_ends_the_wait_with_its_error():
    calls = []

    def delay():
        calls.append(1)
        if len(calls) > 3:
            raise OSError("link down")

    executor = _executor(SMALL_HYBRID, staleness=0, delay=delay)
    try:
        with pytest.raises(ExchangeFailed, match="OSError: link down"):
            within(HANG_SECONDS, lambda: [executor.step(b) for b in _batches(10)])
        with pytest.raises(ExchangeFailed):  # and a test afterwards says so too
            within(HANG_SECONDS, lambda: executor.evaluate(_batches(1)[0]))
    finally:
        within(HANG_SECONDS, executor.close)
