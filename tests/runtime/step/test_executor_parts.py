"""The executor's parts: task actions, learning rules, the weight store, the
optimizer and the errors for NaN or inf values."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.config.values.schedules import Schedule
from convnet.errors import DivergedError, NonFiniteDataError
from convnet.plan.planner import make_plan
from convnet.runtime.step import optimizer
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.learning_rules import BIAS_KEY, LearningRule, learning_rules, weight_key
from convnet.runtime.step.optimizer import MomentumSGD
from convnet.runtime.step.tasks import TaskAction, make_tasks
from convnet.runtime.step.weights import WeightStore
from tests.support.plans import fc_net
from tests.support.plans import SMALL_HYBRID as HYBRID
from tests.support.plans import small_batch as _batch

GPUS = (0, 1)


@pytest.mark.parametrize("sharded", [True, False])
def test_task_actions_keep_the_categories_of_timings(sharded):
    """A whole operation is timed under its own kind; the parts of a sharded
    update under the all-reduce or update they replace."""
    plan = make_plan(fc_net(HYBRID), GPUS, 8)
    for task in make_tasks(plan.ops, lambda op: sharded):
        if task.action in (TaskAction.REDUCE_SLICE, TaskAction.GATHER):
            assert task.kind == "allreduce"
        elif task.action is TaskAction.UPDATE_SLICE:
            assert task.kind == "update"
        else:
            assert task.action is TaskAction.of_op(task.op)
            assert task.kind == task.op.kind


def test_every_task_action_has_a_method_in_the_executor():
    net = fc_net(HYBRID)
    executor = Executor(net, make_plan(net, GPUS, 8), make_devices(GPUS, "cpu"), parallel=False)
    try:
        assert set(executor._actions) == set(TaskAction)
    finally:
        executor.close()


def test_learning_rules_pair_each_input_weights_with_its_params():
    ldef = fc_net(HYBRID)["top"]
    ldef.params = dict(ldef.params, epsW=[Schedule("const", 0.1), Schedule("const", 0.2)],
                       momW=[0.5, 0.6], wc=[0.01, 0.02], epsB=Schedule("const", 0.3), momB=0.7)
    assert learning_rules(ldef) == {
        weight_key(0): LearningRule(Schedule("const", 0.1), 0.5, 0.01),
        weight_key(1): LearningRule(Schedule("const", 0.2), 0.6, 0.02),
        BIAS_KEY: LearningRule(Schedule("const", 0.3), 0.7, 0.0)}
    assert learning_rules(fc_net(HYBRID)["probs"]) == {}


def test_weight_store_refuses_weights_without_a_learning_rule():
    net = fc_net(HYBRID)
    plan = make_plan(net, GPUS, 8)

    class ExtraWeights:
        def init_params(self, rng):
            return {weight_key(0): np.zeros((4, 4), np.float32),
                    weight_key(1): np.zeros(4, np.float32), BIAS_KEY: np.zeros(4, np.float32)}

    with pytest.raises(ValueError, match="layer 'fca' has weight arrays"):
        WeightStore(net, plan, make_devices(GPUS, "cpu"), {"fca": ExtraWeights()}, 0, {})


def test_blocked_cpu_update_is_bitwise_the_whole_array_update(monkeypatch):
    """The cache-blocked form (C-ordered arrays) against the whole-array form
    (a Fortran-ordered copy of the same values), over several blocks."""
    monkeypatch.setattr(optimizer, "UPDATE_BLOCK", 7)
    rng = np.random.default_rng(3)
    w, inc, grad = (rng.standard_normal((6, 5)).astype(np.float32) for _ in range(3))
    rule = LearningRule(Schedule("linear", 0.01, 10.0), 0.9, 0.004)
    blocked = [w.copy(), inc.copy()]
    whole = [np.asfortranarray(w), np.asfortranarray(inc)]
    for arrays in (blocked, whole):
        MomentumSGD().update(np, arrays[0], arrays[1], grad, rule, 0.3, 16)
    expected_inc = 0.9 * inc - rule.eps.value(0.3) * (grad / 16 + 0.004 * w)
    assert np.array_equal(blocked[0], whole[0]) and np.array_equal(blocked[1], whole[1])
    assert np.allclose(blocked[1], expected_inc, rtol=1e-5)
    assert np.allclose(blocked[0], w + expected_inc)


@pytest.mark.parametrize("parallel", [True, False])
def test_nan_in_the_data_is_a_data_error_nan_from_a_layer_is_divergence(parallel):
    net = fc_net(HYBRID)
    executor = Executor(net, make_plan(net, GPUS, 8), make_devices(GPUS, "cpu"),
                        parallel=parallel)
    try:
        batch = _batch()
        batch[0][2, 0] = np.inf
        with pytest.raises(NonFiniteDataError):
            executor.step(batch)
        executor.store.weights["fcb"][0]["W0"][:] = np.inf
        with pytest.raises(DivergedError):
            executor.step(_batch())
    finally:
        executor.close()
