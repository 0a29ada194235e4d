"""The CUDA backend on a real GPU: layers, kernels, devices, executor and the example.

Every test here needs CuPy and at least one CUDA GPU and is skipped without
them (multi-GPU tests need two).  They compare the CUDA backend with the
CPU backend (numpy) to float32 tolerance, and bitwise where the CUDA kernel does
exactly numpy's operations (dropout bits, max/maxabs pooling).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from convnet import kernels

pytestmark = pytest.mark.skipif(not kernels.cupy_available(), reason="needs CuPy and a CUDA GPU")

if kernels.cupy_available():  # pragma: no cover - only with a GPU
    import cupy
else:
    cupy = None


def _gpus() -> int:
    return cupy.cuda.runtime.getDeviceCount() if cupy is not None else 0


needs_two_gpus = pytest.mark.skipif(_gpus() < 2, reason="needs two CUDA GPUs")

RTOL, ATOL = 2e-4, 2e-5


@pytest.fixture(autouse=True)
def cuda_kernels():
    import convnet.kernels.cuda

    kernels.cuda.install(force=True, self_test=False)  # the fused kernels, checked or not
    yield
    cupy.cuda.Device(0).synchronize()


def _close(got, want, name=""):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL * scale, err_msg=name)


# --------------------------------------------------------------------- layers

from tests.support.cuda_cases import forward_backward, layer_cases  # noqa: E402

CASES = layer_cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_layer_on_cuda_matches_numpy(name):
    case = CASES[name]
    want = forward_backward(case, np.asarray, np.asarray, dtype=np.float32)
    got = forward_backward(case, cupy.asarray, cupy.asnumpy, dtype=np.float32)
    assert got.keys() == want.keys()
    for key in want:
        if key == "mask":
            np.testing.assert_array_equal(got[key], want[key])  # the same masks on CPU and GPU
        else:
            _close(got[key], want[key], f"{name} {key}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_kernels_match_the_generic_kernels_on_the_gpu(name):
    """The fused kernels against CuPy running the generic numpy-style kernels."""
    import convnet.kernels.cuda

    case = CASES[name]
    fused = forward_backward(case, cupy.asarray, cupy.asnumpy)
    kernels.cuda.uninstall()
    try:
        generic = forward_backward(case, cupy.asarray, cupy.asnumpy)
    finally:
        kernels.cuda.install(force=True, self_test=False)
    for key in generic:
        _close(fused[key], generic[key], f"{name} {key}")


def test_the_self_test_passes_on_this_gpu():
    """The fused kernels agree with the generic ones on every GPU here (the check
    install() makes before registering them; docs/CUDA.md)."""
    from convnet.kernels.cuda import self_test

    for gpu in range(_gpus()):
        with cupy.cuda.Device(gpu):
            result = self_test.run()
        assert not result.failed, result.text()
        assert len(result.results) == len(self_test.FAMILIES)


def test_float64_layers_on_cuda_match_numpy_closely():
    for name in ("conv-groups2", "local-multi_input", "cnorm-5-1.3", "pool-avg-overhang"):
        case = CASES[name]
        want = forward_backward(case, np.asarray, np.asarray, dtype=np.float64)
        got = forward_backward(case, cupy.asarray, cupy.asnumpy, dtype=np.float64)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{name} {key}")


def test_dropout_uniforms_are_bitwise_numpys():
    from convnet.kernels import random as krandom

    key = krandom.stream_key(5, 7, "fc4096a")
    for shape, offset in [((128, 4096), 0), ((32, 4096), 96), ((3, 5, 7), 2 ** 40)]:
        host = krandom.uniform_like(np.zeros(shape, np.float32), key, offset)
        dev = krandom.uniform_like(cupy.zeros(shape, cupy.float32), key, offset)
        np.testing.assert_array_equal(cupy.asnumpy(dev), host)


@pytest.mark.parametrize("kind", ["max", "maxabs"])
def test_max_pooling_is_bitwise_numpys(kind):
    from convnet.kernels import pool as kpool

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16, 55, 55)).astype(np.float32)
    kw = dict(pool=kind, size=3, stride=2, start=0, outputs=27)
    y0, c0 = kpool.pool_forward(x, **kw)
    xd = cupy.asarray(x)
    y1, c1 = kpool.pool_forward(xd, **kw)
    np.testing.assert_array_equal(cupy.asnumpy(y1), y0)
    gy = rng.standard_normal(y0.shape).astype(np.float32)
    d0 = kpool.pool_backward(gy, x, y0, c0, **kw)
    d1 = kpool.pool_backward(cupy.asarray(gy), xd, y1, c1, **kw)
    np.testing.assert_array_equal(cupy.asnumpy(d1), d0)


def test_alexnet_sized_layers_match_numpy():
    """The shapes of the benchmark's ImageNet net, where index overflow or a
    window bound would show."""
    from tests.support.cuda_cases import LayerCase
    from tests.support.layers import conv_def, norm_def, pool_def

    for ldef in (conv_def(in_shapes=((3, 224, 224),), filters=64, fs=11, padding=0, stride=4,
                          neuron_="relu"),
                 conv_def(in_shapes=((64, 27, 27),), filters=96, fs=5, padding=2, stride=1,
                          groups=2),
                 norm_def("cmrnorm", in_shape=(64, 55, 55), size=5, scale=0.0001, pow_=0.75),
                 pool_def(pool="max", in_shape=(64, 55, 55), size=3, stride=2)):
        case = LayerCase(ldef, lambda rng, ldef=ldef: [
            rng.standard_normal((16,) + tuple(ldef.input_shapes[0]))])
        want = forward_backward(case, np.asarray, np.asarray)
        got = forward_backward(case, cupy.asarray, cupy.asnumpy)
        for key in want:
            _close(got[key], want[key], f"{ldef.type} {key}")


# -------------------------------------------------------------------- devices

def test_copy_waits_for_a_slow_producer_on_another_stream():
    """Device B copies an array device A is still computing: the copy must see
    the final values, though the host never waited for A."""
    from convnet.runtime.devices.cuda import CudaDevice

    a, b = CudaDevice(0, 0), CudaDevice(1, 0)
    ready = threading.Event()
    box = {}

    def producer():
        a.activate()
        x = cupy.zeros((4096, 4096), cupy.float32)
        for _ in range(1000):  # keep a's stream busy for a while
            x = x + 1.0
        box["x"] = x
        ready.set()

    t = threading.Thread(target=producer)
    t.start()
    ready.wait()
    y = b.copy_from(box["x"])  # from this thread, which never waited for a's stream
    assert float(b.to_host(y).min()) == 1000.0
    t.join()
    a.synchronize()
    b.synchronize()


def test_copy_source_memory_is_not_reused_before_the_copy_ran():
    from convnet.runtime.devices.cuda import CudaDevice

    a, b = CudaDevice(0, 0), CudaDevice(1, 0)
    for _ in range(20):
        with a.scope():
            src = cupy.full((1 << 22,), 3.0, cupy.float32)
        with b.scope():
            busy = cupy.ones((4096, 4096), cupy.float32)
            for _ in range(50):  # delay b's stream so the copy runs late
                busy = busy * 1.0
        out = b.copy_from(src)
        del src
        with a.scope():  # a reallocates (likely the freed block) and overwrites it
            junk = cupy.full((1 << 22,), -1.0, cupy.float32)
        assert float(b.to_host(out).min()) == 3.0
        del junk


@needs_two_gpus
def test_copies_between_gpus_including_non_contiguous_views():
    from convnet.runtime.devices.cuda import CudaDevice

    a, b = CudaDevice(0, 0), CudaDevice(1, 1)
    host = np.arange(60, dtype=np.float32).reshape(6, 10)
    x = a.to_device(host)
    y = b.copy_from(x)
    assert int(y.device.id) == 1
    np.testing.assert_array_equal(b.to_host(y), host)
    z = b.copy_from(x[:, 2:7])
    np.testing.assert_array_equal(b.to_host(z), host[:, 2:7])
    np.testing.assert_array_equal(a.to_host(a.copy_from(z)), host[:, 2:7])


def test_xp_allocates_on_the_devices_gpu_from_any_thread():
    from convnet.runtime.devices.cuda import CudaDevice

    dev = CudaDevice(0, _gpus() - 1)
    w = dev.to_device(np.ones((3, 3)))
    m = dev.xp.zeros_like(w)
    assert int(m.device.id) == dev.physical == int(w.device.id)


# ------------------------------------------------------------------- executor

def _load(tmp_path, name):
    from convnet.config import load_net
    from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

    layer_def, params = scaled_config(name, tmp_path)
    return load_net(layer_def, params, data_dims={0: IMAGE_DIMS, 1: (1,)},
                    num_classes=NUM_CLASSES)


def _batches(count=3, mini=8, seed=7):
    from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES

    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((mini,) + IMAGE_DIMS).astype(np.float32),
             rng.integers(0, NUM_CLASSES, (mini, 1)).astype(np.float32)] for _ in range(count)]


def _train(net, gpus, backend, parallel=True, batches=None):
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor
    from convnet.plan.planner import make_plan

    ex = Executor(net, make_plan(net, gpus, 8), make_devices(gpus, backend), seed=3,
             parallel=parallel)
    try:
        costs = [ex.step(b, progress=i / 10).costs for i, b in enumerate(batches)]
        return ex.state_arrays(), costs
    finally:
        ex.close()


@pytest.mark.parametrize("name, gpus", [("imagenet-1gpu", (0,)),
                                        ("imagenet-2gpu-data", (0, 0)),
                                        ("imagenet-2gpu-model", (0, 0)),
                                        ("imagenet-4gpu-data", (0, 0, 0, 0)),
                                        ("imagenet-4gpu-data-model", (0, 0, 0, 0))])
def test_executor_on_cuda_matches_the_cpu(tmp_path, name, gpus):
    """Every multi-GPU reference config, scaled, with all logical devices on GPU 0."""
    net = _load(tmp_path, name)
    batches = _batches()
    want, want_costs = _train(net, gpus, "cpu", batches=batches)
    got, got_costs = _train(net, gpus, "cuda", batches=batches)
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-3, atol=1e-5, err_msg=key)
    for a, b in zip(got_costs, want_costs):
        assert a["logprob"]["cost"] == pytest.approx(b["logprob"]["cost"], rel=1e-4)


@pytest.mark.parametrize("name, gpus", [("imagenet-4gpu-data-model", (0, 0, 0, 0)),
                                        ("imagenet-2gpu-model", (0, 0))])
def test_parallel_and_sequential_walks_on_cuda_are_bitwise_identical(tmp_path, name, gpus):
    """The parallel and sequential walks agree bitwise on one GPU too (the sequential
    walk runs on the default stream)."""
    net = _load(tmp_path, name)
    batches = _batches()
    par, par_costs = _train(net, gpus, "cuda", parallel=True, batches=batches)
    seq, seq_costs = _train(net, gpus, "cuda", parallel=False, batches=batches)
    for key in par:
        np.testing.assert_array_equal(par[key], seq[key], err_msg=f"{key} (if cuBLAS picks "
                                      "algorithms per stream, set CUBLAS_WORKSPACE_CONFIG=:4096:8)")
    assert par_costs == seq_costs


def test_replicas_on_cuda_hold_identical_weights(tmp_path):
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor
    from convnet.plan.planner import make_plan

    net = _load(tmp_path, "imagenet-4gpu-data")
    gpus = (0, 0, 0, 0)
    ex = Executor(net, make_plan(net, gpus, 8), make_devices(gpus, "cuda"), seed=3)
    try:
        for b in _batches(2):
            ex.step(b)
        conv1 = ex.store.weights["conv1"]
        for replica in conv1[1:]:
            for k in replica:
                np.testing.assert_array_equal(cupy.asnumpy(replica[k]), cupy.asnumpy(conv1[0][k]))
    finally:
        ex.close()


@needs_two_gpus
@pytest.mark.parametrize("all_reduce", ["chunked", "nccl"])
def test_data_parallel_over_two_gpus_matches_the_cpu(tmp_path, monkeypatch, all_reduce):
    """Peer copies (chunked all-reduce), and the NCCL all-reduce of
    convnet.runtime.devices.collectives, forced through CONVNET_ALLREDUCE."""
    monkeypatch.setenv("CONVNET_ALLREDUCE", all_reduce)
    net = _load(tmp_path, "imagenet-2gpu-data")
    batches = _batches()
    want, _ = _train(net, (0, 1), "cpu", batches=batches)
    got, _ = _train(net, (0, 1), "cuda", batches=batches)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-3, atol=1e-5, err_msg=key)


# ------------------------------------------------------------ the example, CLI

def test_bundled_example_trains_on_cuda():
    from tests.support.cli import DIGITS, ok, run_cli

    proc = ok(run_cli(*DIGITS, "--epochs", "2", "--backend", "cuda", "--gpu", "0,0",
                      timeout=600))
    lines = [l for l in proc.stdout.splitlines() if l.startswith("epoch")]
    assert lines, proc.stdout
    error = float(lines[-1].split("test cost")[1].split("error")[1].split("%")[0])
    assert error < 20.0, lines[-1]


def test_print_plan_says_logical_devices_share_a_gpu():
    from tests.support.cli import ok, run_cli

    proc = ok(run_cli("--print-plan", "--gpu", "0,0", "--backend", "cuda"))
    assert "share physical device 0" in proc.stdout
