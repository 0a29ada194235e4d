"""CUDA logical devices (CuPy): one CUDA stream per logical device.

A :class:`CudaDevice` (a :class:`convnet.runtime.devices.base.Device`) is logical
device ``index`` of ``--gpu``, placed on physical GPU ``physical``.  Several
logical devices may name the same GPU (``--gpu 0,0,0,0``); each still gets
its own stream, so a one-GPU machine runs every multi-GPU config, and their
kernels may overlap on the GPU.

How the executor uses a device (see :mod:`convnet.runtime.step.workers`): one worker
thread per logical device calls :meth:`CudaDevice.activate` once (the thread's
current GPU and current CuPy stream become this device's), then runs its
operations; every kernel, cuBLAS call and allocation of that thread goes to
the device's stream.  The workers order operations *on the host*: an
operation starts after the operations it depends on have *returned*, which on
a GPU only means their kernels are queued.  Three rules make that enough:

1. **Reads of another device's array wait for its producer's kernels.**
   :meth:`copy_from` (the only way the executor moves an array between
   devices) first records an event on the stream of every other logical
   device on the source GPU (and on that GPU's legacy default stream) and
   makes this device's stream wait for those events.  The source array was
   produced by an operation that returned before ``copy_from`` was called, so
   its kernels are already queued on one of those streams and the events
   come after them: the copy cannot start before the data is complete.  The
   host never blocks.  (We do not know *which* logical device produced an
   array, so we wait for all of those on its GPU: a little more waiting than
   needed when several logical devices share a GPU, none when each GPU has
   one logical device.)
2. **Memory is not recycled under a pending read.**  CuPy's memory pool is
   stream-ordered: a block freed by the host goes back to the pool of the
   stream that allocated it and is handed out again to later work on that
   stream.  If the source array's last reference dropped while our copy was
   still queued, its producer's stream could overwrite the block before the
   copy ran.  So :meth:`copy_from` keeps the source (and any staging buffer)
   referenced until an event recorded after the copy has completed; finished
   entries are dropped on later calls, and all of them at :meth:`synchronize`
   (which the workers call at the end of every step).
3. **Arrays handed to another device are not written in place afterwards.**
   The executor replaces activations, output gradients and gradient sums
   (``store[key] = store[key] + value``) instead of updating them in place,
   so a queued read never races a later in-place write.  Weights are updated
   in place; with a sharded update (:mod:`convnet.runtime.step.tasks`) other replicas
   copy a rank's slice after its update, and the rank writes that slice
   again only in its next update of the layer, which follows (through
   copies made with rule 1) their next backward pass of the layer, queued
   after their copy.

Streams are *blocking* streams (they synchronise with the legacy default
stream of their GPU).  Work the executor does outside a worker thread (weight
initialisation on the main thread, the ``--sequential`` walk) runs on the
default stream, and the implicit ordering between the default stream and
blocking streams keeps it correct without extra events.

Uploads (:meth:`CudaDevice.upload`: a minibatch's stored images, uint8) run on an
upload stream of their own, so that a copy from pinned host memory overlaps the step
the device is computing.  The array is allocated from this device's stream's pool and
the copy waits for an event recorded on that stream when the upload began (the block
may have been freed by work queued before); the device's stream waits for the copy's
event only when the array is taken, in the step that reads it.

Copies between two physical GPUs are peer copies (``cudaMemcpyAsync`` with
unified addressing, direct over NVLink/PCIe when peer access can be enabled,
which :meth:`copy_from` tries once per pair).  A non-contiguous source is
first made contiguous on its own GPU, on a helper stream that waits for the
producers' events.

``xp`` is CuPy wrapped so that every function called through it runs on
this device's GPU and stream (``device.xp.zeros_like(w)`` on the main thread
allocates on the right GPU); arrays and types pass through unchanged.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref

import numpy as np

from convnet.errors import DeviceError
from convnet.runtime.devices.base import Device
from convnet.runtime.devices.cuda_failures import note_running


def _cupy():
    """The cupy module (indirection so tests can substitute a stand-in)."""
    try:
        import cupy
    except Exception as error:  # noqa: BLE001 - any import failure
        raise DeviceError("the CUDA backend needs CuPy (pip install -e '.[gpu]'); importing it "
                          f"failed: {error}") from None
    return cupy


def free_memory(physical: int) -> int:
    """Bytes free on GPU ``physical`` now, to refuse a plan that cannot fit before
    allocating it."""
    cupy = _cupy()
    with cupy.cuda.Device(int(physical)):
        free, _total = cupy.cuda.runtime.memGetInfo()
    return int(free)


# --------------------------------------------------------------------- registry

_registry_lock = threading.Lock()
_registry: "weakref.WeakSet[CudaDevice]" = weakref.WeakSet()
_peer_pairs: set[tuple[int, int]] = set()


def devices_on(physical: int) -> list["CudaDevice"]:
    """The live CudaDevices placed on GPU ``physical``."""
    with _registry_lock:
        return sorted((d for d in _registry if d.physical == physical), key=lambda d: d.index)


def enable_peer_access(dst: int, src: int) -> bool:
    """Let GPU ``dst`` read GPU ``src``'s memory directly, if the hardware can (once per pair)."""
    if dst == src:
        return True
    cupy = _cupy()
    key = (dst, src)
    with _registry_lock:
        if key in _peer_pairs:
            return True
    runtime = cupy.cuda.runtime
    try:
        if not runtime.deviceCanAccessPeer(dst, src):
            return False
        with cupy.cuda.Device(dst):
            runtime.deviceEnablePeerAccess(src)
    except Exception as error:  # noqa: BLE001 - already enabled is fine, others: staged copies
        if "already" not in str(error).lower():
            return False
    with _registry_lock:
        _peer_pairs.add(key)
    return True


class DeviceModule:
    """CuPy, with every function call run on one device's GPU and stream."""

    __name__ = "cupy"

    def __init__(self, module, device: "CudaDevice"):
        self._module = module
        self._device = device

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if callable(attr) and not isinstance(attr, type):
            device = self._device

            def on_device(*args, **kwargs):
                with device.scope():
                    return attr(*args, **kwargs)

            on_device.__name__ = name
            on_device.__doc__ = getattr(attr, "__doc__", None)
            return on_device
        return attr

    def __repr__(self) -> str:
        return f"<cupy on {self._device!r}>"


class CudaDevice(Device):
    """A logical device on physical GPU ``physical`` with its own CUDA stream."""

    kind = "cuda"

    def __init__(self, index: int, physical: int):
        cupy = _cupy()
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as error:  # noqa: BLE001 - no driver
            raise DeviceError(f"CuPy finds no usable CUDA driver: {error}") from None
        if not 0 <= int(physical) < count:
            raise DeviceError(f"--gpu names GPU {physical}, but CuPy sees {count} GPU(s)"
                              + (f" (0-{count - 1})" if count else ""))
        self.index = int(index)
        self.physical = int(physical)
        self._cupy = cupy
        with cupy.cuda.Device(self.physical):
            self.stream = cupy.cuda.Stream(non_blocking=False)
        self.xp = DeviceModule(cupy, self)
        self._pending: collections.deque = collections.deque()
        self._pending_lock = threading.Lock()
        self._helpers: dict[int, object] = {}
        self._upload_stream = None  # made on the first upload
        with _registry_lock:
            _registry.add(self)
        from convnet.kernels import cuda as cuda_kernels

        with cupy.cuda.Device(self.physical):  # the self-test runs on the first device's GPU
            cuda_kernels.install()

    def __repr__(self) -> str:
        return f"cuda:{self.index}(gpu {self.physical})"

    # ------------------------------------------------------------ context
    def activate(self) -> None:
        """Make this device's GPU and stream current for the calling thread."""
        self._cupy.cuda.Device(self.physical).use()
        self.stream.use()

    @contextlib.contextmanager
    def scope(self):
        """This device's GPU and stream inside the block, the caller's again after it."""
        with self._cupy.cuda.Device(self.physical), self.stream:
            yield self

    # ---------------------------------------------------------- transfers
    def to_device(self, host_array) -> object:
        """A float32 copy of a host array on this GPU (queued on this device's stream)."""
        host = np.ascontiguousarray(host_array, dtype=np.float32)
        with self.scope():
            return self._cupy.asarray(host)

    def upload(self, host_array) -> "_CudaUpload":
        """Start copying a host array, in its own dtype, to this GPU on the device's upload
        stream (from pinned memory the copy runs while the device's stream computes); the
        array is allocated for this device's stream, after the work queued on it so far.
        The host array is kept referenced until the copy has run."""
        cupy = self._cupy
        host = np.ascontiguousarray(host_array)
        with cupy.cuda.Device(self.physical):
            with self._pending_lock:
                if self._upload_stream is None:
                    self._upload_stream = cupy.cuda.Stream(non_blocking=True)
            with self.stream:  # the block is this stream's in CuPy's stream-ordered pool
                out = cupy.empty(host.shape, dtype=host.dtype)
            allocated = cupy.cuda.Event(disable_timing=True)
            allocated.record(self.stream)
            self._upload_stream.wait_event(allocated)
            out.set(host, stream=self._upload_stream)
            done = cupy.cuda.Event(disable_timing=True)
            done.record(self._upload_stream)
        with self._pending_lock:
            self._pending.append((done, host, out))
        return _CudaUpload(self, out, done)

    def copy_from(self, array):
        """A copy, on this device, of an array of any device (see the module docstring)."""
        cupy = self._cupy
        if not isinstance(array, cupy.ndarray):
            with self.scope():
                return cupy.asarray(np.ascontiguousarray(array))
        src = int(array.device.id)
        events = self._producer_events(src)
        with cupy.cuda.Device(self.physical):
            for event in events:
                self.stream.wait_event(event)
        staged = array
        if src != self.physical:
            enable_peer_access(self.physical, src)
            if not array.flags.c_contiguous:
                staged = self._contiguous_on_source(array, src, events)
        with self.scope():
            if src == self.physical:
                out = array.copy()
            else:
                out = cupy.empty(array.shape, dtype=array.dtype)
                if out.nbytes:
                    out.data.copy_from_device_async(staged.data, staged.nbytes, self.stream)
            done = cupy.cuda.Event(disable_timing=True)
            done.record(self.stream)
        with self._pending_lock:
            self._pending.append((done, array, staged))
        self._release_finished()
        return out

    def copy_into(self, out, array) -> None:
        """Copy an array of any device into ``out``, an array of this device (through
        :meth:`copy_from`, so the same ordering rules hold), on this device's stream."""
        staged = self.copy_from(array)
        with self.scope():
            out[...] = staged

    def to_host(self, array) -> np.ndarray:
        """The array on the host, once every kernel queued so far that may write it is done."""
        cupy = self._cupy
        if not isinstance(array, cupy.ndarray):
            return np.asarray(array)
        with self._naming_failures("a copy to the host"):
            return self._to_host(cupy, array)

    def _to_host(self, cupy, array) -> np.ndarray:
        src = int(array.device.id)
        if src == self.physical:
            events = self._producer_events(src)
            with self.scope():
                for event in events:
                    self.stream.wait_event(event)
                return cupy.asnumpy(array)  # on this stream, which it then synchronises
        with cupy.cuda.Device(src):
            cupy.cuda.runtime.deviceSynchronize()
            return array.get(stream=cupy.cuda.Stream.null)

    def synchronize(self) -> None:
        """Wait for everything queued on this device's stream."""
        with self._naming_failures("the wait for the kernels queued in the step"):
            self.stream.synchronize()
        with self._pending_lock:
            self._pending.clear()

    # ------------------------------------------------------------ helpers
    @contextlib.contextmanager
    def _naming_failures(self, what: str):
        """A CUDA error inside the block says it came from ``what`` on this device (CUDA
        reports a kernel's failure at the next wait, which is often this one)."""
        try:
            yield
        except Exception as error:
            note_running(error, f"{what} on logical device {self.index}", self.index,
                         self.physical)
            raise

    def _producer_events(self, src: int) -> list:
        """Events just recorded on every stream that may have produced an array on GPU
        ``src``, except this device's own (its work is already in order)."""
        cupy = self._cupy
        events = []
        with cupy.cuda.Device(src):
            for device in devices_on(src):
                if device is self:
                    continue
                event = cupy.cuda.Event(disable_timing=True)
                event.record(device.stream)
                events.append(event)
            if src != self.physical:
                # work queued on the source GPU's default stream (main-thread set-up);
                # on our own GPU the blocking stream already waits for it
                event = cupy.cuda.Event(disable_timing=True)
                event.record(cupy.cuda.Stream.null)
                events.append(event)
        return events

    def _contiguous_on_source(self, array, src: int, events: list):
        """A contiguous copy of ``array`` made on its own GPU after its producers;
        this device's stream waits for it."""
        cupy = self._cupy
        with cupy.cuda.Device(src):
            helper = self._helpers.get(src)
            if helper is None:
                helper = cupy.cuda.Stream(non_blocking=False)
                self._helpers[src] = helper
            for event in events:
                helper.wait_event(event)
            with helper:
                staged = cupy.ascontiguousarray(array)
            ready = cupy.cuda.Event(disable_timing=True)
            ready.record(helper)
        with cupy.cuda.Device(self.physical):
            self.stream.wait_event(ready)
        return staged

    def _release_finished(self) -> None:
        with self._pending_lock:
            while self._pending and self._pending[0][0].done:
                self._pending.popleft()

    def pending_copies(self) -> int:
        """Copies whose source is still held because they may not have run yet (tests)."""
        with self._pending_lock:
            return len(self._pending)


class _CudaUpload:
    """An upload to a :class:`CudaDevice`: its array, and the event after its copy."""

    def __init__(self, device: CudaDevice, array, done):
        self._device, self._array, self._done = device, array, done

    def take(self):
        with self._device._cupy.cuda.Device(self._device.physical):
            self._device.stream.wait_event(self._done)
        return self._array


def pinned_host_array(nbytes: int) -> np.ndarray:
    """``nbytes`` of page-locked host memory as a flat uint8 array (which keeps it), pinned
    for every GPU (portable): the GPUs copy from it while they compute.  Pinning is slow,
    so the callers keep such arrays for reuse (:mod:`convnet.data.host_buffers`)."""
    cuda = _cupy().cuda
    size = max(int(nbytes), 1)
    memory = cuda.PinnedMemory(size, cuda.runtime.hostAllocPortable)
    return np.frombuffer(cuda.PinnedMemoryPointer(memory, 0), np.uint8, size)


__all__ = ["CudaDevice", "DeviceModule", "devices_on", "enable_peer_access",
           "pinned_host_array"]
