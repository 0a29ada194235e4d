"""Local SGD of the replicated layers (``Executor(local_sgd=K)``, convnet/runtime/step/tasks.py).

Between averaging steps each replica updates from its own shards' gradient;
every K-th step the replicas' weights become their mean.  It must stay
deterministic (both walks bitwise equal), keep the replicas apart exactly
between averages and together right after them, and with K=1, no momentum and
equal shards train like synchronous SGD up to float rounding.  A layer's
``sync=`` key sets its own mode (``sync`` or ``local:K``): a net keyed layer by
layer trains as the run's mode would, bit for bit, and a mixed net keeps its
synchronous layers together every step while its local layers average at their
own steps.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from convnet.config import load_net
from convnet.plan.ops import AllReduce
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.tasks import ReplicaSync, TaskAction, exchanges_per_step, make_tasks
from tests.support.plans import SMALL_HYBRID, fc_net, small_batches
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

MINI = 8
GPUS = (0, 1)

#: A data-parallel fc net on two devices: every weight layer has two replicas.
DATA_PARALLEL = [("fc1", "fc", ["data"], [0, 1], 0), ("fc2", "fc", ["fc1"], [0, 1], 0),
                 ("probs", "softmax", ["fc2"], [0, 1], 0),
                 ("cost", "cost.logreg", ["labels", "probs"], [0, 1], 0)]


def _fc_batches(count: int):
    return small_batches(count, seed=5, n=MINI)


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


def _keyed(net, modes: dict[str, str]):
    """``net`` with the ``sync=`` key of each named layer set to its mode."""
    for name, mode in modes.items():
        net[name].params["sync"] = mode
    return net


def _trained_state(net, local_sgd, batches, parallel=True) -> dict:
    executor = _executor(net, local_sgd, parallel=parallel)
    try:
        for batch in batches:
            executor.step(batch)
        return _replica_state(executor)
    finally:
        executor.close()


def _assert_states_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert np.array_equal(got[key], want[key]), key


@pytest.mark.parametrize("spec, keys", [
    (DATA_PARALLEL, {}), (SMALL_HYBRID, {}),
    (DATA_PARALLEL, {"fc1": "sync", "fc2": "local:3"}),
    (SMALL_HYBRID, {"fc1": "local:2"}),
], ids=["data", "hybrid", "data-mixed", "hybrid-keyed"])
def test_parallel_walk_is_bitwise_the_sequential_walk(spec, keys):
    states = []
    for parallel in (True, False):
        executor = _executor(_keyed(fc_net(spec), keys), local_sgd=4, parallel=parallel)
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


def _weight_layers(net, layer_type=None) -> list[str]:
    return [l.name for l in net if l.has_weights and layer_type in (None, l.type)]


@pytest.mark.parametrize("case", ["data", "hybrid", "conv"])
def test_a_sync_key_on_every_layer_trains_as_the_run_mode_bit_for_bit(tmp_path, case):
    """sync=local:3 on every weight layer is --sync local:3, and sync=sync on every
    one under --sync local:3 is --sync sync (a model-parallel layer's key changes
    nothing: it has one replica)."""
    def make():
        return (_conv_net(tmp_path) if case == "conv"
                else fc_net(DATA_PARALLEL if case == "data" else SMALL_HYBRID))
    batches = (_conv_batches if case == "conv" else _fc_batches)(7)
    everything = _weight_layers(make())
    local = _trained_state(make(), 3, batches)
    _assert_states_equal(_trained_state(_keyed(make(), dict.fromkeys(everything, "local:3")),
                                        None, batches), local)
    synced = _trained_state(make(), None, batches)
    _assert_states_equal(_trained_state(_keyed(make(), dict.fromkeys(everything, "sync")),
                                        3, batches), synced)
    assert any(not np.array_equal(local[k], synced[k]) for k in synced)


def _mixed_net(tmp_path, momentum=True, fc_mode="local:4"):
    """The scaled data-parallel imagenet net with its convolutions synchronous (the
    run's default) and its fc layers under ``fc_mode``; conv2 has ``wball`` so that its
    replicas keep a copy each (the others share one)."""
    net = _keyed(_conv_net(tmp_path, momentum), dict.fromkeys(
        _weight_layers(_conv_net(tmp_path), "fc"), fc_mode))
    net["conv2"].params["wball"] = [2.0]
    return net


def test_a_mixed_net_keeps_sync_layers_together_and_local_layers_apart_between_averages(
        tmp_path):
    net = _mixed_net(tmp_path)
    convs, fcs = _weight_layers(net, "conv"), _weight_layers(net, "fc")
    executor = _executor(net, local_sgd=None)
    try:
        assert executor.local_periods == dict.fromkeys(fcs, 4)
        assert executor.store.shared == set(convs) - {"conv2"}  # sync layers still share
        for step, batch in enumerate(_conv_batches(9), start=1):
            executor.step(batch)
            for name in convs:
                assert _replicas_equal(executor, name), (step, name)
            for name in fcs:
                assert _replicas_equal(executor, name) == (step % 4 == 0), (step, name)
        for name in fcs:  # each replica keeps its own momentum
            momentum = executor.store.momentum[name]
            assert not all(np.array_equal(momentum[1][k], momentum[0][k]) for k in momentum[0])
    finally:
        executor.close()


def test_the_all_reduces_of_each_step_are_those_the_plan_counts(tmp_path):
    """Per step: a gradient all-reduce for every sync layer, a weight average for every
    local layer whose K divides the step number; on average what --print-plan says."""
    net = _keyed(_mixed_net(tmp_path), {"fc1000": "local:2"})
    executor = _executor(net, local_sgd=None)
    try:
        convs = set(_weight_layers(net, "conv"))
        counts = []
        for step in range(8):
            executor.step_count = step  # the task list depends on the step number only
            tasks = executor.train_tasks()
            reduced = {(t.layer, t.op.pass_index) for t in tasks
                       if t.action in (TaskAction.REDUCE_SLICE, TaskAction.ALL_REDUCE)}
            averaged = {(t.layer, t.op.pass_index) for t in tasks
                        if t.action is TaskAction.AVERAGE_SLICE}
            assert {layer for layer, _ in reduced} == convs
            assert {layer for layer, _ in averaged} == {
                layer for layer, k in executor.local_periods.items() if (step + 1) % k == 0}
            counts.append(len(reduced) + len(averaged))
        assert counts == [5, 6, 5, 8, 5, 6, 5, 8]
        assert sum(counts) / len(counts) == exchanges_per_step(executor.plan,
                                                               executor.local_periods)
    finally:
        executor.close()


def test_a_resume_where_every_layer_has_just_averaged_trains_on_bit_for_bit(tmp_path):
    """Without momentum a checkpoint taken right after a step where every local layer
    averaged (a multiple of every K) holds the whole state, so the resumed run, which
    averages each layer at its own steps again, ends bitwise where the uninterrupted
    one does.  (Elsewhere a resume is close, not bitwise: the checkpoint holds replica
    0 only, docs/DESIGN.md.)"""
    net = _keyed(_mixed_net(tmp_path, momentum=False), {"fc1000": "local:2"})
    batches = _conv_batches(8)
    whole = _executor(net, local_sgd=None)
    first, second = _executor(net, local_sgd=None), _executor(net, local_sgd=None)
    try:
        for batch in batches:
            whole.step(batch)
        for batch in batches[:4]:
            first.step(batch)
        second.load_state_arrays(first.state_arrays())
        second.step_count = first.step_count
        for batch in batches[4:]:
            second.step(batch)
        _assert_states_equal(second.state_arrays(), whole.state_arrays())
        # (a sharded update leaves replica r's momentum current on slice r only: compare
        # every replica's weights, and the momentum as a checkpoint assembles it)
        _assert_states_equal({k: v for k, v in _replica_state(second).items()
                              if k[0] == "weights"},
                             {k: v for k, v in _replica_state(whole).items()
                              if k[0] == "weights"})
    finally:
        for executor in (whole, first, second):
            executor.close()


def test_a_layer_sync_key_is_refused_under_the_asynchronous_exchange():
    net = _keyed(fc_net(SMALL_HYBRID), {"fc1": "local:2"})
    with pytest.raises(ValueError, match="no layer may set its own sync= mode"):
        Executor(net, make_plan(net, GPUS, MINI), make_devices(GPUS, "cpu"),
                 async_staleness=1)
