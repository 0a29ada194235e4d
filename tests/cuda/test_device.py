"""CudaDevice without a GPU: its stream and event protocol, against a recording
stand-in for the few CuPy calls it makes.

The stand-in keeps a log of what would be queued on which stream (event
records, stream waits, copies) and checks the CUDA rules the real calls
would enforce (an event is recorded on a stream of the GPU it was created
on; kernels run on the current GPU's streams).  The tests pin down the
ordering argument of :mod:`convnet.runtime.devices.cuda`: a copy waits for events
recorded on the producers' streams, the source stays referenced until the
copy is done, cross-GPU copies are peer copies, and work done through
``device.xp`` or ``scope()`` lands on the device's own GPU and stream.
Real-GPU behaviour is tested in ``tests/cuda/test_gpu.py``.
"""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest

from convnet import kernels
import convnet.kernels.cuda
from convnet.runtime.devices import cuda as cuda_device
from convnet.runtime.devices.backends import choose_backend
from convnet.runtime.devices.base import Device
from convnet.runtime.devices.backends import make_devices
from convnet.errors import DeviceError
from tests.support.fake_cupy import FakeCuda


@pytest.fixture
def fake(monkeypatch):
    cupy = FakeCuda(gpus=2)
    monkeypatch.setattr(cuda_device, "_cupy", lambda: cupy)
    monkeypatch.setattr(kernels.cuda, "install", lambda force=False: True)
    with cuda_device._registry_lock:
        cuda_device._registry.clear()
        cuda_device._peer_pairs.clear()
    yield cupy
    with cuda_device._registry_lock:
        cuda_device._registry.clear()
        cuda_device._peer_pairs.clear()


def _index(log, entry):
    return log.index(entry)


# ---------------------------------------------------------------------- tests

def test_logical_devices_get_their_own_streams_on_their_gpus(fake):
    devs = [cuda_device.CudaDevice(i, p) for i, p in enumerate((0, 0, 1))]
    assert [d.stream.device_id for d in devs] == [0, 0, 1]
    assert len({d.stream.name for d in devs}) == 3
    assert not any(d.stream.non_blocking for d in devs)  # ordered with the default stream
    assert cuda_device.devices_on(0) == devs[:2] and cuda_device.devices_on(1) == devs[2:]
    assert repr(devs[2]) == "cuda:2(gpu 1)"


def test_activate_makes_the_device_current_for_the_calling_thread(fake):
    dev = cuda_device.CudaDevice(0, 1)
    seen = {}

    def worker():
        dev.activate()
        seen["device"], seen["stream"] = fake.current_device(), fake.current_stream()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == {"device": 1, "stream": dev.stream}
    assert fake.current_device() == 0 and fake.current_stream().null  # this thread unchanged


def test_a_cuda_device_is_a_device(fake):
    dev = cuda_device.CudaDevice(1, 0)
    assert isinstance(dev, Device)
    assert (dev.index, dev.physical, dev.kind) == (1, 0, "cuda")
    assert isinstance(dev.xp, cuda_device.DeviceModule)


def test_scope_and_xp_run_on_the_devices_gpu_and_stream(fake):
    dev = cuda_device.CudaDevice(1, 1)
    w = dev.to_device(np.ones((2, 3)))
    assert w.device.id == 1 and w.dtype == np.float32
    m = dev.xp.zeros_like(w)  # from the main thread, as Executor._init_weights does
    assert m.device.id == 1
    assert fake.log[-1] == ("zeros", dev.stream.name)
    assert fake.current_device() == 0 and fake.current_stream().null  # restored
    assert dev.xp.float32 is np.float32 and dev.xp.ndarray is fake.ndarray
    assert kernels.array_module_name(dev.xp) == "cupy"


def test_copy_between_logical_devices_on_one_gpu_waits_for_the_producers(fake):
    a, b, c = (cuda_device.CudaDevice(i, 0) for i in range(3))
    src = a.to_device(np.arange(6.0).reshape(2, 3))
    fake.log.clear()
    out = b.copy_from(src)
    np.testing.assert_array_equal(out.host, src.host)
    assert out.device.id == 0 and out.host is not src.host
    copy_at = _index(fake.log, ("copy", b.stream.name))
    before = {stream: ev for kind, ev, stream in
              (e for e in fake.log[:copy_at] if e[0] == "record")}
    # an event after everything queued on each other stream of the GPU (a and c); none on
    # b's own stream, nor on the GPU's default stream (b's stream is a blocking stream)
    assert set(before) == {a.stream.name, c.stream.name}
    for stream in (a.stream.name, c.stream.name):
        assert _index(fake.log, ("wait", b.stream.name, before[stream])) < copy_at
    # and one after the copy on b's stream, which releases the source
    assert [e[2] for e in fake.log[copy_at:] if e[0] == "record"] == [b.stream.name]


def test_copy_keeps_its_source_alive_until_it_has_run(fake):
    a, b = cuda_device.CudaDevice(0, 0), cuda_device.CudaDevice(1, 0)
    src = a.to_device(np.ones(4))
    b.copy_from(src)
    assert b.pending_copies() == 1
    (done, held, _), = list(b._pending)
    assert held is src and not done.done
    b.copy_from(src)  # not finished yet: both held
    assert b.pending_copies() == 2
    for event, _, _ in b._pending:
        event.done = True
    b.copy_from(src)  # finished ones are released on the next call
    assert b.pending_copies() == 1
    b.synchronize()
    assert b.pending_copies() == 0 and fake.log[-1] == ("sync", b.stream.name)


def test_an_upload_runs_on_its_own_stream_and_the_device_waits_for_it_when_taking_it(fake):
    """The next minibatch's bytes cross while the device computes: the copy is queued on
    the upload stream after the allocation's place on the device's stream, and the
    device's stream waits for the copy only when the array is taken."""
    device = cuda_device.CudaDevice(0, 1)
    host = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    fake.log.clear()
    upload = device.upload(host)
    upload_stream = device._upload_stream
    assert upload_stream.non_blocking and upload_stream.device_id == 1
    (allocated, _), (done, _) = [(e[1], e[2]) for e in fake.log if e[0] == "record"]
    assert fake.log.index(("alloc", device.stream.name)) < fake.log.index(
        ("record", allocated, device.stream.name))
    assert fake.log.index(("wait", upload_stream.name, allocated)) < fake.log.index(
        ("h2d", upload_stream.name)) < fake.log.index(("record", done, upload_stream.name))
    assert not any(e[0] == "wait" and e[1] == device.stream.name for e in fake.log)
    assert device.pending_copies() == 1  # the host array is held until the copy has run
    array = upload.take()
    assert fake.log[-1] == ("wait", device.stream.name, done)
    assert array.host.dtype == np.uint8 and np.array_equal(array.host, host)
    device.upload(host[:1])
    assert device._upload_stream is upload_stream  # one upload stream per device
    assert device.pending_copies() == 2
    device.synchronize()
    assert device.pending_copies() == 0


def test_copy_between_gpus_is_a_peer_copy_after_the_source_gpus_streams(fake):
    a0, a1 = cuda_device.CudaDevice(0, 0), cuda_device.CudaDevice(1, 0)
    b = cuda_device.CudaDevice(2, 1)
    src = a0.to_device(np.arange(12.0).reshape(3, 4))
    fake.log.clear()
    out = b.copy_from(src)
    np.testing.assert_array_equal(out.host, src.host)
    assert out.device.id == 1
    assert ("peer", 1, 0) in fake.log
    records = {stream: ev for kind, ev, stream in (e for e in fake.log if e[0] == "record")}
    assert {a0.stream.name, a1.stream.name, "null@gpu0"} <= set(records)
    memcpy = _index(fake.log, ("memcpy", b.stream.name, 0, 1))
    for stream in (a0.stream.name, a1.stream.name, "null@gpu0"):
        assert _index(fake.log, ("wait", b.stream.name, records[stream])) < memcpy
    b.copy_from(src)
    assert fake.log.count(("peer", 1, 0)) == 1  # enabled once per pair


def test_non_contiguous_source_is_made_contiguous_on_its_own_gpu_first(fake):
    a = cuda_device.CudaDevice(0, 0)
    b = cuda_device.CudaDevice(1, 1)
    src = a.to_device(np.arange(12.0).reshape(3, 4))
    view = src[:, 1:3]
    assert not view.flags.c_contiguous
    fake.log.clear()
    out = b.copy_from(view)
    np.testing.assert_array_equal(out.host, view.host)
    helper = b._helpers[0]
    assert helper.device_id == 0
    contig = _index(fake.log, ("contiguous", helper.name))
    producer = next(e for e in fake.log if e[0] == "record" and e[2] == a.stream.name)[1]
    assert _index(fake.log, ("wait", helper.name, producer)) < contig
    ready = next(e for e in fake.log[contig:] if e[0] == "record" and e[2] == helper.name)[1]
    assert _index(fake.log, ("wait", b.stream.name, ready)) < \
        _index(fake.log, ("memcpy", b.stream.name, 0, 1))
    (_, held, staged), = list(b._pending)
    assert held is view and staged is not view  # both kept until the copy ran


def test_to_host_waits_for_the_producers_then_copies_on_its_stream(fake):
    a, b = cuda_device.CudaDevice(0, 0), cuda_device.CudaDevice(1, 0)
    x = a.to_device(np.arange(3.0))
    fake.log.clear()
    host = b.to_host(x)
    np.testing.assert_array_equal(host, [0, 1, 2])
    ev = next(e for e in fake.log if e[0] == "record" and e[2] == a.stream.name)[1]
    assert _index(fake.log, ("wait", b.stream.name, ev)) < _index(fake.log, ("d2h", b.stream.name))
    assert isinstance(b.to_host(np.ones(2)), np.ndarray)


def test_a_gpu_index_beyond_the_gpus_is_a_clear_error(fake):
    with pytest.raises(DeviceError, match="names GPU 2, but CuPy sees 2 GPU"):
        cuda_device.CudaDevice(0, 2)



# ------------------------------------------- without a GPU (with or without CuPy)

no_gpu = pytest.mark.skipif(kernels.cupy_available(), reason="CuPy finds a CUDA GPU here")


@no_gpu
def test_cuda_devices_without_a_gpu_are_a_clear_error():
    with pytest.raises(DeviceError, match="CuPy"):
        make_devices((0, 0), "cuda")


@no_gpu
def test_backend_cuda_without_a_gpu_is_refused_and_auto_picks_the_cpu():
    assert choose_backend("auto") == "cpu"
    assert choose_backend("cpu") == "cpu"
    with pytest.raises(DeviceError, match="needs CuPy"):
        choose_backend("cuda")


def test_backend_auto_follows_whether_cupy_finds_a_gpu(monkeypatch):
    monkeypatch.setattr(kernels, "cupy_available", lambda: True)
    assert choose_backend("auto") == "cuda" and choose_backend("cuda") == "cuda"
    assert choose_backend("cpu") == "cpu"
    monkeypatch.setattr(kernels, "cupy_available", lambda: False)
    assert choose_backend("auto") == "cpu"


def test_cupy_available_is_false_when_the_driver_fails(monkeypatch):
    def broken():
        raise RuntimeError("no CUDA driver")

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=broken)))
    monkeypatch.setattr(kernels, "_cupy", fake)
    assert kernels.cupy_available() is False
    monkeypatch.setattr(kernels, "_cupy", None)
    assert kernels.cupy_available() is False


@no_gpu
def test_the_cuda_kernel_package_imports_without_a_gpu_and_registers_nothing():
    import importlib

    before = kernels.registered_kernels()
    for module in ("sources", "kernel_set", "conv", "pool", "norm", "nn", "dropout",
                   "neurons", "self_test", "environment", "versions"):
        importlib.import_module(f"convnet.kernels.cuda.{module}")
    assert kernels.registered_kernels() == before
    reason = kernels.cuda.unavailable_reason()
    assert "CuPy is not installed" in reason or "finds no CUDA GPU" in reason
    with pytest.raises(kernels.cuda.CudaUnavailable) as error:
        kernels.cuda.install()
    assert str(error.value) == reason
    assert kernels.registered_kernels() == before


def test_a_cuda_error_at_the_end_of_step_wait_names_the_device(fake, monkeypatch):
    """CUDA reports a failed kernel at the next wait: the device's own waits say where."""
    import sys

    from convnet.runtime.devices import cuda_failures
    from tests.support.fake_cupy import cuda_runtime_error

    dev = cuda_device.CudaDevice(1, 0)

    def failing():
        raise cuda_runtime_error()

    monkeypatch.setattr(dev.stream, "synchronize", failing)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    with pytest.raises(Exception) as raised:
        dev.synchronize()
    try:
        line = str(cuda_failures.as_device_error(raised.value))
    finally:
        cuda_failures._failed.clear()
    assert line.startswith("CUDA error on GPU 0 during the wait for the kernels queued in the "
                           "step on logical device 1: cudaErrorIllegalAddress")
