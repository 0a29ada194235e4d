"""1F1B (``--pipeline-schedule 1f1b``, docs/PIPELINE.md) and the freeing of activations
after their last reader (convnet/runtime/step/activation_frees.py).

* 1F1B trains bitwise the weights fill-drain trains with the same M, and its parallel
  walk is bitwise its sequential walk: 2- and 3-stage splits of the digits net, M
  dividing the shard and not, and the hybrid net with ``updatePeriod=2``.
* The executor's measured peak (its MemoryMeter) of the step's own buffers is lower
  under 1F1B than under fill-drain at M = 8 on a 2-stage split, and freeing lowers
  the peak of a plain step (M = 1) below what holding every activation to the end
  of the step gave; without a split, 1F1B holds one micro-batch at a time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from convnet.config import load_net
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.memory import MemoryMeter
from tests.support import ROOT
from tests.support.pipeline import split_layer_def

EXAMPLES = ROOT / "examples"
DIMS = {0: (1, 8, 8), 1: (1,)}


def _digits(tmp_path: Path, name="digits-single", stage_starts=None, params="digits-params.cfg"):
    layer_def = EXAMPLES / f"{name}.cfg"
    if stage_starts is not None:
        layer_def = split_layer_def(layer_def, stage_starts, tmp_path / "split.cfg")
    return load_net(layer_def, EXAMPLES / params, data_dims=DIMS, num_classes=10)


def _batches(mini, steps=2, seed=7):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((mini,) + DIMS[0]).astype(np.float32),
             rng.integers(0, 10, (mini, 1)).astype(np.float32)] for _ in range(steps)]


def _train(net, gpus, mini, micro_batches, schedule, parallel=True):
    plan = make_plan(net, gpus, mini, micro_batches, schedule)
    executor = Executor(net, plan, make_devices(gpus, "cpu"), seed=3, parallel=parallel)
    try:
        costs = [executor.step(b, progress=i / 10).costs
                 for i, b in enumerate(_batches(mini))]
        return executor.state_arrays(), costs
    finally:
        executor.close()


def _assert_bitwise(a, b):
    state, costs = a
    other, other_costs = b
    assert state.keys() == other.keys() and state
    for key in state:
        assert np.array_equal(state[key], other[key]), key
    assert costs == other_costs


@pytest.mark.parametrize("name, stage_starts, params, micro_batches", [
    ("digits-single", ["fca"], "digits-params.cfg", 4),
    ("digits-single", ["fca"], "digits-params.cfg", 5),
    ("digits-single", ["conv2", "fca"], "digits-params.cfg", 3),
    ("digits-hybrid", None, "digits-hybrid-params.cfg", 3)])
def test_1f1b_trains_bitwise_what_fill_drain_and_the_sequential_walk_train(
        tmp_path, name, stage_starts, params, micro_batches):
    net = _digits(tmp_path, name, stage_starts, params)
    gpus = (0, 1, 2) if stage_starts and len(stage_starts) == 2 else (0, 1)
    one_f_one_b = _train(net, gpus, 12, micro_batches, "1f1b")
    _assert_bitwise(one_f_one_b, _train(net, gpus, 12, micro_batches, "fill-drain"))
    _assert_bitwise(one_f_one_b, _train(net, gpus, 12, micro_batches, "1f1b", parallel=False))


def _step_peaks(net, gpus, mini, micro_batches, schedule, free=True):
    """Per device, the step's own buffers (activations, kept state, gradients) at the
    measured peak of one training step after a warm-up step."""
    plan = make_plan(net, gpus, mini, micro_batches, schedule)
    executor = Executor(net, plan, make_devices(gpus, "cpu"), seed=0)
    batch = _batches(mini, steps=1)[0]
    try:
        executor.step(batch)
        executor.memory = meter = MemoryMeter(executor)
        if free:
            executor.step(batch)
        else:  # the same step, holding every activation to its end
            executor._run_tasks(batch, executor.train_tasks(), train=True, progress=0.0)
    finally:
        executor.close()
    return [p.activation_bytes for p in meter.peaks]


def test_1f1b_holds_less_than_fill_drain_at_eight_micro_batches():
    net = load_net(EXAMPLES / "digits-pipeline.cfg", EXAMPLES / "digits-params.cfg",
                   data_dims=DIMS, num_classes=10)
    fill_drain = _step_peaks(net, (0, 1), 128, 8, "fill-drain")
    one_f_one_b = _step_peaks(net, (0, 1), 128, 8, "1f1b")
    # stage 0 holds 2 micro-batches' activations instead of 8, stage 1 one instead of 8
    assert one_f_one_b[0] < 0.5 * fill_drain[0]
    assert one_f_one_b[1] < 0.5 * fill_drain[1]


def test_freeing_after_the_last_reader_lowers_a_plain_steps_peak():
    net = load_net(EXAMPLES / "digits-single.cfg", EXAMPLES / "digits-params.cfg",
                   data_dims=DIMS, num_classes=10)
    freed = _step_peaks(net, (0,), 128, 1, "fill-drain")
    held = _step_peaks(net, (0,), 128, 1, "fill-drain", free=False)
    assert freed[0] < held[0]


def test_1f1b_without_a_split_holds_one_micro_batch_at_a_time():
    """One stage: 1F1B is gradient accumulation, F0 B0 F1 B1 ..., so a step holds about
    1/M of the plain step's buffers; fill-drain holds them all at its turn."""
    net = load_net(EXAMPLES / "digits-single.cfg", EXAMPLES / "digits-params.cfg",
                   data_dims=DIMS, num_classes=10)
    plain = _step_peaks(net, (0,), 128, 1, "fill-drain")[0]
    assert _step_peaks(net, (0,), 128, 4, "1f1b")[0] < 0.3 * plain
    assert _step_peaks(net, (0,), 128, 4, "fill-drain")[0] > 0.8 * plain
