"""The executor stops clearly on bad input and never hangs when a worker fails."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from convnet.runtime.devices.backends import make_devices
from convnet.errors import DataError, PlanError, TrainingError
from convnet.runtime.step.executor import Executor
from convnet.plan.planner import make_plan
from tests.support.plans import SMALL_HYBRID as HYBRID, fc_net
from tests.support.plans import small_batch as _batch

GPUS = (0, 1)


def _executor(parallel=True):
    net = fc_net(HYBRID)
    plan = make_plan(net, GPUS, 8)
    return Executor(net, plan, make_devices(GPUS, "cpu"), parallel=parallel)


@pytest.mark.parametrize("parallel", [True, False])
def test_nan_in_the_data_names_the_data_layer_and_device(parallel):
    executor = _executor(parallel)
    batch = _batch()
    batch[0][5, 1] = np.nan  # case 5 is in shard 1, which device 1 loads
    try:
        with pytest.raises(TrainingError, match=r"data layer 'data' .*device 1"):
            executor.step(batch)
    finally:
        executor.close()


@pytest.mark.parametrize("parallel", [True, False])
def test_nan_produced_mid_step_names_the_layer_and_device(parallel):
    executor = _executor(parallel)
    executor.store.weights["fcb"][0]["W0"][:] = np.inf  # fcb computes inf - inf: NaN
    try:
        with pytest.raises(TrainingError, match=r"output of layer 'fcb' on device 1"):
            executor.step(_batch())
    finally:
        executor.close()


def test_nan_weights_are_caught_at_the_update():
    executor = _executor()
    try:
        executor.step(_batch())
        executor.store.weights["fcb"][0]["W0"][0, 0] = np.inf
        with pytest.raises(TrainingError, match=r"layer '(fcb|cost|fc1)'|non-finite"):
            executor.step(_batch())
    finally:
        executor.close()


def test_a_failing_worker_does_not_hang_the_others(monkeypatch):
    executor = _executor()
    layer = executor.layers["fcb"]
    original = layer.forward

    def broken(inputs, params, ctx):
        if threading.current_thread().name == "device-1":
            raise RuntimeError("simulated failure on device 1")
        return original(inputs, params, ctx)

    monkeypatch.setattr(layer, "forward", broken)
    outcome = {}

    def run():
        try:
            executor.step(_batch())
        except RuntimeError as error:
            outcome["error"] = str(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "the step hung after a worker failed"
    assert outcome["error"] == "simulated failure on device 1"
    monkeypatch.setattr(layer, "forward", original)
    assert executor.step(_batch()).num_cases == 8, "the workers are usable after a failure"
    executor.close()


def test_batch_with_wrong_case_shape_is_refused():
    executor = _executor()
    try:
        with pytest.raises(DataError, match="expects cases of shape 4"):
            executor.step([np.zeros((8, 5), np.float32), np.zeros((8, 1), np.float32)])
    finally:
        executor.close()


def test_minibatch_too_small_to_shard_is_refused():
    executor = _executor()
    try:
        with pytest.raises(DataError, match="cannot be split into 2 shards"):
            executor.step(_batch(1))
    finally:
        executor.close()


def test_device_index_past_gpu_list_is_a_plan_error():
    net = fc_net([("fc1", "fc", ["data"], [0, 2], 0), ("probs", "softmax", ["fc1"], None, 0),
                  ("cost", "cost.logreg", ["labels", "probs"], None, 0)])
    with pytest.raises(PlanError, match=r"\[fc1\].*device index 2 is past the --gpu list"):
        make_plan(net, GPUS, 8)


def test_short_final_minibatch_is_split_as_evenly_as_possible():
    executor = _executor()
    try:
        result = executor.step(_batch(7))
        assert result.num_cases == 7
        assert np.isfinite(result.costs["cost"]["cost"])
    finally:
        executor.close()
