"""``--print-plan``'s pipeline section (convnet/plan/pipeline.py): the grid is the
order the plan really gives each device, the bubble its idle share."""

from __future__ import annotations

import json

import pytest

from convnet.plan.ops import Backward, Forward
from convnet.plan.pipeline import bubble_share, grid, pipeline_summary
from convnet.plan.planner import make_plan
from convnet.plan.report import plan_json, plan_text
from convnet.plan.scheduler import layer_stages
from tests.support.plans import fc_net

CHAIN = [("fc0", "fc", ["data"], [0], 0), ("fc1", "fc", ["fc0"], [1], 0),
         ("probs", "softmax", ["fc1"], None, 0),
         ("cost", "cost.logreg", ["labels", "probs"], [1], 0)]
BACK_AND_FORTH = [("fc0", "fc", ["data"], [0], 0), ("fc1", "fc", ["fc0"], [1], 0),
                  ("fc2", "fc", ["fc1"], [0], 0), ("probs", "softmax", ["fc2"], None, 0),
                  ("cost", "cost.logreg", ["labels", "probs"], [0], 0)]


@pytest.mark.parametrize("schedule, stage0, stage1", [
    ("fill-drain", ["F0", "F1", "F2", "F3", ".", ".", "B0", "B1", "B2", "B3"],
     [".", "F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3", "."]),
    # 1F1B: stage 0 warms up with 2 forwards, stage 1 with 1; the same 10 ticks
    ("1f1b", ["F0", "F1", ".", "B0", "F2", "B1", "F3", "B2", ".", "B3"],
     [".", "F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3", "."])])
def test_two_stages_of_four_micro_batches(schedule, stage0, stage1):
    net = fc_net(CHAIN)
    plan = make_plan(net, (0, 0), 8, 4, schedule)
    assert grid(plan, net, 0) == {0: stage0} and grid(plan, net, 1) == {1: stage1}
    assert bubble_share(plan, net, 0) == bubble_share(plan, net, 1) == pytest.approx(1 / 5)
    assert bubble_share(make_plan(net, (0, 0), 8, 8, schedule), net, 0) == \
        pytest.approx(1 / 9)


@pytest.mark.parametrize("schedule", ["fill-drain", "1f1b"])
@pytest.mark.parametrize("spec, micro_batches", [(CHAIN, 3), (BACK_AND_FORTH, 2),
                                                 (BACK_AND_FORTH, 4)])
def test_the_grid_is_the_order_each_device_runs(spec, micro_batches, schedule):
    net = fc_net(spec)
    plan = make_plan(net, (0, 0), 8, micro_batches, schedule)
    stages = layer_stages(net, plan)
    for device in range(plan.num_devices):
        ran = []
        for op in plan.ops_for_device(device):
            if isinstance(op, (Forward, Backward)):
                cell = ("F" if isinstance(op, Forward) else "B") + str(plan.micro_of(op.shard))
                if not ran or ran[-1] != (cell, stages[op.layer]):
                    ran.append((cell, stages[op.layer]))
        rows = grid(plan, net, device)
        ticks = len(next(iter(rows.values())))
        shown = []
        for t in range(ticks):
            at_tick = [(cells[t], s) for s, cells in rows.items() if cells[t] != "."]
            shown += sorted(at_tick, key=lambda c: c[1] if c[0][0] == "F" else -c[1])
        assert ran == shown, device


def test_print_plan_shows_the_pipeline_and_json_has_it():
    net = fc_net(CHAIN)
    text = plan_text(make_plan(net, (0, 0), 8, 4, "fill-drain"), net)
    assert "Pipeline: 4 micro-batch(es) per shard (2, 2, 2, 2 cases), fill-drain" in text
    assert "stage 1: .  F0 F1 F2 F3 B0 B1 B2 B3" in text
    assert "Pipeline" not in plan_text(make_plan(net, (0, 0), 8), net)
    plan = make_plan(net, (0, 0), 8, 4)  # the default schedule: 1F1B
    text = plan_text(plan, net)
    assert "(2, 2, 2, 2 cases), 1f1b schedule, 10 ticks per pass" in text
    assert "stage 1: .  F0 B0 F1 B1 F2 B2 F3 B3" in text
    data = json.loads(plan_json(plan, net))
    assert data["micro_batches"] == 4
    assert data["pipeline"] == json.loads(json.dumps(pipeline_summary(plan, net)))
    assert data["pipeline"]["devices"][1]["grid"]["1"][:3] == [".", "F0", "B0"]
    assert data["pipeline"]["schedule"] == "1f1b"
    assert json.loads(plan_json(make_plan(net, (0, 0), 8, 4, "fill-drain"), net)
                      )["pipeline"]["schedule"] == "fill-drain"


@pytest.mark.parametrize("layer_def, micro_batches, schedule",
                         [("digits-pipeline.cfg", 4, "fill-drain"),
                          ("digits-pipeline.cfg", 4, "1f1b"), ("digits-pipeline.cfg", 8, "1f1b"),
                          ("digits-data.cfg", 3, "fill-drain"), ("digits-data.cfg", 3, "1f1b")])
def test_the_activation_estimate_holds_for_micro_batches(layer_def, micro_batches, schedule):
    """What the executor's accounting holds at each device's measured peak is at least
    80% of the activation memory --print-plan estimates (the bound without
    micro-batches, tests/plan/test_memory_estimate.py) and at most the estimate plus
    the gradients that may wait for their pulls; without such gradients (data
    parallelism) it is within 20% of the estimate.  (Both between operations: the
    temporaries inside a layer call are held to the process's measured peak by
    tests/app/test_memory_measured.py.)"""
    import numpy as np

    from convnet.config import load_net
    from convnet.plan.memory import STEP, memory_peaks
    from convnet.plan.pipeline import gradient_backlog
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor
    from convnet.runtime.step.memory import MemoryMeter
    from tests.support import ROOT

    examples = ROOT / "examples"
    net = load_net(examples / layer_def, examples / "digits-params.cfg",
                   data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)
    plan = make_plan(net, (0, 1), 96, micro_batches, schedule)
    rng = np.random.default_rng(0)
    batch = [rng.standard_normal((96, 1, 8, 8)).astype(np.float32),
             rng.integers(0, 10, (96, 1)).astype(np.float32)]
    executor = Executor(net, plan, make_devices((0, 1), "cpu"), seed=0)
    try:
        executor.step(batch)
        executor.memory = meter = MemoryMeter(executor)
        executor.step(batch)
    finally:
        executor.close()
    estimates = memory_peaks(plan, net, executor.store.shared)
    backlog = gradient_backlog(plan, net)
    assert any(backlog) == (layer_def == "digits-pipeline.cfg")
    for measured, estimate, waiting in zip(meter.peaks, estimates, backlog):
        assert measured.peak_bytes
        # the executor's accounting sees the memory between operations, not the
        # temporaries inside a layer call
        between_ops = sum(estimate.between_ops_at_peak.get(k, 0) for k in STEP)
        low, high = 0.8 * between_ops, 1.2 * between_ops + waiting
        assert low <= measured.activation_bytes <= high, (measured, estimate, waiting)
