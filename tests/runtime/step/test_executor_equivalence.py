"""Parallel execution computes what one device computes (docs/DESIGN.md).

The executor (planner + devices + workers) is pinned down against
:class:`tests.support.reference_model.ReferenceTrainer`, an independent whole-range computation
with the layer library, on scaled-down copies of the reference configs.
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet.config import load_net
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.plan.planner import make_plan
from convnet.layers import build_layer
from convnet.layers.base import Context
from tests.support.reference_model import ReferenceTrainer
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

MINI = 8
STEPS = 3


def _load(tmp_path, name, params_edit=None):
    layer_def, params = scaled_config(name, tmp_path, params_edit)
    return load_net(layer_def, params, data_dims={0: IMAGE_DIMS, 1: (1,)},
                    num_classes=NUM_CLASSES)


def _batches(count: int, seed: int = 7):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((MINI,) + IMAGE_DIMS).astype(np.float32),
             rng.integers(0, NUM_CLASSES, (MINI, 1)).astype(np.float32)] for _ in range(count)]


def _run_executor(net, gpus, parallel=True, batches=None):
    plan = make_plan(net, gpus, MINI)
    executor = Executor(net, plan, make_devices(gpus, "cpu"), seed=3, parallel=parallel)
    try:
        costs = [executor.step(b, progress=i / 10).costs for i, b in enumerate(batches)]
        return executor.state_arrays(), costs, executor
    finally:
        executor.close()


def _run_reference(net, batches, replicas=None):
    ref = ReferenceTrainer(net, seed=3, replicas=replicas)
    costs = [ref.step(b, progress=i / 10) for i, b in enumerate(batches)]
    return ref, costs


def _assert_weights_close(state, ref, rtol=2e-4, atol=2e-6):
    checked = 0
    for name, params in ref.weights.items():
        for k, value in params.items():
            np.testing.assert_allclose(state[f"weights/{name}/{k}"], value, rtol=rtol, atol=atol,
                                       err_msg=f"{name}/{k}")
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("name, gpus", [("imagenet-2gpu-data", (0, 1)),
                                        ("imagenet-4gpu-data", (0, 1, 2, 3))])
def test_data_parallel_equals_one_device(tmp_path, name, gpus):
    """Data parallelism equals one device (these nets have dropout, whose masks must match)."""
    net = _load(tmp_path, name)
    batches = _batches(STEPS)
    state, costs, _ = _run_executor(net, gpus, batches=batches)
    ref, ref_costs = _run_reference(net, batches)
    _assert_weights_close(state, ref)
    for got, want in zip(costs, ref_costs):
        assert got["logprob"]["cost"] == pytest.approx(want["logprob"], rel=1e-4)


def test_data_parallel_equals_one_device_with_dropout_on_a_conv_layer(tmp_path):
    """The dropout fork's ``dropout=`` on conv2: two data-parallel shards draw the
    masks that one device draws, so the weights and costs agree."""
    net = _load(tmp_path, "imagenet-2gpu-data",
                lambda text: text.replace("[conv2]\n", "[conv2]\ndropout=0.3\n"))
    assert net["conv2"].params["dropout"] == 0.3
    batches = _batches(STEPS)
    state, costs, _ = _run_executor(net, (0, 1), batches=batches)
    ref, ref_costs = _run_reference(net, batches)
    _assert_weights_close(state, ref)
    for got, want in zip(costs, ref_costs):
        assert got["logprob"]["cost"] == pytest.approx(want["logprob"], rel=1e-4)

def test_model_parallel_equals_one_device(tmp_path):
    """Model parallelism equals one device, on the two-tower structure of layers-imagenet-2gpu-model.cfg."""
    net = _load(tmp_path, "imagenet-2gpu-model")
    batches = _batches(STEPS)
    state, _, _ = _run_executor(net, (0, 1), batches=batches)
    ref, _ = _run_reference(net, batches)
    _assert_weights_close(state, ref)


def _update_period(value: int):
    return lambda text: text.replace("updatePeriod=1", f"updatePeriod={value}")


def test_hybrid_with_update_period_p_equals_one_device(tmp_path):
    """Hybrid, first half: updatePeriod = P gives the single-device update."""
    net = _load(tmp_path, "imagenet-4gpu-data-model", _update_period(4))
    batches = _batches(STEPS)
    state, _, _ = _run_executor(net, (0, 1, 2, 3), batches=batches)
    ref, _ = _run_reference(net, batches)
    _assert_weights_close(state, ref)


def test_hybrid_with_update_period_1_is_p_sequential_updates(tmp_path):
    """Hybrid, second half: the fc layers update once per pass on M/P cases."""
    net = _load(tmp_path, "imagenet-4gpu-data-model")
    batches = _batches(STEPS)
    state, _, _ = _run_executor(net, (0, 1, 2, 3), batches=batches)
    plan = make_plan(net, (0, 1, 2, 3), MINI)
    counts = {name: p.replicas for name, p in plan.layers.items() if not net[name].is_data}
    ref, _ = _run_reference(net, batches, replicas=counts)
    _assert_weights_close(state, ref)
    single, _ = _run_reference(net, batches)
    fc = single.weights["fc1000"]["W0"]
    assert not np.allclose(state["weights/fc1000/W0"], fc, rtol=1e-3, atol=1e-5), \
        "four updates per minibatch must differ from one"


@pytest.mark.parametrize("name, gpus", [("imagenet-4gpu-data-model", (0, 1, 2, 3)),
                                        ("imagenet-4gpu-data", (0, 1, 2, 3)),
                                        ("imagenet-2gpu-data", (0, 1)),
                                        ("imagenet-2gpu-model", (0, 1))])
def test_parallel_and_sequential_walks_are_bitwise_identical(tmp_path, name, gpus):
    """The parallel and the sequential walk of a plan give bitwise-identical weights."""
    net = _load(tmp_path, name)
    batches = _batches(STEPS)
    parallel, parallel_costs, _ = _run_executor(net, gpus, parallel=True, batches=batches)
    sequential, sequential_costs, _ = _run_executor(net, gpus, parallel=False, batches=batches)
    assert parallel.keys() == sequential.keys()
    for key in parallel:
        assert np.array_equal(parallel[key], sequential[key]), key
    assert parallel_costs == sequential_costs


def test_replicas_hold_identical_weights_after_training(tmp_path):
    net = _load(tmp_path, "imagenet-4gpu-data-model")
    gpus = (0, 1, 2, 3)
    _, _, executor = _run_executor(net, gpus, batches=_batches(2))
    conv1 = executor.store.weights["conv1"]
    assert len(conv1) == 4
    for replica in conv1[1:]:
        for k in replica:
            assert np.array_equal(replica[k], conv1[0][k])


def test_dropout_masks_do_not_depend_on_the_split(tmp_path):
    """Dropout: a mask is a function of (seed, step, layer, case index)."""
    net = _load(tmp_path, "imagenet-2gpu-data")
    ldef = next(l for l in net if l.type.startswith("dropout"))
    layer = build_layer(ldef)
    x = np.ones((MINI,) + tuple(ldef.output_shape), np.float32)
    whole, _ = layer.forward([x], {}, Context(seed=5, step=2, case_offset=0))
    halves = [layer.forward([x[lo:lo + MINI // 2]], {}, Context(seed=5, step=2, case_offset=lo))[0]
              for lo in (0, MINI // 2)]
    assert np.array_equal(whole, np.concatenate(halves))
    other_step, _ = layer.forward([x], {}, Context(seed=5, step=3, case_offset=0))
    assert not np.array_equal(whole, other_step)
