"""The CUDA backend's memory estimate, without a GPU: the CUDA kernels' memory rules
against what the CUDA code path really keeps (run on the host), the model of CuPy's
memory pool, its figure for AlexNet against the one measured on a GPU, and the fit
check that refuses a plan before any GPU memory is taken."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.config import load_net
from convnet.config.layer_types.memory_rules import CUDA_KERNELS, cuda_memory
from convnet.kernels.cuda.conv import ColsCache
from convnet.plan.memory import memory_peaks
from convnet.plan.planner import make_plan
from convnet.runtime.devices import backends
from convnet.runtime.devices.cuda_pool import ROUNDING, PoolModel, pool_bytes
from convnet.runtime.processes import cluster
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.memory import _owner
from tests.support import ROOT
from tests.support.cli import assert_clean_error, run_main
from tests.support.cuda_emulation import compiler_available, overrides_for_numpy
from tests.support.fake_cupy import pretend_gpus

REF = ROOT / "examples" / "cuda-convnet2"
MIB = 1 << 20


def _reference(name: str, side: int, classes: int):
    return load_net(REF / f"layers-{name}.cfg", REF / f"layer-params-{name}.cfg",
                    data_dims={0: (3, side, side), 1: (1,)}, num_classes=classes)


# ------------------------------------------------------------------ the pool model

def test_the_pool_rounds_reuses_the_best_fit_and_splits():
    pool = PoolModel()
    a = pool.alloc(1000)
    assert a.size == 2 * ROUNDING and pool.held == 1024
    big = pool.alloc(10 * MIB)
    pool.free(big)
    small = pool.alloc(4 * MIB)  # carved out of the freed 10 MiB: nothing new taken
    assert pool.held == 1024 + 10 * MIB
    also = pool.alloc(6 * MIB)  # the rest of it, exactly
    assert pool.held == 1024 + 10 * MIB
    again = pool.alloc(1)  # no free chunk left: a new one
    assert pool.held == 1024 + 10 * MIB + ROUNDING
    for chunk in (a, small, also, again):
        pool.free(chunk)
    pool.alloc(10 * MIB)  # the halves merged back into the whole
    assert pool.held == 1024 + 10 * MIB + ROUNDING


def test_freed_chunks_too_small_for_a_request_stay_held_beside_the_new_one():
    pool = PoolModel()
    first, second = pool.alloc(4 * MIB), pool.alloc(4 * MIB)
    pool.free(first)
    pool.free(second)  # two separate cudaMallocs: no merging across them
    pool.alloc(6 * MIB)
    assert pool.held == 14 * MIB  # 8 MiB free in the pool, 6 MiB taken anew


def test_the_alexnet_estimate_is_what_the_pool_held_on_an_h200(monkeypatch):
    """cuda-convnet2's layers-imagenet-1gpu.cfg at minibatch 128: CuPy's pool held
    4,637 MiB on an H200 (CuPy 14.2, 2026-11-26, docs/CUDA.md), with the conv layers
    keeping their columns for the backward pass as they did then
    (``CONVNET_CUDA_KEEP_COLUMNS=1`` today); the model, derived from CuPy's allocator and
    not fitted to this figure, holds within 2% of it, where the step's largest live set
    alone (the plan's peak with the CUDA kernels) is 28% less.  Rebuilding the columns in
    the backward pass (the default now) saves at least a quarter of it."""
    from convnet.kernels.cuda import conv

    net = _reference("imagenet-1gpu", 224, 1000)
    plan = make_plan(net, (0,), 128)
    rebuilt = pool_bytes(plan, net)[0]
    monkeypatch.setattr(conv, "KEEP_COLUMNS", True)
    held = pool_bytes(plan, net)[0]
    assert held == pytest.approx(4637 * MIB, rel=0.02), held / MIB
    live = memory_peaks(plan, net, kernels=CUDA_KERNELS)[0].peak_bytes
    assert live < 0.8 * held
    assert rebuilt < 0.75 * held


def test_logical_devices_on_one_gpu_hold_their_own_pools():
    """AlexNet data-parallel on two logical devices of one GPU: each half-minibatch
    replica's stream holds its own weights and its own freed chunks, so together they
    hold more than the one-device net."""
    one = _reference("imagenet-1gpu", 224, 1000)
    two = _reference("imagenet-2gpu-data", 224, 1000)
    halves = pool_bytes(make_plan(two, (0, 0), 128), two)
    assert len(halves) == 2 and halves[0] == halves[1]
    assert sum(halves) > pool_bytes(make_plan(one, (0,), 128), one)[0]


# ------------------------------------------------ the rules against the CUDA code path

def _arrays(obj):
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, ColsCache):
        return _arrays(obj.cols)
    if isinstance(obj, (tuple, list)):
        return [a for item in obj for a in _arrays(item)]
    if isinstance(obj, dict):
        return [a for item in obj.values() for a in _arrays(item)]
    return []


@pytest.mark.skipif(not compiler_available(), reason="no host C++ compiler to emulate the "
                                                     "CUDA kernels with")
@pytest.mark.parametrize("name, side, classes", [("cifar10-11pct", 32, 10),
                                                 ("imagenet-1gpu", 67, 1000)])
def test_each_cuda_rule_is_what_the_cuda_kernels_keep(name, side, classes):
    """One train-mode forward pass through the CUDA kernel code (emulated on the host,
    dispatched for numpy arrays): what every layer keeps for its backward pass is its
    CUDA memory rule's figure, to the byte."""
    from convnet.runtime.devices.backends import make_devices

    net, mini = _reference(name, side, classes), 4
    rng = np.random.default_rng(0)
    batch = [rng.standard_normal((mini, 3, side, side), dtype=np.float32),
             rng.integers(0, classes, (mini, 1)).astype(np.float32)]
    with overrides_for_numpy():
        ex = Executor(net, make_plan(net, (0,), mini), make_devices((0,), "cpu"), seed=0,
                      parallel=False)
        try:
            buffers = ex._run_tasks(batch, ex._eval_tasks, train=True, progress=0.0)
        finally:
            ex.close()
    checked = set()
    for (layer, shard), state in buffers.states.items():
        ldef = net[layer]
        seen = {id(_owner(buffers.acts[(i, shard, 0)])) for i in (*ldef.inputs, layer)}
        kept = {id(_owner(a)): _owner(a).nbytes for a in _arrays(state)}
        kept_bytes = sum(n for key, n in kept.items() if key not in seen)
        rule = cuda_memory(ldef)
        assert kept_bytes == rule.kept_per_case * mini + rule.kept_per_call, layer
        checked.add(ldef.type)
    assert {"conv", "pool", "cmrnorm"} <= checked


# ------------------------------------------------------------------ the fit check

def test_print_plan_on_cuda_shows_what_the_pool_will_hold(monkeypatch, capsys):
    pretend_gpus(monkeypatch, 1, free=2 << 30)
    code, out, err = run_main(capsys, "--layer-def", REF / "layers-imagenet-1gpu.cfg",
                              "--layer-params", REF / "layer-params-imagenet-1gpu.cfg",
                              "--data-dims", "3x224x224", "--num-classes", "1000",
                              "--backend", "cuda", "--print-plan", "--gpu", "0")
    assert code == 0, err
    assert ("GPU 0 needed (est.): 3.2 GiB (CuPy's memory pool 3.1 GiB, beside it 64.0 MiB); "
            "free: 2.0 GiB (GPU 0's free memory)") in out.splitlines()
    assert err.startswith("warning: the plan needs about 3.2 GiB of GPU 0 (what CuPy's "
                          "memory pool will hold for logical device(s) 0)")


def test_training_refuses_a_plan_the_gpu_cannot_hold_before_making_a_device(monkeypatch,
                                                                         capsys):
    pretend_gpus(monkeypatch, 1, free=2 << 30)
    made = []
    monkeypatch.setattr(cluster, "make_devices", lambda *args, **kw: made.append(args))
    code, out, err = run_main(capsys, "--layer-def", REF / "layers-imagenet-1gpu.cfg",
                              "--layer-params", REF / "layer-params-imagenet-1gpu.cfg",
                              "--data-provider", "dummy", "--data-dims", "3x224x224",
                              "--num-classes", "1000", "--dummy-cases", "128",
                              "--backend", "cuda", "--no-progress")
    assert_clean_error((code, err), 1, "not enough memory: the plan needs about 3.2 GiB of "
                       "GPU 0 (what CuPy's memory pool will hold for logical device(s) 0), "
                       "but GPU 0's free memory leaves only 2.0 GiB", "--mini")
    assert made == []
    assert backends.gpus_for_backend((0,), False, "cuda")[0] == (0,)
