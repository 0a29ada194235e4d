"""Replicas apart on CUDA devices: ``--sync async:S`` (convnet/runtime/sync/async_replicas.py)
and local SGD between averages (convnet/runtime/sync/local_replicas.py).

Skipped without CuPy and a CUDA GPU.  Two logical devices share GPU 0 (each its
own stream), so one GPU is enough: one replica must be synchronous SGD bit for
bit, and two replicas, drained, must hold the same weights up to float
rounding, with increments crossing devices through ``Device.copy_from``.
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet import kernels

pytestmark = pytest.mark.skipif(not kernels.cupy_available(), reason="needs CuPy and a CUDA GPU")


@pytest.fixture(autouse=True)
def cuda_kernels():
    import convnet.kernels.cuda

    kernels.cuda.install(force=True)
    yield


def _net_and_batches(tmp_path):
    from convnet.config import load_net
    from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

    layer_def, params = scaled_config("imagenet-2gpu-data", tmp_path)
    net = load_net(layer_def, params, data_dims={0: IMAGE_DIMS, 1: (1,)}, num_classes=NUM_CLASSES)
    rng = np.random.default_rng(11)
    batches = [[rng.standard_normal((8,) + IMAGE_DIMS).astype(np.float32),
                rng.integers(0, NUM_CLASSES, (8, 1)).astype(np.float32)] for _ in range(4)]
    return net, batches


def test_one_replica_on_cuda_is_synchronous_sgd_bit_for_bit(tmp_path):
    from convnet.plan.planner import make_plan
    from convnet.config.model import on_one_device
    from convnet.runtime.sync.async_replicas import AsyncReplicas
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    net, batches = _net_and_batches(tmp_path)
    net = on_one_device(net)
    plan = make_plan(net, (0,), 8)
    sync = Executor(net, plan, make_devices((0,), "cuda"), seed=3, parallel=False)
    lone = AsyncReplicas(net, plan, make_devices((0,), "cuda"), 0, seed=3)
    try:
        for batch in batches:
            sync.step(batch)
            lone.step(batch)
        want, got = sync.state_arrays(), lone.state_arrays()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    finally:
        sync.close()
        lone.close()


def test_two_replicas_on_cuda_agree_once_drained(tmp_path):
    from convnet.plan.planner import make_plan
    from convnet.runtime.sync.async_replicas import AsyncReplicas
    from convnet.runtime.devices.backends import make_devices

    net, batches = _net_and_batches(tmp_path)
    gpus = (0, 0)
    apart = AsyncReplicas(net, make_plan(net, gpus, 8), make_devices(gpus, "cuda"), 2, seed=3)
    try:
        for batch in batches * 3:
            apart.step(batch)
        apart.drain()
        assert apart.record.max_lead <= 2
        first, second = (r.state_arrays() for r in apart.replicas)
        for key in first:
            if key.startswith("weights/"):
                assert np.isfinite(first[key]).all(), key
                np.testing.assert_allclose(second[key], first[key], rtol=1e-4, atol=1e-6,
                                           err_msg=key)
    finally:
        apart.close()


def test_local_sgd_apart_on_cuda_trains_as_the_lockstep_walk(tmp_path):
    """Local SGD's replicas apart between averages (convnet/runtime/sync/local_replicas.py):
    the averages move slices between the devices with ``Device.copy_from``, and every
    replica ends where the lockstep walk's does (up to the GPU kernels' own rounding
    order, which need not be fixed)."""
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor
    from convnet.runtime.sync.local_replicas import LocalReplicas, apart_periods

    net, batches = _net_and_batches(tmp_path)
    gpus = (0, 0)
    plan = make_plan(net, gpus, 8)
    lockstep = Executor(net, plan, make_devices(gpus, "cuda"), seed=3, local_sgd=2)
    apart = LocalReplicas(net, plan, make_devices(gpus, "cuda"), apart_periods(plan, net, 2),
                          seed=3)
    try:
        for batch in batches + batches[:1]:  # five steps: the last one between averages
            lockstep.step(batch)
            apart.step(batch)
        apart.drain()
        for r, replica in enumerate(apart.replicas):
            for name, replicas in lockstep.store.weights.items():
                for k, want in replicas[r].items():
                    np.testing.assert_allclose(
                        replica.devices[0].to_host(replica.store.weights[name][0][k]),
                        lockstep.devices[r].to_host(want), rtol=1e-5, atol=1e-7,
                        err_msg=f"{name} {r} {k}")
    finally:
        lockstep.close()
        apart.close()
