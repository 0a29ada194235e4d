"""Local SGD of the replicated layers (``Executor(local_sgd=K)``, convnet/runtime/tasks.py).

Between averaging steps each replica updates from its own shards' gradient;
every K-th step the replicas' weights become their mean.  It must stay
deterministic (both walks bitwise equal), keep the replicas apart exactly
between averages and together right after them, and with K=1, no momentum and
equal shards train like synchronous SGD up to float rounding.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from convnet.config import load_net
from convnet.plan.ops import AllReduce
from convnet.plan.planner import make_plan
from convnet.runtime.devices import make_devices
from convnet.runtime.executor import Executor
from convnet.runtime.tasks import ReplicaSync, TaskAction, make_tasks
from plan_helpers import SMALL_HYBRID, fc_net
from scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

MINI = 8
GPUS = (0, 1)

#: A data-parallel fc net on two devices: every weight layer has two replicas.
DATA_PARALLEL = [("fc1", "fc", ["data"], [0, 1], 0), ("fc2", "fc", ["fc1"], [0, 1], 0),
                 ("probs", "softmax", ["fc2"], [0, 1], 0),
                 ("cost", "cost.logreg", ["labels", "probs"], [0, 1], 0)]


def _fc_batches(count: int):
    rng = np.random.default_rng(5)
    return [[rng.standard_normal((MINI, 4)).astype(np.float32),
             rng.integers(0, 3, (MINI, 1)).astype(np.float32)] for _ in range(count)]


def _conv_net(tmp_path, momentum=True):
    """The scaled two-device data-parallel imagenet net (convolutions, dropout)."""
    edit = None if momentum else (lambda text: re.sub(r"^(mom[WB]=)[0-9.,]+$",
                                                      lambda m: m.group(1) + "0", text,
                                                      flags=re.M))
    layer_def, params = scaled_config("imagenet-2gpu-data", tmp_path, edit)
    return load_net(layer_def, params, data_dims={0: IMAGE_DIMS, 1: (1,)},
                    num_classes=NUM_CLASSES)


def _conv_batches(count: int):
    rng = np.random.default_rng(11)
    return [[rng.standard_normal((MINI,) + IMAGE_DIMS).astype(np.float32),
             rng.integers(0, NUM_CLASSES, (MINI, 1)).astype(np.float32)] for _ in range(count)]


def _executor(net, local_sgd, parallel=True):
    plan = make_plan(net, GPUS, MINI)
    return Executor(net, plan, make_devices(GPUS, "cpu"), seed=3, parallel=parallel,
                    local_sgd=local_sgd)


def _replica_state(executor) -> dict:
    """Every replica's weights and momentum, on the host."""
    store = executor.store
    return {(group, name, r, k): np.array(v)
            for group, arrays in (("weights", store.weights), ("momentum", store.momentum))
            for name, replicas in arrays.items() for r, w in enumerate(replicas)
            for k, v in w.items()}


def _replicas_equal(executor, name) -> bool:
    replicas = executor.store.weights[name]
    return all(np.array_equal(r[k], replicas[0][k]) for r in replicas[1:] for k in r)


@pytest.mark.parametrize("spec", [DATA_PARALLEL, SMALL_HYBRID], ids=["data", "hybrid"])
def test_parallel_walk_is_bitwise_the_sequential_walk(spec):
    states = []
    for parallel in (True, False):
        executor = _executor(fc_net(spec), local_sgd=4, parallel=parallel)
        try:
            for batch in _fc_batches(6):
                executor.step(batch)
            states.append(_replica_state(executor))
        finally:
            executor.close()
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        assert np.array_equal(states[0][key], states[1][key]), key


def test_replicas_drift_between_averages_and_agree_after_them():
    net = fc_net(DATA_PARALLEL)
    executor = _executor(net, local_sgd=3)
    try:
        for step, batch in enumerate(_fc_batches(7), start=1):
            executor.step(batch)
            for name in ("fc1", "fc2"):
                assert _replicas_equal(executor, name) == (step % 3 == 0), (step, name)
        momentum = executor.store.momentum["fc1"]  # each replica keeps its own
        assert not all(np.array_equal(momentum[1][k], momentum[0][k]) for k in momentum[0])
    finally:
        executor.close()


def test_averaging_is_the_mean_of_the_locally_updated_weights():
    """The K-th step's weights are (w0 + w1) / 2 of the weights a local step would give."""
    net = fc_net(DATA_PARALLEL)
    batch = _fc_batches(1)[0]
    local, averaged = _executor(net, local_sgd=2), _executor(net, local_sgd=1)
    try:
        local.step(batch)
        averaged.step(batch)
        for name in ("fc1", "fc2"):
            w0, w1 = local.store.weights[name]
            for k in w0:
                mean = (w0[k] + w1[k]) / 2
                for replica in averaged.store.weights[name]:
                    assert np.array_equal(replica[k], mean), (name, k)
    finally:
        local.close()
        averaged.close()


def test_local_sgd_every_step_without_momentum_is_synchronous_sgd(tmp_path):
    net = _conv_net(tmp_path, momentum=False)
    batches = _conv_batches(3)
    states = []
    for local_sgd in (None, 1):
        executor = _executor(net, local_sgd)
        try:
            for batch in batches:
                executor.step(batch)
            states.append(executor.state_arrays())
        finally:
            executor.close()
    weights = [key for key in states[0] if key.startswith("weights/")]
    assert weights
    for key in weights:  # (momentum 0 keeps only the last step, each replica its own)
        np.testing.assert_allclose(states[1][key], states[0][key], rtol=1e-5, atol=1e-7,
                                   err_msg=key)


def test_task_lists_of_local_and_averaging_steps():
    net = fc_net(DATA_PARALLEL)
    plan = make_plan(net, GPUS, MINI)
    local = make_tasks(plan.ops, lambda op: True, sync=ReplicaSync.LOCAL)
    average = make_tasks(plan.ops, lambda op: True, sync=ReplicaSync.AVERAGE)
    reduced = {op.layer for op in plan.ops if isinstance(op, AllReduce)}
    assert reduced == {"fc1", "fc2"}
    gradient_sums = (TaskAction.ALL_REDUCE, TaskAction.REDUCE_SLICE, TaskAction.UPDATE_SLICE)
    for tasks in (local, average):
        assert not any(t.action in gradient_sums for t in tasks)
        assert all(dep < t.index for t in tasks for dep in t.deps)
    assert not any(t.action in (TaskAction.AVERAGE_SLICE, TaskAction.GATHER) for t in local)
    for layer in reduced:
        updates = [t for t in average if t.layer == layer and t.action is TaskAction.UPDATE]
        averages = [t for t in average if t.layer == layer
                    and t.action is TaskAction.AVERAGE_SLICE]
        gathers = [t for t in average if t.layer == layer and t.action is TaskAction.GATHER]
        assert [t.device for t in averages] == [t.device for t in gathers] == list(GPUS)
        for t in averages:  # a rank averages its slice once every replica has updated
            assert set(t.deps) == {u.index for u in updates}
        for t in gathers:
            assert set(t.deps) == {a.index for a in averages}


def test_local_sgd_needs_a_positive_period():
    with pytest.raises(ValueError, match="K >= 1"):
        _executor(fc_net(DATA_PARALLEL), local_sgd=0)


def test_wball_projects_the_averaged_weights():
    """The mean of projected weights is shorter than the ball: it is projected again."""
    net = fc_net(DATA_PARALLEL)
    net["fc1"].params["wball"] = [0.5]
    executor = _executor(net, local_sgd=4)
    try:
        assert executor._constrained("fc1")
        for step, batch in enumerate(_fc_batches(4), start=1):
            constrains = any(t.action is TaskAction.CONSTRAIN for t in executor.train_tasks())
            assert constrains == (step == 4), step  # only the averaging step's gathers
            executor.step(batch)
        assert _replicas_equal(executor, "fc1")
        unit_axis = executor.store.rules["fc1"]["W0"].unit_axis
        w = executor.store.weights["fc1"][0]["W0"]
        other = tuple(a for a in range(w.ndim) if a != unit_axis % w.ndim)
        np.testing.assert_allclose(np.sqrt((w * w).sum(axis=other)), 0.5, rtol=1e-6)
    finally:
        executor.close()
