"""The all-reduce collectives (convnet/runtime/devices/collectives.py).

Runnable everywhere: the chunked copy-and-add on CPU devices, sequential and
with one thread per rank, and the choice of collective.  NCCL needs two GPUs
and is skipped otherwise.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest

from convnet import kernels
from convnet.runtime.devices.collectives import (ChunkedAllReduce, NcclAllReduce, SingleRank, chunk_bounds,
                                 choose_all_reduce, make_all_reduce)
from convnet.runtime.devices.cpu import CpuDevice


def _grads(ranks: int, seed: int = 0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    shapes = {"W0": (5, 3, 2), "W1": (7,), "b": (1,)}
    return [{k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
            for _ in range(ranks)]


def _expected(grads):
    return {k: functools.reduce(np.add, [g[k] for g in grads]) for k in grads[0]}


def test_chunk_bounds_cover_the_array_in_near_equal_slices():
    for size in range(0, 23):
        for parts in range(1, 6):
            bounds = [chunk_bounds(size, parts, i) for i in range(parts)]
            assert bounds[0][0] == 0 and bounds[-1][1] == size
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            lengths = [hi - lo for lo, hi in bounds]
            assert max(lengths) - min(lengths) <= 1 and lengths == sorted(lengths, reverse=True)


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_chunked_all_reduce_sums_in_rank_order_without_touching_the_inputs(ranks):
    devices = [CpuDevice(i, 0) for i in range(ranks)]
    grads = _grads(ranks)
    originals = [{k: v for k, v in g.items()} for g in grads]
    copies = [{k: v.copy() for k, v in g.items()} for g in grads]
    ChunkedAllReduce(devices)(grads)
    want = _expected(copies)
    for r in range(ranks):
        for k in want:
            np.testing.assert_array_equal(grads[r][k], want[k])  # bitwise: rank order
            assert grads[r][k] is not originals[r][k]
            np.testing.assert_array_equal(originals[r][k], copies[r][k])


def test_chunked_all_reduce_with_one_thread_per_rank():
    ranks = 4
    devices = [CpuDevice(i, 0) for i in range(ranks)]
    grads = _grads(ranks, seed=1)
    want = _expected([{k: v.copy() for k, v in g.items()} for g in grads])
    collective = ChunkedAllReduce(devices)
    barrier = threading.Barrier(ranks)
    scratch: dict = {}
    errors = []

    def rank(r):
        try:
            collective(grads, [r], barrier.wait, scratch)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in range(ranks):
        for k in want:
            np.testing.assert_array_equal(grads[r][k], want[k])


def test_chunked_all_reduce_refuses_split_ranks_without_a_barrier():
    devices = [CpuDevice(i, 0) for i in range(2)]
    with pytest.raises(ValueError, match="barrier"):
        ChunkedAllReduce(devices)(_grads(2), [0])
    with pytest.raises(ValueError, match="3 gradient sets for 2 ranks"):
        ChunkedAllReduce(devices)(_grads(3))


def test_choice_of_collective():
    assert choose_all_reduce(["cuda"], [0], True) == "none"
    assert choose_all_reduce(["cuda", "cuda"], [0, 1], True) == "nccl"
    assert choose_all_reduce(["cuda", "cuda"], [0, 1], False) == "chunked"
    assert choose_all_reduce(["cuda", "cuda"], [0, 0], True) == "chunked"  # NCCL: one rank per GPU
    assert choose_all_reduce(["cpu", "cpu"], [0, 1], True) == "chunked"
    assert choose_all_reduce(["cuda", "cuda"], [0, 1], True, "chunked") == "chunked"
    with pytest.raises(ValueError, match="distinct GPUs"):
        choose_all_reduce(["cuda", "cuda"], [0, 0], True, "nccl")
    with pytest.raises(ValueError, match="auto, chunked or nccl"):
        choose_all_reduce(["cuda", "cuda"], [0, 1], True, "ring")


def test_make_all_reduce_on_cpu_devices(monkeypatch):
    monkeypatch.delenv("CONVNET_ALLREDUCE", raising=False)
    assert isinstance(make_all_reduce([CpuDevice(0, 0)]), SingleRank)
    assert isinstance(make_all_reduce([CpuDevice(0, 0), CpuDevice(1, 1)]), ChunkedAllReduce)


def _gpu_count() -> int:
    if not kernels.cupy_available():
        return 0
    import cupy
    return cupy.cuda.runtime.getDeviceCount()


@pytest.mark.skipif(_gpu_count() < 2, reason="NCCL needs CuPy and at least two CUDA GPUs")
@pytest.mark.parametrize("threaded", [False, True])
def test_nccl_all_reduce_matches_the_chunked_sum(threaded):
    import cupy

    from convnet.runtime.devices.cuda import CudaDevice

    devices = [CudaDevice(i, i) for i in range(2)]
    host = _grads(2, seed=2)
    grads = [{k: d.to_device(v) for k, v in g.items()} for d, g in zip(devices, host)]
    collective = NcclAllReduce(devices)
    try:
        if threaded:
            barrier = threading.Barrier(2)

            def rank(r):
                devices[r].activate()
                collective(grads, [r], barrier.wait, {})
                devices[r].synchronize()

            threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            collective(grads)
            for d in devices:
                d.synchronize()
        want = _expected(host)
        for r, d in enumerate(devices):
            for k in want:
                got = d.to_host(grads[r][k])
                np.testing.assert_allclose(got, want[k], rtol=1e-6, atol=1e-6)
                assert int(grads[r][k].device.id) == r
        np.testing.assert_array_equal(cupy.asnumpy(grads[0]["W0"]), devices[1].to_host(grads[1]["W0"]))
    finally:
        collective.close()
