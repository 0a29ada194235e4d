"""The sharded weight update and the deferrable tasks (convnet/runtime/step/tasks.py, convnet/runtime/step/workers.py).

A replicated layer's update is split into reduce / update-slice / gather
tasks per rank; it must give bitwise the weights and momentum of the plain
all-reduce and full update, and a worker must keep computing while an
all-reduce waits for a slower device.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from convnet.runtime.devices.collectives import ChunkedAllReduce
from convnet.config import load_net
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.step import executor_setup
from convnet.plan.ops import AllReduce, GradCopy, Update
from convnet.plan.planner import make_plan
from convnet.runtime.step.tasks import TaskAction, make_tasks
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

MINI = 8


def _net(tmp_path, name="imagenet-4gpu-data-model", edit=None):
    layer_def, params = scaled_config(name, tmp_path, edit)
    return load_net(layer_def, params, data_dims={0: IMAGE_DIMS, 1: (1,)},
                    num_classes=NUM_CLASSES)


def _batches(count: int):
    rng = np.random.default_rng(11)
    return [[rng.standard_normal((MINI,) + IMAGE_DIMS).astype(np.float32),
             rng.integers(0, NUM_CLASSES, (MINI, 1)).astype(np.float32)] for _ in range(count)]


def _train(net, gpus, steps=3, parallel=True):
    plan = make_plan(net, gpus, MINI)
    executor = Executor(net, plan, make_devices(gpus, "cpu"), seed=5, parallel=parallel)
    try:
        for i, batch in enumerate(_batches(steps)):
            executor.step(batch, progress=i / 10)
        return executor.state_arrays(), executor
    finally:
        executor.close()


def test_tasks_split_each_sharded_all_reduce_into_parts_per_rank(tmp_path):
    plan = make_plan(_net(tmp_path), (0, 1, 2, 3), MINI)
    tasks = make_tasks(plan.ops, sharded=lambda op: True)
    reductions = [op for op in plan.ops if isinstance(op, AllReduce)]
    assert reductions
    for ar in reductions:
        parts = [t for t in tasks if t.op is ar]
        assert [t.action for t in parts] == [TaskAction.REDUCE_SLICE] * len(ar.replica_devices)
        assert [t.device for t in parts] == list(ar.replica_devices)
        updates = [t for t in tasks if isinstance(t.op, Update) and t.layer == ar.layer
                   and t.op.pass_index == ar.pass_index]
        slices = [t for t in updates if t.action is TaskAction.UPDATE_SLICE]
        gathers = [t for t in updates if t.action is TaskAction.GATHER]
        assert len(slices) == len(gathers) == len(ar.replica_devices)
        for s in slices:  # a rank updates its slice from its own reduce
            assert s.deps == (parts[s.rank].index,)
        for g in gathers:  # and gathers once every rank has updated
            assert set(g.deps) == {s.index for s in slices}
            assert g.index > max(s.index for s in slices)
    for t in tasks:  # the list stays in a dependency order
        assert all(dep < t.index for dep in t.deps)
    unsharded = make_tasks(plan.ops, sharded=lambda op: False)
    assert sorted(t.op.index for t in unsharded) == [op.index for op in plan.ops]
    assert [t.action for t in unsharded] == [TaskAction.of_op(t.op) for t in unsharded]
    position = {t.op.index: t.index for t in unsharded}
    assert [t.deps for t in unsharded] == [tuple(sorted(position[d] for d in t.op.deps))
                                           for t in unsharded]
    # only the gradient pulls move (see the next test)
    assert [t.op for t in unsharded if not isinstance(t.op, GradCopy)] == \
        [op for op in plan.ops if not isinstance(op, GradCopy)]


def test_a_gradient_pull_comes_right_before_the_first_task_that_needs_it(tmp_path):
    """Where the towers of -2gpu-model cross, each device's backward call of the
    crossing layer comes before its pull of the other device's gradient, so the two
    halves run at once instead of one after the other."""
    plan = make_plan(_net(tmp_path, "imagenet-2gpu-model"), (0, 1), MINI)
    tasks = make_tasks(plan.ops, sharded=lambda op: True)
    pulls = [t for t in tasks if t.action is TaskAction.GRAD_COPY]
    assert pulls
    for pull in pulls:
        after = tasks[pull.index + 1:]
        first = next(t for t in after if pull.index in t.deps)
        assert all(isinstance(t.op, GradCopy) for t in after[:after.index(first)])
    for t in tasks:
        assert all(dep < t.index for dep in t.deps)
    order = [(t.action, t.layer) for t in tasks]
    for a, b in (("conv3a", "pool2a"), ("conv3b", "pool2b")):
        assert order.index((TaskAction.BACKWARD, a)) < order.index((TaskAction.GRAD_COPY, b))


@pytest.mark.parametrize("name, gpus", [("imagenet-4gpu-data-model", (0, 1, 2, 3)),
                                        ("imagenet-2gpu-data", (0, 1))])
def test_sharded_update_is_bitwise_the_full_update(tmp_path, monkeypatch, name, gpus):
    """Weights and (assembled) momentum equal those of every replica doing the whole update."""
    net = _net(tmp_path, name)
    sharded, executor = _train(net, gpus)
    assert any(t.action is TaskAction.UPDATE_SLICE for t in executor.train_tasks())
    monkeypatch.setattr(ChunkedAllReduce, "sharded", False)
    full, executor = _train(net, gpus)
    assert not any(t.action is TaskAction.UPDATE_SLICE for t in executor.train_tasks())
    assert sharded.keys() == full.keys()
    assert any(k.startswith("momentum/") for k in sharded)
    for key in full:
        assert np.array_equal(sharded[key], full[key]), key
    for replicas in executor.store.weights.values():  # every replica holds the whole update
        for replica in replicas[1:]:
            for k in replica:
                assert np.array_equal(replica[k], replicas[0][k])


@pytest.mark.parametrize("parallel", [True, False])
def test_replicas_sharing_one_copy_train_bitwise_like_separate_copies(tmp_path, monkeypatch,
                                                                      parallel):
    """CPU replicas under synchronous SGD share one weights and momentum dict (no
    gather copies); the weights and the checkpoint state are those of separate copies,
    in both walks."""
    net = _net(tmp_path, "imagenet-2gpu-data")
    shared, executor = _train(net, (0, 1), parallel=parallel)
    assert executor.store.shared
    for name in executor.store.shared:
        for group in (executor.store.weights, executor.store.momentum):
            assert group[name][1] is group[name][0]
    monkeypatch.setattr(executor_setup, "shared_weight_layers", lambda *a, **k: frozenset())
    copies, executor = _train(net, (0, 1), parallel=parallel)
    assert not executor.store.shared
    assert executor.store.weights["conv1"][1] is not executor.store.weights["conv1"][0]
    assert shared.keys() == copies.keys()
    for key in copies:
        assert np.array_equal(shared[key], copies[key]), key


def test_only_synchronous_replicas_without_wball_share_weights(tmp_path):
    """Local SGD keeps a copy per replica (they drift apart between averages), and so
    does a layer with wball (each rank projects whole arrays)."""
    net = _net(tmp_path, "imagenet-2gpu-data")
    plan = make_plan(net, (0, 1), MINI)
    local = Executor(net, plan, make_devices((0, 1), "cpu"), local_sgd=2)
    try:
        assert not local.store.shared
    finally:
        local.close()
    for ldef in net:
        if ldef.name == "fc4096a":
            ldef.params["wball"] = [1.0]
    synced = Executor(net, plan, make_devices((0, 1), "cpu"))
    try:
        assert "fc4096a" not in synced.store.shared and "fc4096b" in synced.store.shared
    finally:
        synced.close()


def test_slices_smaller_than_the_rank_count(tmp_path):
    """A bias of 2 elements on 4 ranks: two ranks own empty slices."""
    devices = make_devices((0, 1, 2, 3), "cpu")
    collective = ChunkedAllReduce(devices)
    rng = np.random.default_rng(0)
    grads = [{"b": rng.standard_normal(2).astype(np.float32)} for _ in devices]
    sums = [collective.reduce_slice(grads, r)["b"] for r in range(4)]
    assert [s.size for s in sums] == [1, 1, 0, 0]
    total = grads[0]["b"] + grads[1]["b"] + grads[2]["b"] + grads[3]["b"]
    assert np.array_equal(np.concatenate(sums), total)
    weights = [{"b": np.full(2, float(r), np.float32)} for r in range(4)]
    for r in range(4):
        collective.gather_slices(weights, r)
    for r in range(4):  # slice 0 from rank 0, slice 1 from rank 1
        assert weights[r]["b"].tolist() == [0.0, 1.0]


def test_all_reduce_waits_while_the_layers_below_run(tmp_path, monkeypatch):
    """Device 0 does not idle while device 1 is slow with a layer's backward pass:
    it goes on with the layers below and reduces the slow layer's gradients later."""
    net = _net(tmp_path, "imagenet-2gpu-data")
    plan = make_plan(net, (0, 1), MINI)
    reduced = [op.layer for op in plan.ops if isinstance(op, AllReduce)]
    slow = reduced[0]  # the topmost weight layer: backward runs first
    executor = Executor(net, plan, make_devices((0, 1), "cpu"), seed=5, parallel=True)
    layer = executor.layers[slow]
    original = layer.backward

    def backward(*args, **kwargs):
        if threading.current_thread().name == "device-1":
            time.sleep(0.3)
        return original(*args, **kwargs)

    monkeypatch.setattr(layer, "backward", backward)
    try:
        executor.step(_batches(1)[0])
        executor.timings = []
        executor.step(_batches(1)[0])
        timings = executor.timings
    finally:
        executor.close()
    on0 = [t for t in timings if t.device == 0]
    reduce_slow = next(t for t in on0 if t.layer == slow and t.kind == "allreduce")
    later_backward = [t for t in on0 if t.kind == "backward" and t.layer in reduced[1:]]
    assert later_backward
    assert all(t.end <= reduce_slow.start for t in later_backward), \
        "device 0 should run the backward passes below while its all-reduce waits"


def test_an_op_between_a_layers_sharded_updates_is_refused():
    """The gather tasks follow the layer's last update; an operation that needs an
    earlier replica's update before that would lose its dependency, so it is refused."""
    from convnet.plan.ops import Forward

    ar = AllReduce(index=0, pass_index=0, layer="fc", deps=(), replica_devices=(0, 1), nbytes=8)
    up0 = Update(index=1, pass_index=0, layer="fc", deps=(0,), device=0, replica=0,
                 num_cases_scale=1.0)
    reader = Forward(index=2, pass_index=0, layer="fc", deps=(1,), device=0, replica=0, shard=0)
    up1 = Update(index=3, pass_index=0, layer="fc", deps=(0,), device=1, replica=1,
                 num_cases_scale=1.0)
    assert len(make_tasks([ar, up0, up1, reader], sharded=lambda op: True)) == 7
    with pytest.raises(ValueError, match="needs an update"):
        make_tasks([ar, up0, reader, up1], sharded=lambda op: True)
