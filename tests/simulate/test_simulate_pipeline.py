"""--simulate of a micro-batched plan: each operation costs what its piece's cases
cost, and the simulated workers overlap the stages (docs/PIPELINE.md)."""

from __future__ import annotations

import pytest

from convnet.config import load_net
from convnet.plan.planner import make_plan
from convnet.runtime.step.tasks import Task, TaskAction
from convnet.simulate.costs import ComputeProfile, CostModel, OpCost
from convnet.simulate.hardware import DEVICE_KINDS, HostFigures
from tests.support.cli import SINGLE_DEF, SINGLE_PARAMS
from tests.support.pipeline import split_layer_def

HOST = HostFigures(cores=2, gemm_flops=1e11, copy_bandwidth=1e12)
PER_CASE = 1e-4


def _net(tmp_path):
    return load_net(split_layer_def(SINGLE_DEF, ["fca"], tmp_path / "split.cfg"), SINGLE_PARAMS,
                    data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)


def _costs(net) -> CostModel:
    """Every forward and backward costs PER_CASE a case and nothing fixed, as if the
    net were large enough for the fixed parts to vanish."""
    costs = {(kind, l.name): OpCost(0.0, PER_CASE) for l in net if not l.is_data
             for kind in ("forward", "backward")}
    return CostModel(ComputeProfile(64, costs, host=HOST), DEVICE_KINDS["measured"])


def test_an_operation_costs_its_pieces_cases(tmp_path):
    net = _net(tmp_path)
    plan = make_plan(net, (0, 1), 12, 4)
    forward = next(op for op in plan.ops if op.kind == "forward")
    assert _costs(net).seconds(Task(0, forward, TaskAction.FORWARD, ()), plan) == \
        pytest.approx(3 * PER_CASE)


def test_micro_batches_shorten_the_predicted_step_of_a_two_stage_split(tmp_path):
    net = _net(tmp_path)
    costs = _costs(net)
    steps = {m: costs.predict(make_plan(net, (0, 1), 48, m)).step_seconds for m in (1, 2, 4, 8)}
    assert steps[1] > steps[2] > steps[4] > steps[8]
    # the stages take turns without micro-batches: every layer's 48 cases, forward and back
    layers = sum(1 for l in net if not l.is_data)
    assert steps[1] == pytest.approx(2 * layers * 48 * PER_CASE, rel=0.05)


def test_1f1b_is_predicted_as_fast_as_fill_drain(tmp_path):
    """The simulator walks the plan's task list, so it predicts the 1F1B order as it
    runs; with costs proportional to the cases both schedules take the same ticks."""
    net = _net(tmp_path)
    costs = _costs(net)
    for m in (2, 4, 8):
        fill_drain = costs.predict(make_plan(net, (0, 1), 48, m, "fill-drain")).step_seconds
        one_f_one_b = costs.predict(make_plan(net, (0, 1), 48, m, "1f1b")).step_seconds
        assert one_f_one_b == pytest.approx(fill_drain, rel=0.05), m
        assert one_f_one_b < costs.predict(make_plan(net, (0, 1), 48, 1)).step_seconds
