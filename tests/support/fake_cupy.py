"""A recording stand-in for the few CuPy calls the CUDA device code makes, for tests
on machines without a GPU.

:class:`FakeCuda` keeps a log of what would be queued on which stream (event
records, stream waits, copies) and checks the CUDA rules the real calls would
enforce (an event is recorded on a stream of the GPU it was created on; kernels
run on the current GPU's streams); ``tests/cuda/test_device.py`` pins the device
protocol down with it.  :func:`pretend_gpus` makes the process believe that CuPy
sees ``count`` GPUs (each with ``free`` bytes free), for the tests of ``--gpu``,
the memory fit check and CUDA failures; :func:`cuda_runtime_error` and
:func:`cupy_out_of_memory` make errors of the types CuPy raises (named and placed
like CuPy's, which is how :mod:`convnet.runtime.devices.cuda_failures` recognises them).
"""

from __future__ import annotations

import itertools
import threading
import types

import numpy as np


class FakeCuda:
    """Just enough of CuPy for CudaDevice, logging what would be queued."""

    def __init__(self, gpus: int = 2):
        self.log: list[tuple] = []
        self.gpus = gpus
        self.free = {gpu: 80 << 30 for gpu in range(gpus)}  # bytes free per GPU
        self.asked: list[int] = []  # the GPUs whose free memory was asked for
        self._tls = threading.local()
        self._ids = itertools.count(1)
        self._names = itertools.count(0)
        fake = self

        class Device:
            def __init__(self, device=None):
                self.id = int(device if device is not None else fake.current_device())

            def __enter__(self):
                fake._device_stack().append(fake.current_device())
                fake._tls.device = self.id
                return self

            def __exit__(self, *exc):
                fake._tls.device = fake._device_stack().pop()

            def use(self):
                fake._tls.device = self.id

        class Stream:
            def __init__(self, non_blocking=False, null=False):
                self.null = null
                self.device_id = -1 if null else fake.current_device()
                self.non_blocking = non_blocking
                self.name = "null" if null else f"s{next(fake._names)}@gpu{self.device_id}"
                self.ptr = 0 if null else id(self)

            def _where(self):
                return f"null@gpu{fake.current_device()}" if self.null else self.name

            def wait_event(self, event):
                fake.log.append(("wait", self._where(), event.id))

            def synchronize(self):
                fake.log.append(("sync", self._where()))

            def use(self):
                fake._tls.stream = self
                return self

            def __enter__(self):
                fake._stream_stack().append(fake.current_stream())
                fake._tls.stream = self
                return self

            def __exit__(self, *exc):
                fake._tls.stream = fake._stream_stack().pop()

        Stream.null = Stream(null=True)

        class Event:
            def __init__(self, block=False, disable_timing=False, interprocess=False):
                self.id = next(fake._ids)
                self.device = fake.current_device()
                self.done = False

            def record(self, stream=None):
                stream = stream or Stream.null
                if not stream.null:
                    assert stream.device_id == self.device, "event and stream on different GPUs"
                fake.log.append(("record", self.id, stream._where()))

        class runtime:  # noqa: N801 - mirrors cupy.cuda.runtime
            @staticmethod
            def getDeviceCount():  # noqa: N802
                return fake.gpus

            @staticmethod
            def deviceCanAccessPeer(a, b):  # noqa: N802
                return True

            @staticmethod
            def deviceEnablePeerAccess(peer):  # noqa: N802
                fake.log.append(("peer", fake.current_device(), peer))

            @staticmethod
            def deviceSynchronize():  # noqa: N802
                fake.log.append(("device-sync", fake.current_device()))

            @staticmethod
            def memGetInfo():  # noqa: N802
                gpu = fake.current_device()
                fake.asked.append(gpu)
                return fake.free[gpu], 80 << 30

        class Memory:
            def __init__(self, array):
                self.array = array

            def copy_from_device_async(self, src, nbytes, stream):
                assert stream.device_id == self.array.device.id
                assert src.array.flags.c_contiguous and nbytes == src.array.nbytes
                fake.log.append(("memcpy", stream.name, src.array.device.id, self.array.device.id))
                self.array.host[...] = src.array.host

        class ndarray:  # noqa: N801 - mirrors cupy.ndarray
            def __init__(self, host, device_id):
                self.host = host
                self.device = types.SimpleNamespace(id=device_id)

            shape = property(lambda self: self.host.shape)
            dtype = property(lambda self: self.host.dtype)
            size = property(lambda self: self.host.size)
            nbytes = property(lambda self: self.host.nbytes)
            flags = property(lambda self: self.host.flags)
            data = property(lambda self: Memory(self))
            T = property(lambda self: ndarray(self.host.T, self.device.id))

            def __getitem__(self, key):
                return ndarray(self.host[key], self.device.id)

            def reshape(self, *shape):
                return ndarray(self.host.reshape(*shape), self.device.id)

            def copy(self):
                fake.kernel("copy", self)
                return ndarray(self.host.copy(), fake.current_device())

            def get(self, stream=None):
                fake.log.append(("d2h", (stream or fake.current_stream())._where()))
                return self.host.copy()

            def set(self, host, stream=None):
                stream = stream or fake.current_stream()
                assert host.shape == self.host.shape and host.dtype == self.host.dtype
                assert stream.null or stream.device_id == self.device.id
                fake.log.append(("h2d", stream._where()))
                self.host[...] = host

        self.cuda = types.SimpleNamespace(Device=Device, Stream=Stream, Event=Event,
                                          runtime=runtime)
        self.ndarray = ndarray

    # thread-local current GPU and stream, as CUDA and CuPy keep them
    def current_device(self) -> int:
        return getattr(self._tls, "device", 0)

    def current_stream(self):
        return getattr(self._tls, "stream", None) or self.cuda.Stream.null

    def _device_stack(self):
        if not hasattr(self._tls, "devices"):
            self._tls.devices = []
        return self._tls.devices

    def _stream_stack(self):
        if not hasattr(self._tls, "streams"):
            self._tls.streams = []
        return self._tls.streams

    def kernel(self, what, *arrays):
        """A kernel launch: on the current stream, which must be on the current GPU."""
        stream = self.current_stream()
        if not stream.null:
            assert stream.device_id == self.current_device(), "stream of another GPU"
        for a in arrays:
            assert a.device.id == self.current_device(), "array of another GPU"
        self.log.append((what, stream._where()))

    # module-level functions CudaDevice uses
    def asarray(self, host):
        self.log.append(("h2d", self.current_stream()._where()))
        return self.ndarray(np.array(host, copy=True), self.current_device())

    def empty(self, shape, dtype=np.float32):
        self.log.append(("alloc", self.current_stream()._where()))
        return self.ndarray(np.empty(shape, dtype), self.current_device())

    def zeros_like(self, a):
        self.kernel("zeros", a)
        return self.ndarray(np.zeros_like(a.host), self.current_device())

    def ascontiguousarray(self, a):
        self.kernel("contiguous", a)
        return self.ndarray(np.ascontiguousarray(a.host), a.device.id)

    def asnumpy(self, a):
        return a.get(stream=self.current_stream())

    float32 = np.float32


def pretend_gpus(monkeypatch, count: int, free: int = 80 << 30) -> FakeCuda:
    """CuPy sees ``count`` GPUs with ``free`` bytes free each (``FakeCuda.free``, per GPU,
    may be changed); returns the stand-in, whose ``asked`` lists the GPUs whose memory
    was queried."""
    from convnet import kernels
    from convnet.runtime.devices import cuda as cuda_device

    fake = FakeCuda(gpus=count)
    fake.free = {gpu: free for gpu in range(count)}
    monkeypatch.setattr(kernels, "cuda_device_count", lambda: count)
    monkeypatch.setattr(cuda_device, "_cupy", lambda: fake)
    return fake


def _cupy_error_type(module: str, name: str, base: type) -> type:
    """An exception type named and placed as CuPy's is (CuPy itself may be absent)."""
    return type(name, (base,), {"__module__": module})


CUDARuntimeError = _cupy_error_type("cupy_backends.cuda.api.runtime", "CUDARuntimeError",
                                    RuntimeError)
OutOfMemoryError = _cupy_error_type("cupy.cuda.memory", "OutOfMemoryError", MemoryError)


def cuda_runtime_error(code: str = "cudaErrorIllegalAddress",
                       text: str = "an illegal memory access was encountered") -> Exception:
    """What CuPy raises when a CUDA runtime call fails (its message: ``code: text``)."""
    return CUDARuntimeError(f"{code}: {text}")


def cupy_out_of_memory(size: int, total: int) -> MemoryError:
    """What CuPy's memory pool raises when the GPU cannot give it ``size`` more bytes."""
    return OutOfMemoryError(f"Out of memory allocating {size:,} bytes (allocated so far: "
                            f"{total:,} bytes).")
