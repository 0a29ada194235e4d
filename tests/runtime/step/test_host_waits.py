"""A step waits for each of its devices once: at its end, for the costs and finite flags.

The count comes from :class:`~convnet.runtime.step.host_reads.HostReads`, through
which every read of a device value by the executor goes.  So that the count cannot
miss a read made some other way, the steps here also run on CPU devices whose
arrays refuse ``float()``, ``bool()``, ``int()`` and ``.item()`` (what a stray read
of a CuPy array would be, a wait for the GPU): every array such a device makes
(weights, momentum, the uploaded minibatch, copies) is watched, and so is what numpy
computes from them with ufuncs, reductions and matmul (the fc layers' activations and
gradients, the cost sums and flags); arrays a kernel allocates itself and fills (the
conv layers' outputs) are not.
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet.config import load_net
from convnet.errors import DataError, DivergedError, NonFiniteDataError
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.devices.cpu import CpuDevice
from convnet.runtime.step.executor import Executor

from tests.support import ROOT
from tests.support.plans import SMALL_HYBRID, fc_net, small_batch

ALL_LAYERS = (ROOT / "examples" / "all-layers.cfg", ROOT / "examples" / "all-layers-params.cfg")


class StrayRead(AssertionError):
    """A device value read on the host outside HostReads."""


class WatchedArray(np.ndarray):
    """An array that refuses to be read on the host; results computed from it are
    watched too (0-d ones included, where numpy would give a plain scalar)."""

    def __array_wrap__(self, array, context=None, return_scalar=False):
        return np.ndarray.__array_wrap__(self, array, context, False)

    def _refuse(self, *args):
        raise StrayRead("a device value was read on the host outside HostReads")

    __bool__ = __float__ = __int__ = __index__ = item = tolist = _refuse


class WatchedCpuDevice(CpuDevice):
    """A CPU device whose arrays are :class:`WatchedArray`."""

    def to_device(self, host_array):
        return super().to_device(host_array).view(WatchedArray)

    def copy_from(self, array):
        return super().copy_from(array).view(WatchedArray)


def _all_layers_net():
    return load_net(*ALL_LAYERS, data_dims={0: (3, 8, 8), 1: (1,)}, num_classes=4)


def _batch(net, cases: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((cases,) + tuple(net.data_dims[0])).astype(np.float32)
    labels = rng.integers(0, net.num_classes, (cases, 1)).astype(np.float32)
    return [images, labels]


def test_watched_arrays_refuse_host_reads_and_stay_watched():
    x = np.arange(6, dtype=np.float32).view(WatchedArray)
    for read in (float, bool, int, lambda a: a.item()):
        with pytest.raises(StrayRead):
            read(x.sum())
    assert isinstance(np.isfinite(x).all(), WatchedArray)
    assert isinstance(x.reshape(2, 3) @ x.reshape(3, 2), WatchedArray)
    assert float(np.asarray(x.sum()).item()) == 15.0  # what HostReads does


@pytest.mark.parametrize("parallel", [True, False])
def test_a_training_step_of_every_layer_type_waits_once(parallel):
    net = _all_layers_net()
    ex = Executor(net, make_plan(net, (0,), 8), [WatchedCpuDevice(0, 0)], parallel=parallel)
    try:
        for _ in range(2):
            result = ex.step(_batch(net))
            assert result.host_waits == 1
        assert ex.evaluate(_batch(net, seed=1)).host_waits == 1
        weights = ex.store.weights["fc1"][0]
        assert all(isinstance(w, WatchedArray) for w in weights.values())
    finally:
        ex.close()


def test_the_costs_and_checks_a_step_leaves_on_its_device_are_watched(monkeypatch):
    """What the step hands to HostReads is watched, so a read elsewhere would be seen."""
    from convnet.runtime.step.device_results import StepResults

    left = []
    add = StepResults._add
    monkeypatch.setattr(StepResults, "_add", lambda self, d, e: left.append(e) or add(self, d, e))
    net = _all_layers_net()
    ex = Executor(net, make_plan(net, (0,), 8), [WatchedCpuDevice(0, 0)], parallel=False)
    try:
        ex.step(_batch(net))
    finally:
        ex.close()
    watched = {(kind, what[0] if kind == "metric" else (what.op.layer, what.key))
               for kind, what, value in left if isinstance(value, WatchedArray)}
    assert {("metric", "logprob"), ("check", ("logprob", None)),
            ("check", ("fc1", "W0"))} <= watched


@pytest.mark.parametrize("parallel", [True, False])
def test_a_step_waits_once_per_device(parallel):
    net = fc_net(SMALL_HYBRID)
    devices = [WatchedCpuDevice(i, i) for i in range(2)]
    ex = Executor(net, make_plan(net, (0, 1), 8), devices, parallel=parallel)
    try:
        assert ex.step(small_batch()).host_waits == 2
    finally:
        ex.close()


def test_a_stray_read_in_a_step_is_caught(monkeypatch):
    """The detector sees a layer's output read on the host (as a NaN check by
    ``bool(xp.isfinite(y).all())`` would)."""
    net = _all_layers_net()
    ex = Executor(net, make_plan(net, (0,), 8), [WatchedCpuDevice(0, 0)], parallel=False)
    layer = ex.layers["fc1"]
    original = layer.forward

    def reads_its_output(inputs, params, ctx):
        y, state = original(inputs, params, ctx)
        bool(np.isfinite(y).all())
        return y, state

    monkeypatch.setattr(layer, "forward", reads_its_output)
    try:
        with pytest.raises(StrayRead):
            ex.step(_batch(net))
    finally:
        ex.close()


def test_checks_off_still_one_wait_and_the_same_weights():
    """Without the finite checks the step reads nothing more and updates the same."""
    net = fc_net(SMALL_HYBRID)
    results = []
    for check in (True, False):
        ex = Executor(net, make_plan(net, (0, 1), 8), make_devices((0, 1), "cpu"),
                      check_finite=check)
        try:
            assert ex.step(small_batch()).host_waits == 2
            results.append(ex.state_arrays())
        finally:
            ex.close()
    assert results[0].keys() == results[1].keys()
    assert all(np.array_equal(results[0][k], results[1][k]) for k in results[0])


@pytest.mark.parametrize("parallel", [True, False])
def test_a_non_finite_gradient_is_not_applied(parallel):
    """An update whose gradient holds inf is skipped on the device, and the error names
    the layer; the other layers' finite updates go on."""
    net = fc_net(SMALL_HYBRID)
    ex = Executor(net, make_plan(net, (0, 1), 8), make_devices((0, 1), "cpu"),
                  parallel=parallel)
    try:
        ex.step(small_batch())
        before = ex.state_arrays()
        grads_of = ex.layers["fcb"].backward

        def inf_gradient(*args):
            input_grads, param_grads = grads_of(*args)
            param_grads["W0"] = param_grads["W0"] * np.inf
            return input_grads, param_grads

        ex.layers["fcb"].backward = inf_gradient
        with pytest.raises(DivergedError, match="non-finite gradient for weights 'W0' of "
                                                "layer 'fcb' on device 1 at step 1"):
            ex.step(small_batch())
        after = ex.state_arrays()
        for key in before:
            unchanged = np.array_equal(before[key], after[key])
            assert unchanged == ("/fcb/" in key), key
    finally:
        ex.close()


def test_a_bad_label_is_refused_on_the_host_before_the_upload():
    net = _all_layers_net()
    ex = Executor(net, make_plan(net, (0,), 8), [WatchedCpuDevice(0, 0)], parallel=False)
    loads = []
    device = ex.devices[0]
    upload = device.to_device
    device.to_device = lambda array: loads.append(1) or upload(array)
    batch = _batch(net)
    batch[1][5, 0] = 4  # a 4-way head
    try:
        with pytest.raises(DataError, match=r"layer 'logprob': label 4 \(from 'labels'\) is "
                                            r"not a class index of its 4-way input 'probs'"):
            ex.step(batch)
        assert not loads
    finally:
        ex.close()


def test_nan_data_is_still_named_after_the_step():
    net = _all_layers_net()
    ex = Executor(net, make_plan(net, (0,), 8), [WatchedCpuDevice(0, 0)])
    batch = _batch(net)
    batch[0][3, 0, 0, 0] = np.nan
    try:
        with pytest.raises(NonFiniteDataError, match=r"data layer 'data' \(column 0, loaded on "
                                                     r"device 0\) at step 0"):
            ex.step(batch)
    finally:
        ex.close()
