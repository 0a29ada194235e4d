"""bench/bench_cuda.py without a GPU: it exits with a clear message, and its PyTorch
model of the CIFAR-10 reference net computes what the engine computes (checked on
the CPU, so that the GPU comparison it prints compares the same training step)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from convnet import kernels

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_cuda.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_cuda", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(kernels.cupy_available(), reason="a CUDA GPU is present")
def test_without_a_gpu_the_benchmark_says_so_and_exits_2():
    proc = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "no CUDA GPU to benchmark on" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_pytorch_model_of_the_cifar_net_matches_the_engine_on_the_cpu():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'bench' extra) is not installed")
    bench = _bench()
    from convnet.config import load_net
    from convnet.runtime.devices import make_devices
    from convnet.runtime.executor import Executor
    from convnet.plan.planner import make_plan

    mini, dims, classes = 8, (3, 32, 32), 10
    net = load_net(*bench.CIFAR, data_dims={0: dims, 1: (1,)}, num_classes=classes)
    ex = Executor(net, make_plan(net, (0,), mini), make_devices((0,), "cpu"), seed=0,
                  parallel=False)
    try:
        weights: dict = {}
        for key, value in ex.state_arrays().items():
            group, layer, k = key.split("/")
            if group == "weights":
                weights.setdefault(layer, {})[k] = value.copy()
        batch = bench._dummy_batch(mini, dims, classes)
        cost = ex.step(batch).costs["logprob"]["cost"]
        after = ex.state_arrays()
    finally:
        ex.close()
    torch.manual_seed(0)
    loss_fn, groups, tensors = bench.torch_model(torch, net, weights, device="cpu")
    opt = torch.optim.SGD(groups, lr=groups[0]["lr"])
    images, labels = (torch.from_numpy(a) for a in batch)
    loss = loss_fn(images, labels)
    assert float(loss.detach()) == pytest.approx(cost, rel=1e-5)
    loss.backward()
    opt.step()
    for layer, ts in tensors.items():
        for k, t in ts.items():
            np.testing.assert_allclose(t.detach().numpy(), after[f"weights/{layer}/{k}"],
                                       rtol=1e-4, atol=1e-7, err_msg=f"{layer}/{k}")
