"""bnorm in the executor: stats=global trains data-parallel as one device does (the
statistics combined by the plan's BatchStats operations), stats=replica normalises each
shard alone, the running averages are saved, restored and used by tests, and what cannot
keep the promise is refused."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.app.command_line.main import main
from convnet.config import load_net
from convnet.config.model import on_one_device
from convnet.errors import PlanError
from convnet.plan.ops import BatchStats
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.sync.local_replicas import apart_periods
from tests.support.configs import residual_pair, write_pair
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES

MINI = 12  # planned; the last batch of _batches is short, 10 cases (three devices: 4, 3, 3)


def _net(tmp_path, gpu="0,1", stats="global"):
    paths = write_pair(tmp_path, *residual_pair(gpu, stats))
    return load_net(*paths, data_dims={0: IMAGE_DIMS, 1: (1,)}, num_classes=NUM_CLASSES)


def _batches(count=3, seed=5):
    """``count`` minibatches, the last of them short (10 cases)."""
    rng = np.random.default_rng(seed)
    sizes = [MINI] * (count - 1) + [10]
    return [[(2 * rng.standard_normal((n,) + IMAGE_DIMS) + 1).astype(np.float32),
             rng.integers(0, NUM_CLASSES, (n, 1)).astype(np.float32)] for n in sizes]


def _train(net, gpus, parallel=True, batches=None, evaluate=None):
    """(final state, step costs, the costs of evaluating ``evaluate``)."""
    executor = Executor(net, make_plan(net, gpus, MINI), make_devices(gpus, "cpu"), seed=3,
                        parallel=parallel)
    try:
        costs = [executor.step(b, progress=0.1).costs["logprob"]["cost"]
                 for b in batches or _batches()]
        tested = executor.evaluate(evaluate).costs if evaluate is not None else None
        return executor.state_arrays(), costs, tested
    finally:
        executor.close()


@pytest.mark.parametrize("gpus", [(0, 1), (0, 1, 2)])
def test_data_parallel_equals_one_device(tmp_path, gpus):
    """Weights, momentum, running averages and costs after three steps agree with one
    device to a relative 1e-5 (float summation order), a short minibatch's uneven split
    included."""
    net = _net(tmp_path, ",".join(map(str, gpus)))
    want, want_costs, _ = _train(on_one_device(net), (0,))
    got, got_costs, _ = _train(net, gpus)
    assert any(isinstance(op, BatchStats) for op in make_plan(net, gpus, MINI).ops)
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-5 * np.abs(value).max(),
                                   err_msg=key)
    np.testing.assert_allclose(got_costs, want_costs, rtol=1e-5)
    assert not np.allclose(got["weights/bn1/mean"], 0)  # the running averages moved


def test_the_parallel_walk_is_bitwise_the_sequential_walk(tmp_path):
    net = _net(tmp_path, "0,1,2")
    parallel, _, _ = _train(net, (0, 1, 2))
    sequential, _, _ = _train(net, (0, 1, 2), parallel=False)
    for key, value in sequential.items():
        assert np.array_equal(parallel[key], value), key


def test_replica_statistics_are_each_shards_own(tmp_path):
    """stats=replica plans no BatchStats, and its replicas train as two one-device nets
    on the halves would in their first step (their gradients then meet in the
    all-reduce, so only the running averages, which no all-reduce touches, are compared
    per half)."""
    net = _net(tmp_path, "0,1", "replica")
    assert not any(isinstance(op, BatchStats) for op in make_plan(net, (0, 1), MINI).ops)
    batch = _batches(1)[0]  # 10 cases
    plan = make_plan(net, (0, 1), MINI)
    executor = Executor(net, plan, make_devices((0, 1), "cpu"), seed=3, parallel=False)
    try:
        executor.step(batch)
        replicas = [executor.store.weights["bn1"][r]["mean"].copy() for r in (0, 1)]
    finally:
        executor.close()
    for r, half in enumerate((slice(0, 5), slice(5, 10))):  # the short batch's halves
        alone, _, _ = _train(on_one_device(net), (0,), batches=[[b[half] for b in batch]])
        np.testing.assert_allclose(replicas[r], alone["weights/bn1/mean"], rtol=1e-5)
    assert not np.allclose(replicas[0], replicas[1])


def test_the_running_averages_are_saved_restored_and_used_by_tests(tmp_path):
    net = _net(tmp_path, "0,1")
    batches, probe = _batches(2), _batches(1, seed=9)[0]
    state, _, tested = _train(net, (0, 1), batches=batches, evaluate=probe)
    fresh = Executor(net, make_plan(net, (0, 1), MINI), make_devices((0, 1), "cpu"), seed=8)
    try:
        untrained = fresh.evaluate(probe).costs
        fresh.load_state_arrays(state)
        restored = fresh.evaluate(probe).costs
        for replica in (0, 1):
            np.testing.assert_array_equal(fresh.store.weights["bnp"][replica]["var"],
                                          state["weights/bnp/var"])
    finally:
        fresh.close()
    assert restored == tested
    assert untrained != tested


def test_micro_batches_with_global_statistics_are_refused(tmp_path):
    with pytest.raises(PlanError, match="--micro-batches 2 cuts the minibatch .* 'bn1'"):
        make_plan(_net(tmp_path, "0,1"), (0, 1), MINI, micro_batches=2)
    plan = make_plan(_net(tmp_path, "0,1", "replica"), (0, 1), MINI, micro_batches=2)
    assert plan.micro_batches == 2  # each piece on its own: allowed


def test_a_global_bnorm_with_fewer_replicas_than_the_widest_layer_is_refused(tmp_path):
    layers, params = residual_pair("0,1")  # bnf, fc2, probs and logprob on device 0 only
    layers = layers.replace("[bnf]\ntype=bnorm\n", "[bnf]\ntype=bnorm\ngpu=0\n")
    layers = layers.replace("labels,probs\ngpu=0,1", "labels,probs\ngpu=0")
    net = load_net(*write_pair(tmp_path, layers, params), data_dims={0: IMAGE_DIMS, 1: (1,)},
                   num_classes=NUM_CLASSES)
    with pytest.raises(PlanError, match="'gpu'.*stats=global .* 1 replica\\(s\\) against the "
                                        "widest layer's 2 .* 2 passes"):
        make_plan(net, (0, 1), MINI)


def test_replica_statistics_in_a_layer_of_several_passes_normalise_each_pass(tmp_path):
    """stats=replica on a layer with fewer replicas than the widest (a hybrid net):
    allowed, its statistics cover each pass's shard, so its running averages move once
    per pass, while updatePeriod=2 updates its scale and shift once per minibatch."""
    layers, params = residual_pair("0,1", "replica")
    layers = layers.replace("[bnf]\ntype=bnorm\n", "[bnf]\ntype=bnorm\ngpu=0\n")
    layers = layers.replace("labels,probs\ngpu=0,1", "labels,probs\ngpu=0")
    params = params.replace("[bnf]\n", "[bnf]\nupdatePeriod=2\n")
    params = params.replace("[fc2]\n", "[fc2]\nupdatePeriod=2\n")
    net = load_net(*write_pair(tmp_path, layers, params), data_dims={0: IMAGE_DIMS, 1: (1,)},
                   num_classes=NUM_CLASSES)
    plan = make_plan(net, (0, 1), MINI)
    assert plan.scheme == "hybrid" and plan.layers["bnf"].period == 1
    assert [op.kind for op in plan.ops if op.layer == "bnf"].count("update") == 1
    executor = Executor(net, plan, make_devices((0, 1), "cpu"), seed=3)
    try:
        calls = []
        layer = executor.layers["bnf"]
        original = layer._update_running
        layer._update_running = lambda *args: calls.append(args) or original(*args)
        executor.step(_batches(1)[0])
    finally:
        executor.close()
    assert [count for _, _, _, count in calls] == [5, 5]  # each pass's shard of 5 cases


def test_local_sgd_keeps_a_global_bnorm_net_in_step_and_async_is_refused(tmp_path, capsys):
    net = _net(tmp_path, "0,1")
    assert apart_periods(make_plan(net, (0, 1), MINI), net, 2) is None
    replica = _net(tmp_path, "0,1", "replica")
    assert apart_periods(make_plan(replica, (0, 1), MINI), replica, 2) is not None
    paths = write_pair(tmp_path, *residual_pair("0,1"))
    code = main(["--layer-def", str(paths[0]), "--layer-params", str(paths[1]),
                 "--data-provider", "dummy", "--data-dims", "3x67x67", "--num-classes", "10",
                 "--gpu", "0,1", "--mini", "10", "--sync", "async", "--print-plan"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1
    assert "--sync async:4 trains the replicas apart" in err[0] and "'bn1'" in err[0]
