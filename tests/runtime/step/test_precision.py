"""--precision on CPU devices: float32 master weights, 16-bit layers, fp16's loss scale.

numpy computes float16 (slowly: no BLAS) and, with ml_dtypes, bfloat16, which is
enough to test the plumbing that the GPU runs: what is cast where, that the
weights and updates stay float32, that a step whose gradients overflow is undone
and the scale backs off, and that a short training reaches fp32's test error.
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet.config import load_net
from convnet.data import make_provider
from convnet.errors import DivergedError
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.precision import LossScale, compute_dtype

from tests.support import ROOT
from tests.support.plans import SMALL_HYBRID, fc_net, small_batches

ml_dtypes = pytest.importorskip("ml_dtypes")
EXAMPLES = ROOT / "examples"


def _hybrid(precision: str, parallel: bool = True) -> Executor:
    net = fc_net(SMALL_HYBRID)
    return Executor(net, make_plan(net, (0, 1), 8), make_devices((0, 1), "cpu"),
                    parallel=parallel, precision=precision)


def _states(ex: Executor) -> dict:
    return {k: v.copy() for k, v in ex.state_arrays().items()}


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_layers_compute_in_16_bits_and_the_master_weights_stay_float32(precision):
    ex = _hybrid(precision)
    try:
        for batch in small_batches(3, seed=1):
            ex.step(batch)
        state = ex.state_arrays()
        assert all(a.dtype == np.float32 for a in state.values())
        assert any(np.any(a) for k, a in state.items() if k.startswith("momentum/"))
        batch = small_batches(1, seed=2)[0]
        assert ex.features(batch, "fc1").dtype == compute_dtype(precision)
        assert ex.features(batch, "probs").dtype == np.float32  # softmax computes in float32
    finally:
        ex.close()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_sequential_is_bitwise_parallel_in_16_bits(precision):
    states = []
    for parallel in (True, False):
        ex = _hybrid(precision, parallel)
        try:
            for batch in small_batches(3, seed=3):
                ex.step(batch)
            states.append(_states(ex))
        finally:
            ex.close()
    assert all(np.array_equal(states[0][k], states[1][k]) for k in states[0])


def test_an_overflowing_step_is_undone_and_the_scale_backs_off():
    ex = _hybrid("fp16")
    scaling = ex.precision.loss_scale
    try:
        batches = small_batches(4, seed=4)
        ex.step(batches[0])
        before = _states(ex)
        scaling.scale = 2.0 ** 24  # cost gradients of 2^24: float16 overflows (65504)
        result = ex.step(batches[1])
        assert result.skipped and scaling.scale == 2.0 ** 23 and scaling.good_steps == 0
        after = ex.state_arrays()
        assert all(np.array_equal(before[k], after[k]) for k in before)
        assert np.isfinite(result.costs["cost"]["cost"])  # the costs are still reported
        skipped = [ex.step(batches[2]).skipped for _ in range(12)]
        assert skipped[-1] is False  # halved until the gradients fit: it trains again
        assert scaling.scale == 2.0 ** (23 - sum(skipped))
        assert any(not np.array_equal(before[k], a) for k, a in ex.state_arrays().items())
    finally:
        ex.close()


def test_the_scale_grows_after_steps_without_overflow_and_stops_at_its_floor():
    ex = _hybrid("fp16")
    scaling = ex.precision.loss_scale
    scaling.scale, scaling.growth_interval = 4.0, 2
    try:
        for batch in small_batches(2, seed=5):
            assert not ex.step(batch).skipped
        assert scaling.scale == 8.0 and scaling.good_steps == 0
        grads_of = ex.layers["fcb"].backward

        def overflowing(*args):  # gradients that overflow at any scale
            input_grads, param_grads = grads_of(*args)
            return input_grads, {k: g * np.inf for k, g in param_grads.items()}

        ex.layers["fcb"].backward = overflowing
        scaling.scale = LossScale.MIN
        with pytest.raises(DivergedError, match="overflow float16 even at loss scale 1"):
            ex.step(small_batches(1, seed=6)[0])
    finally:
        ex.close()


@pytest.mark.parametrize("state", [{"scale": 3.0, "good_steps": 0}, {"scale": 2.0 ** 30,
                                   "good_steps": 0}, {"scale": 8.0, "good_steps": -1},
                                   {"scale": "8", "good_steps": 0}, [8.0, 0]])
def test_a_damaged_saved_scale_is_refused(state):
    with pytest.raises(ValueError):
        LossScale.from_state(state)
    assert LossScale.from_state({"scale": 512.0, "good_steps": 7}) == LossScale(512.0, 7)


def test_tf32_and_loss_scaling_apart_are_refused():
    net = fc_net(SMALL_HYBRID)
    plan = make_plan(net, (0, 1), 8)
    with pytest.raises(ValueError, match="tf32 computes on GPU tensor cores"):
        Executor(net, plan, make_devices((0, 1), "cpu"), precision="tf32")
    with pytest.raises(ValueError, match="cannot agree on"):
        Executor(net, plan, make_devices((0, 1), "cpu"), precision="fp16", local_sgd=2)


def test_a_short_bf16_training_reaches_fp32s_test_error():
    """Two epochs of the digits net: bfloat16's test error is within the sampling
    noise of float32's (three binomial standard errors on the test cases)."""
    net = load_net(EXAMPLES / "digits-single.cfg", EXAMPLES / "digits-params.cfg",
                   data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)
    provider = make_provider("digits")
    errors = {}
    for precision in ("fp32", "bf16"):
        ex = Executor(net, make_plan(net, (0,), 64), make_devices((0,), "cpu"),
                      precision=precision)
        try:
            for epoch in range(2):
                for b in provider.train_batches:
                    data = provider.get_batch(b, train=True, epoch=epoch)
                    for i in range(0, len(data[0]), 64):
                        ex.step([d[i:i + 64] for d in data])
            wrong = cases = 0
            for b in provider.test_batches:
                result = ex.evaluate(provider.get_batch(b, train=False, epoch=0))
                wrong += result.costs["logprob"]["error"] * result.num_cases
                cases += result.num_cases
            errors[precision] = wrong / cases
        finally:
            ex.close()
    p = max(errors["fp32"], 1 / cases)
    assert errors["fp32"] < 0.05
    assert abs(errors["bf16"] - errors["fp32"]) <= 3 * np.sqrt(p * (1 - p) / cases), errors
