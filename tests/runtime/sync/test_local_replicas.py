"""Local SGD with the replicas running apart between averages (convnet/runtime/sync/local_replicas.py).

The walk must not change the result: every replica's weights and momentum,
the evaluations and the features are bitwise those of the lockstep walk, also
between averages (when the replicas differ), with dropout, convolutions and
per-layer periods.  The replicas must really run apart (a replica whose steps
are slow does not hold the others before the next average, and nobody passes
an average), the command line must pick this walk and give the reference walk's
checkpoint, a failing replica must end the run with its error rather than
leave the others waiting at an average, and a resume at an averaging point
must continue bit for bit.  :func:`apart_periods` says which nets qualify.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.sync.local_replicas import LocalReplicas, apart_periods
from convnet.runtime.sync.replica_threads import ReplicaFailed
from convnet.runtime.devices.slowdown import ANY, Slowdown
from tests.runtime.step.test_executor_local_sgd import (DATA_PARALLEL, GPUS, MINI, _conv_batches,
                                                        _conv_net, _fc_batches, _keyed)
from tests.support.cli import DUMMY, EXAMPLES, checkpoint_arrays, ok, run_cli
from tests.support.plans import SMALL_HYBRID, fc_net
from tests.support.threads import within

HANG_SECONDS = 30
DATA_NET = ["--layer-def", EXAMPLES / "digits-data.cfg", "--layer-params",
            EXAMPLES / "digits-params.cfg", "--gpu", "0,1"]


def _pair(net, local_sgd):
    """(the lockstep executor, the replicas apart) of ``net`` under local SGD."""
    plan = make_plan(net, GPUS, MINI)
    lockstep = Executor(net, plan, make_devices(GPUS, "cpu"), seed=3, local_sgd=local_sgd)
    apart = LocalReplicas(net, plan, make_devices(GPUS, "cpu"),
                          apart_periods(plan, net, local_sgd), seed=3)
    return lockstep, apart


def _assert_replicas_equal(lockstep: Executor, apart: LocalReplicas) -> None:
    """Every replica's weights and momentum are bitwise the lockstep walk's."""
    checked = 0
    for group in ("weights", "momentum"):
        for name, replicas in getattr(lockstep.store, group).items():
            for r, arrays in enumerate(replicas):
                theirs = getattr(apart.replicas[r].store, group)[name][0]
                for k, v in arrays.items():
                    np.testing.assert_array_equal(theirs[k], v, err_msg=f"{group} {name} {r} {k}")
                    checked += 1
    assert checked


@pytest.mark.parametrize("steps", [6, 7])  # right after an average, and between two
def test_the_replicas_apart_train_bitwise_as_the_lockstep_walk(tmp_path, steps):
    net = _conv_net(tmp_path)  # convolutions, dropout, momentum
    lockstep, apart = _pair(net, 3)
    try:
        batches = _conv_batches(steps + 1)
        for batch in batches[:steps]:
            lockstep.step(batch, 0.2)
            apart.step(batch, 0.2)
        apart.settle()
        _assert_replicas_equal(lockstep, apart)
        conv = apart.replicas[0].store.weights["conv1"][0]["W0"]
        other = apart.replicas[1].store.weights["conv1"][0]["W0"]
        assert np.array_equal(conv, other) == (steps % 3 == 0)  # apart only between averages
        assert apart.evaluate(batches[-1]).costs == lockstep.evaluate(batches[-1]).costs
        np.testing.assert_array_equal(apart.features(batches[-1], "conv2"),
                                      lockstep.features(batches[-1], "conv2"))
        saved = lockstep.state_arrays()
        assert apart.state_arrays().keys() == saved.keys()
        for key, value in apart.state_arrays().items():
            np.testing.assert_array_equal(value, saved[key], err_msg=key)
    finally:
        lockstep.close()
        apart.close()


def test_layers_with_their_own_periods_average_at_their_own_steps():
    net = _keyed(fc_net(DATA_PARALLEL), {"fc1": "local:2", "fc2": "local:3"})
    lockstep, apart = _pair(net, None)
    try:
        assert apart.periods == {"fc1": 2, "fc2": 3}
        for batch in _fc_batches(7):
            lockstep.step(batch)
            apart.step(batch)
        apart.drain()
        _assert_replicas_equal(lockstep, apart)
    finally:
        lockstep.close()
        apart.close()


def test_which_nets_run_apart():
    data = fc_net(DATA_PARALLEL)
    plan = make_plan(data, GPUS, MINI)
    assert apart_periods(plan, data, 4) == {"fc1": 4, "fc2": 4}
    assert apart_periods(plan, data, None) is None  # synchronous SGD
    mixed = _keyed(fc_net(DATA_PARALLEL), {"fc1": "sync"})
    assert apart_periods(make_plan(mixed, GPUS, MINI), mixed, 4) is None  # a sync layer
    hybrid = fc_net(SMALL_HYBRID)
    assert apart_periods(make_plan(hybrid, GPUS, MINI), hybrid, 4) is None  # lockstep passes


class _StepLog:
    """When each replica's steps begin and end (wrapping its executor), and an optional
    extra time per step on some replicas."""

    def __init__(self, apart: LocalReplicas, delays: dict[int, float]):
        self.spans: dict[tuple[int, int], list[float]] = {}
        self.lock = threading.Lock()
        for r, replica in enumerate(apart.replicas):
            replica.step = self._wrapped(r, replica.step, replica, delays.get(r, 0.0))

    def _wrapped(self, r, step, replica, delay):
        def logged(*args, **kwargs):
            began, number = time.perf_counter(), replica.step_count
            time.sleep(delay)
            result = step(*args, **kwargs)
            with self.lock:
                self.spans[(r, number)] = [began, time.perf_counter()]
            return result
        return logged


def test_a_slow_replica_holds_the_others_only_at_the_averages():
    net = fc_net(DATA_PARALLEL)
    plan = make_plan(net, GPUS, MINI)
    apart = LocalReplicas(net, plan, make_devices(GPUS, "cpu"), {"fc1": 4, "fc2": 4}, seed=3)
    log = _StepLog(apart, delays={1: 0.05})
    try:
        for batch in _fc_batches(8):
            apart.step(batch)
        apart.drain()
        spans = log.spans
        assert len(spans) == 16
        # Replica 0 trained steps 0-3 while replica 1 was still in its first step...
        assert spans[(0, 3)][1] < spans[(1, 0)][1]
        # ...and began step 4 only after replica 1 finished step 3 (the average).
        assert spans[(0, 4)][0] >= spans[(1, 3)][1]
    finally:
        apart.close()


def test_a_failing_replica_ends_the_run_while_the_other_waits_to_average():
    net = fc_net(DATA_PARALLEL)
    plan = make_plan(net, GPUS, MINI)
    apart = LocalReplicas(net, plan, make_devices(GPUS, "cpu"), {"fc1": 4, "fc2": 4}, seed=3)
    step = apart.replicas[1].step

    def failing(batch, *args, **kwargs):
        if apart.replicas[1].step_count == 2:
            raise RuntimeError("replica 1 broke")
        return step(batch, *args, **kwargs)

    apart.replicas[1].step = failing
    try:
        def train():
            for batch in _fc_batches(8):
                apart.step(batch)
            apart.drain()

        with pytest.raises(ReplicaFailed, match=r"replica 1 \(device 1\) failed: "
                                                r"RuntimeError: replica 1 broke"):
            within(HANG_SECONDS, train)
        with pytest.raises(ReplicaFailed):  # and every later call says so, at once
            within(HANG_SECONDS, lambda: apart.evaluate(_fc_batches(1)[0]))
    finally:
        within(HANG_SECONDS, apart.close)


def _resumed(make, batches, at: int):
    """Train ``batches[:at]``, save, load into a new executor, train the rest."""
    first = make()
    try:
        for batch in batches[:at]:
            first.step(batch)
        saved = first.state_arrays()
    finally:
        first.close()
    resumed = make()
    resumed.load_state_arrays(saved)
    resumed.step_count = at
    for batch in batches[at:]:
        resumed.step(batch)
    return resumed


def test_a_resume_at_an_average_continues_as_the_lockstep_walk_resumes():
    """A checkpoint holds replica 0's weights and momentum, which a resume puts on every
    replica, in either walk."""
    net = fc_net(DATA_PARALLEL)
    plan = make_plan(net, GPUS, MINI)
    batches = _fc_batches(6)
    lockstep = _resumed(lambda: Executor(net, plan, make_devices(GPUS, "cpu"), seed=3,
                                         local_sgd=3), batches, 3)
    apart = _resumed(lambda: LocalReplicas(net, plan, make_devices(GPUS, "cpu"),
                                           {"fc1": 3, "fc2": 3}, seed=3), batches, 3)
    try:
        apart.drain()
        _assert_replicas_equal(lockstep, apart)
    finally:
        lockstep.close()
        apart.close()


def test_the_command_line_trains_local_sgd_apart_as_the_reference_walk(tmp_path):
    """``--sync local:4`` of a data-parallel net runs the replicas apart; ``--sequential``
    runs the lockstep reference walk: the same checkpoint, bit for bit, also with a
    straggler that moves between the devices."""
    weights = {}
    for walk in ("apart", "sequential"):
        extra = ["--sequential"] if walk == "sequential" else ["--slow-device", "any:2"]
        ok(run_cli(*DUMMY, *DATA_NET, "--epochs", "2", "--sync", "local:4", *extra,
                   "--save-path", tmp_path / walk, timeout=90))
        weights[walk], _ = checkpoint_arrays(tmp_path / walk / "checkpoint.npz")
    assert weights["apart"].keys() == weights["sequential"].keys()
    plan = ok(run_cli(*DUMMY, *DATA_NET, "--sync", "local:4", "--print-plan")).stdout
    assert "the replicas run apart between averages" in plan
    for key, value in weights["sequential"].items():
        np.testing.assert_array_equal(weights["apart"][key], value, err_msg=key)


def test_a_moving_straggler_slows_one_device_per_step_drawn_the_same_in_every_run():
    straggler = Slowdown(3.0, ANY, 4)
    slowed = [straggler.slowed(step) for step in range(400)]
    assert slowed == [Slowdown(3.0, ANY, 4).slowed(step) for step in range(400)]
    assert set(np.bincount(slowed, minlength=4)) <= set(range(70, 131))  # about 100 each
    for step in range(20):
        factors = [straggler.factor_of(d, step) for d in range(4)]
        assert sorted(factors) == [1.0, 1.0, 1.0, 3.0]
        # A one-device replica on the run's device 2 is slow when device 2 is.
        assert straggler.on_devices((2,)).factor_of(0, step) == factors[2]
    fixed = Slowdown(2.0, 1, 4)
    assert [fixed.factor_of(d, 7) for d in range(4)] == [1.0, 2.0, 1.0, 1.0]


def test_a_profiled_step_accounts_each_device_s_time_within_the_step():
    """--compare's profile of the replicas apart: every step drained, each replica's
    operations (and its averages, one span each) on its own device, never adding up to
    more than the step."""
    net = fc_net(DATA_PARALLEL)
    plan = make_plan(net, GPUS, MINI)
    apart = LocalReplicas(net, plan, make_devices(GPUS, "cpu"), {"fc1": 2, "fc2": 2}, seed=3)
    try:
        runs = apart.timed_steps(_fc_batches(1)[0], 4)
        assert len(runs) == 4
        for seconds, timings in runs:
            for device in GPUS:
                spans = [t for t in timings if t.device == device]
                assert {t.kind for t in spans} >= {"forward", "backward"}
                assert sum(t.end - t.start for t in spans) <= seconds * 1.01
        averages = [t for _, timings in runs for t in timings if t.kind == "allreduce"]
        assert len(averages) == 2 * len(GPUS)  # after steps 1 and 3 (step 0 warms up)
        assert all(t.layer == "fc1+fc2" for t in averages)
        assert all(replica.timings is None for replica in apart.replicas)
    finally:
        apart.close()
