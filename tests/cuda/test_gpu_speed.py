"""The GPU speed work on a real GPU: what must hold before its switches become defaults.

Skipped without CuPy and a CUDA GPU; ``make gpu-check`` runs them (its proofs
stage).  Each is the GPU half of a CPU test:

* one host wait per step on a CUDA device (tests/runtime/step/test_host_waits.py);
* cuDNN convolutions (``CONVNET_CUDNN=1``) agree with the im2col kernels, layer by
  layer at the reference nets' geometries, and keep the parallel and sequential walks
  bitwise equal (tests/cuda/test_cudnn_conv.py runs the path against a stand-in);
* captured steps (``CONVNET_CUDA_GRAPH=1``) train bitwise as eager steps
  (tests/runtime/step/test_step_graph.py replays on CPU devices);
* ``--precision`` tf32, bf16 and fp16 train the CIFAR-10 net with float32 master
  weights (tests/runtime/step/test_precision.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet import kernels

pytestmark = pytest.mark.skipif(not kernels.cupy_available(), reason="needs CuPy and a CUDA GPU")

from tests.support import ROOT  # noqa: E402

REF = ROOT / "examples" / "cuda-convnet2"
CIFAR = (REF / "layers-cifar10-11pct.cfg", REF / "layer-params-cifar10-11pct.cfg")


def _cifar():
    from convnet.config import load_net

    return load_net(*CIFAR, data_dims={0: (3, 32, 32), 1: (1,)}, num_classes=10)


def _batches(count: int, mini: int = 64):
    rng = np.random.default_rng(0)
    return [[rng.standard_normal((mini, 3, 32, 32)).astype(np.float32),
             rng.integers(0, 10, (mini, 1)).astype(np.float32)] for _ in range(count)]


def _executor(gpus=(0,), parallel=True, mini=64, **kwargs):
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    net = _cifar()
    return Executor(net, make_plan(net, gpus, mini), make_devices(gpus, "cuda"),
                    parallel=parallel, **kwargs)


def _train(ex, batches) -> dict:
    try:
        for batch in batches:
            ex.step(batch)
        return ex.state_arrays()
    finally:
        ex.close()


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_cuda_step_waits_once_per_device():
    ex = _executor(gpus=(0, 0))
    try:
        for batch in _batches(2):
            assert ex.step(batch).host_waits == 2
    finally:
        ex.close()


CONV_GEOMETRIES = {  # the reference nets' conv layers: n, c, img, filters, fs, pad, stride, g
    "cifar10-conv1": (64, 3, 32, 64, 5, 2, 1, 1),
    "cifar10-conv2": (64, 64, 16, 64, 5, 2, 1, 1),
    "alexnet-conv1": (32, 3, 224, 64, 11, 0, 4, 1),   # the ceiling rule pads unevenly
    "alexnet-conv2": (32, 64, 27, 192, 5, 2, 1, 1),
    "alexnet-conv2-groups": (32, 96, 27, 256, 5, 2, 1, 2),
    "alexnet-conv3": (32, 192, 13, 384, 3, 1, 1, 1),
}


@pytest.mark.parametrize("name", sorted(CONV_GEOMETRIES))
def test_cudnn_convolutions_agree_with_the_im2col_kernels(name, monkeypatch):
    import cupy

    from convnet.kernels.conv import out_size
    from convnet.kernels.cuda import conv as cuda_conv, cudnn_conv

    n, c, img, f, fs, pad, stride, g = CONV_GEOMETRIES[name]
    m = out_size(img, fs, pad, stride)
    rng = np.random.default_rng(1)
    x = cupy.asarray(rng.standard_normal((n, c, img, img)).astype(np.float32))
    w = cupy.asarray(rng.standard_normal((f, c // g, fs, fs)).astype(np.float32) * 0.05)
    b = cupy.asarray(rng.standard_normal(f).astype(np.float32))
    gy = cupy.asarray(rng.standard_normal((n, f, m, m)).astype(np.float32))
    geom = dict(filter_sizes=[fs], paddings=[pad], strides=[stride], channels=[c],
                groups=[g], img_sizes=[img], modules=m)
    results = {}
    for switch in ("0", "1"):
        monkeypatch.setenv(cudnn_conv.ENV, switch)
        y, cache = cuda_conv.conv_forward([x], [w], b, **geom)
        dxs, dws, db = cuda_conv.conv_backward(gy, [x], [w], cache, [True], **geom)
        results[switch] = [cupy.asnumpy(a) for a in (y, dxs[0], dws[0], db)]
        assert isinstance(cache, cudnn_conv.CudnnCache) == (switch == "1")
    for got, want in zip(results["1"], results["0"]):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)


def test_cudnn_keeps_the_walks_bitwise_equal(monkeypatch):
    monkeypatch.setenv("CONVNET_CUDNN", "1")
    batches = _batches(3)
    parallel = _train(_executor(gpus=(0, 0), parallel=True), batches)
    sequential = _train(_executor(gpus=(0, 0), parallel=False), batches)
    assert _same(parallel, sequential)


def test_captured_steps_train_bitwise_as_eager_steps(monkeypatch):
    batches = _batches(4)
    eager = _train(_executor(), batches)
    monkeypatch.setenv("CONVNET_CUDA_GRAPH", "1")
    ex = _executor()
    assert ex.step_graph is not None
    graph = ex.step_graph
    captured = _train(ex, batches)
    assert graph.replays == 4
    assert _same(eager, captured)


@pytest.mark.parametrize("precision", ["tf32", "bf16", "fp16"])
def test_every_precision_trains_with_float32_master_weights(precision):
    ex = _executor(precision=precision)
    try:
        costs = [ex.step(batch).costs["logprob"]["cost"] for batch in _batches(4)]
        state = ex.state_arrays()
    finally:
        ex.close()
    assert all(np.isfinite(c) for c in costs)
    assert all(a.dtype == np.float32 and np.isfinite(a).all() for a in state.values())
