"""Asynchronous data parallelism (``--sync async:S``, convnet/runtime/sync/async_replicas.py).

With one replica it must be synchronous SGD bit for bit; with several, a
minibatch's shard updates must add up to synchronous SGD's update, no replica
may ever start a shard more than S steps ahead of the oldest shard in work
(checked from a log kept outside the machinery), the replicas must agree once
drained, and a failing replica must end the run with its error, never a hang.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convnet.config import load_net
from convnet.config.model import on_one_device
from convnet.errors import DivergedError
from convnet.plan.planner import make_plan
from convnet.runtime.sync.async_replicas import AsyncReplicas, async_replica_devices
from convnet.runtime.sync.replica_threads import ReplicaFailed
from convnet.runtime.devices.slowdown import Slowdown
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from tests.support.plans import SMALL_HYBRID, fc_net, with_rates
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config
from tests.support.threads import within

MINI = 8
GPUS = (0, 1)
DATA_PARALLEL = [("fc1", "fc", ["data"], [0, 1], 0), ("fc2", "fc", ["fc1"], [0, 1], 0),
                 ("probs", "softmax", ["fc2"], [0, 1], 0),
                 ("cost", "cost.logreg", ["labels", "probs"], [0, 1], 0)]
#: Long enough for any of these tiny runs, short enough that a hang fails quickly.
HANG_SECONDS = 30


def _fc_batches(count: int, mini: int = MINI):
    rng = np.random.default_rng(5)
    return [[rng.standard_normal((mini, 4)).astype(np.float32),
             rng.integers(0, 3, (mini, 1)).astype(np.float32)] for _ in range(count)]


def _async(net, staleness=2, slowdown=None, gpus=GPUS, mini=MINI):
    plan = make_plan(net, gpus, mini)
    return AsyncReplicas(net, plan, make_devices(gpus, "cpu"), staleness, seed=3,
                         slowdown=slowdown)


def test_one_replica_is_synchronous_sgd_bit_for_bit(tmp_path):
    """Convolutions, dropout and momentum: the async machinery with one replica trains
    exactly like the lockstep executor on one device."""
    layer_def, params = scaled_config("imagenet-2gpu-data", tmp_path)
    net = on_one_device(load_net(layer_def, params, data_dims={0: IMAGE_DIMS, 1: (1,)},
                                  num_classes=NUM_CLASSES))
    rng = np.random.default_rng(11)
    batches = [[rng.standard_normal((MINI,) + IMAGE_DIMS).astype(np.float32),
                rng.integers(0, NUM_CLASSES, (MINI, 1)).astype(np.float32)] for _ in range(3)]
    plan = make_plan(net, (0,), MINI)
    sync = Executor(net, plan, make_devices((0,), "cpu"), seed=3)
    lone = AsyncReplicas(net, plan, make_devices((0,), "cpu"), staleness=0, seed=3)
    try:
        for batch in batches:
            sync.step(batch)
            lone.step(batch)
        assert sync.evaluate(batches[0]).costs == lone.evaluate(batches[0]).costs
        expected, got = sync.state_arrays(), lone.state_arrays()
        assert expected.keys() == got.keys()
        for key in expected:
            assert np.array_equal(expected[key], got[key]), key
    finally:
        sync.close()
        lone.close()


@pytest.mark.parametrize("cases", [MINI, MINI - 1])
def test_a_minibatchs_shard_updates_add_up_to_the_synchronous_update(cases):
    """The first step (momentum still zero), each replica on one shard of it from the
    initial weights: the learning rates are divided by R, so after a drain every replica
    holds w0 + inc0 + inc1 = sync's update, up to float rounding; also for a short
    minibatch cut unevenly (4 and 3 cases), where each shard's update must weigh its
    cases by 1/M, not by 1/(R n_r)."""
    net = with_rates(fc_net(DATA_PARALLEL), 1.0)
    batch = [column[:cases] for column in _fc_batches(1)[0]]
    plan = make_plan(net, GPUS, MINI)
    sync = Executor(net, plan, make_devices(GPUS, "cpu"), seed=3)
    apart = _async(net)
    both_started = threading.Barrier(2, timeout=HANG_SECONDS)
    for replica in apart.replicas:  # neither may take both shards
        replica.step = lambda b, p=0.0, inner=replica.step, **kw: (both_started.wait(),
                                                                   inner(b, p, **kw))[1]
    try:
        sync.step(batch)
        apart.step(batch)
        apart.drain()
        for name in ("fc1", "fc2"):
            for replica in apart.replicas:
                for k, w in replica.store.weights[name][0].items():
                    np.testing.assert_allclose(w, sync.store.weights[name][0][k], rtol=1e-5,
                                               atol=1e-7, err_msg=f"{name}/{k}")
    finally:
        sync.close()
        apart.close()


def test_replicas_agree_once_drained_and_the_run_keeps_learning():
    net = fc_net(DATA_PARALLEL)
    batches = _fc_batches(30)
    apart = _async(net, staleness=1, slowdown=Slowdown(3.0, 1, len(GPUS)))
    try:
        first = apart.evaluate(batches[0]).costs["cost"]["cost"]
        cases = sum(apart.step(b).num_cases for b in batches)
        last = apart.evaluate(batches[0]).costs["cost"]["cost"]
        # The drain keeps the costs of the shards it waited for for the next step: every
        # shard of the 30 steps is reported once, some of the 31st's maybe.
        cases += apart.step(batches[0]).num_cases
        assert 30 * MINI <= cases <= 31 * MINI
        assert 60 <= sum(apart.record.shards) <= 62
        apart.drain()
        assert last < first
        whole = apart.replicas[0].evaluate(batches[1]).costs["cost"]
        for k, v in apart.evaluate(batches[1]).costs["cost"].items():  # over 4 pieces
            assert v == pytest.approx(whole[k], rel=1e-5), k
        a, b = (r.store.weights for r in apart.replicas)
        for name in ("fc1", "fc2"):
            for k in a[name][0]:
                np.testing.assert_allclose(a[name][0][k], b[name][0][k], rtol=1e-5, atol=1e-6)
    finally:
        apart.close()


class _StartLog:
    """When each replica starts and ends its shards, kept outside the machinery: each
    replica executor's ``step`` is wrapped, and the shard's step read from the dropout
    step the machinery sets (``step * R + index``).  ``delays`` (replica -> seconds)
    makes a replica a clear straggler whatever the machine's load."""

    def __init__(self, apart: AsyncReplicas, delays: dict[int, float] | None = None):
        self.events: list[tuple[str, int, int]] = []  # (start|end, replica, minibatch step)
        self.lock = threading.Lock()
        count = len(apart.replicas)
        for r, replica in enumerate(apart.replicas):
            inner = replica.step

            def step(batch, progress=0.0, inner=inner, replica=replica, r=r, **kw):
                t = replica.step_count // count
                with self.lock:
                    self.events.append(("start", r, t))
                try:
                    time.sleep((delays or {}).get(r, 0.0))
                    return inner(batch, progress, **kw)
                finally:
                    with self.lock:
                        self.events.append(("end", r, t))

            replica.step = step

    def largest_lead(self) -> int:
        """The largest (started step - oldest step in work elsewhere) over every start."""
        in_work: dict[int, int] = {}
        lead = 0
        for what, r, t in self.events:
            if what == "start":
                if in_work:
                    lead = max(lead, t - min(in_work.values()))
                in_work[r] = t
            else:
                del in_work[r]
        return lead


@settings(max_examples=6, deadline=None)
@given(staleness=st.integers(0, 3), slow=st.sampled_from([1, 0]),
       factor=st.sampled_from([1.0, 3.0]))
def test_no_replica_runs_more_than_s_steps_ahead(staleness, slow, factor):
    net = fc_net(DATA_PARALLEL)
    apart = _async(net, staleness=staleness, slowdown=Slowdown(factor, slow, len(GPUS)))
    log = _StartLog(apart, delays={slow: 0.02})  # a straggler even on a loaded machine
    try:
        within(HANG_SECONDS, lambda: [apart.step(b) for b in _fc_batches(24)] and apart.drain())
    finally:
        apart.close()
    assert len([e for e in log.events if e[0] == "start"]) == 48
    assert log.largest_lead() <= staleness
    assert apart.record.max_lead <= staleness
    fast = 1 - slow
    if staleness:  # S = 0 is lockstep: the fast replica may not start the next step early
        assert apart.record.shards[fast] > apart.record.shards[slow]
    assert apart.record.waits > 0  # the bound held the fast replica back at least once


def test_without_a_bound_the_log_would_see_a_larger_lead():
    """The check above can fail: a large bound lets the fast replica run further ahead
    than a small one would allow."""
    net = fc_net(DATA_PARALLEL)
    apart = _async(net, staleness=50)
    log = _StartLog(apart, delays={1: 0.01})
    try:
        within(HANG_SECONDS, lambda: [apart.step(b) for b in _fc_batches(24)] and apart.drain())
    finally:
        apart.close()
    assert log.largest_lead() > 1


def _fail_on(apart: AsyncReplicas, step: int, error: BaseException) -> None:
    """Make whichever replica trains shard 1 of minibatch ``step`` raise ``error``."""
    count = len(apart.replicas)
    for replica in apart.replicas:
        def train(batch, progress=0.0, inner=replica.step, replica=replica, **kw):
            if replica.step_count == step * count + 1:
                raise error
            return inner(batch, progress, **kw)

        replica.step = train


def test_a_failing_replica_ends_the_run_with_its_error():
    net = fc_net(DATA_PARALLEL)
    apart = _async(net, staleness=1, slowdown=Slowdown(2.0, 0, len(GPUS)))
    _fail_on(apart, 3, RuntimeError("device lost"))
    try:
        with pytest.raises(ReplicaFailed, match=r"replica [01] \(device [01]\) failed: "
                                                r"RuntimeError: device lost"):
            within(HANG_SECONDS, lambda: [apart.step(b) for b in _fc_batches(40)] and
                    apart.drain())
        with pytest.raises(ReplicaFailed):  # and every later call says so, at once
            within(HANG_SECONDS, lambda: apart.evaluate(_fc_batches(1)[0]))
    finally:
        within(HANG_SECONDS, apart.close)


def test_a_diverging_replica_reports_the_engines_own_error():
    net = fc_net(DATA_PARALLEL)
    apart = _async(net)
    _fail_on(apart, 2, DivergedError("layer 'fc2' gradient W0 is not finite"))
    try:
        with pytest.raises(DivergedError, match="fc2"):
            within(HANG_SECONDS, lambda: [apart.step(b) for b in _fc_batches(40)] and
                    apart.drain())
    finally:
        within(HANG_SECONDS, apart.close)


def test_a_replica_failing_on_the_last_shards_ends_the_drain():
    net = fc_net(DATA_PARALLEL)
    apart = _async(net, staleness=3, slowdown=Slowdown(4.0, 1, len(GPUS)))
    _fail_on(apart, 6, RuntimeError("late failure"))
    try:
        with pytest.raises(ReplicaFailed, match="late failure"):
            within(HANG_SECONDS, lambda: [apart.step(b) for b in _fc_batches(7)] and
                    apart.state_arrays())
    finally:
        within(HANG_SECONDS, apart.close)


def test_only_data_parallel_nets_train_apart():
    data = make_plan(fc_net(DATA_PARALLEL), GPUS, MINI)
    hybrid = make_plan(fc_net(SMALL_HYBRID), GPUS, MINI)
    assert async_replica_devices(data) == GPUS
    assert async_replica_devices(hybrid) is None
    with pytest.raises(ValueError, match="data-parallel net"):
        AsyncReplicas(fc_net(SMALL_HYBRID), hybrid, make_devices(GPUS, "cpu"), 2)
    with pytest.raises(ValueError, match=">= 0"):
        AsyncReplicas(fc_net(DATA_PARALLEL), data, make_devices(GPUS, "cpu"), -1)


def test_slowing_a_device_changes_no_result_of_a_lockstep_step():
    """--slow-device only sleeps: the synchronous weights stay bitwise the same."""
    net = fc_net(DATA_PARALLEL)
    plan = make_plan(net, GPUS, MINI)
    states = []
    for slowdown in (None, Slowdown(3.0, 1, len(GPUS))):
        executor = Executor(net, plan, make_devices(GPUS, "cpu"), seed=3, slowdown=slowdown)
        try:
            for batch in _fc_batches(4):
                executor.step(batch)
            states.append(executor.state_arrays())
        finally:
            executor.close()
    for key in states[0]:
        assert np.array_equal(states[0][key], states[1][key]), key


def test_settle_hands_over_every_queued_shard_once():
    """What the training loop counts before a test: the costs of every shard the steps
    queued and did not yet return, none twice, and none left for the next step."""
    net = fc_net(DATA_PARALLEL)
    apart = _async(net)
    try:
        returned = sum(apart.step(batch).num_cases for batch in _fc_batches(5))
        settled = within(HANG_SECONDS, apart.settle)
        assert returned + settled.num_cases == 5 * MINI and settled.seconds >= 0
        assert "cost" in settled.costs or settled.num_cases == 0
        assert within(HANG_SECONDS, apart.settle).num_cases == 0
        assert apart.step(_fc_batches(1)[0]).num_cases <= MINI
    finally:
        apart.close()
