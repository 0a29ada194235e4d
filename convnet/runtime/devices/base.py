"""What the executor and the collectives need from a logical device.

A logical device is one entry of ``--gpu``: a CPU worker
(:class:`convnet.runtime.devices.cpu.CpuDevice`) or a CUDA stream on a GPU
(:class:`convnet.runtime.devices.cuda.CudaDevice`).  The executor, its
workers and the all-reduce collectives are written against :class:`Device`
only, so they never ask which kind of device they hold.

:class:`Device` is a :class:`typing.Protocol` rather than a plain abstract
base class because the code that uses a device cares about its members, not
its ancestry: a stand-in device in a test type-checks structurally, and
``isinstance(obj, Device)`` checks the members at run time.  The two real
device classes still subclass it explicitly, and its methods are abstract,
so a device class that misses one fails when it is constructed instead of
halfway through a training step.
"""

from __future__ import annotations

from abc import abstractmethod
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Device(Protocol):
    """A logical device: where a replica's arrays live and whose worker computes them.

    Every array a device hands out is its own: moving an array onto a device
    always makes a real copy, never a view of another device's buffer.
    """

    index: int
    """Position in ``--gpu`` (logical device number)."""
    physical: int
    """The ``--gpu`` entry itself: the physical GPU (or CPU slot) it runs on."""
    kind: str
    """``'cpu'`` or ``'cuda'``, as chosen by ``--backend``."""
    xp: Any
    """The array module its arrays belong to (numpy, or CuPy bound to this device)."""

    @abstractmethod
    def activate(self) -> None:
        """Make this device current for the calling thread, for good (a worker's start)."""

    @abstractmethod
    def scope(self) -> AbstractContextManager[Device]:
        """This device current inside a ``with`` block, the caller's again after it."""

    @abstractmethod
    def to_device(self, host_array) -> Any:
        """A float32 copy of a host array on this device."""

    @abstractmethod
    def upload(self, host_array) -> Upload:
        """Start copying a host array, in its own dtype, to this device (on a GPU on a stream
        of its own, so that from pinned memory it runs while the device computes); the
        :class:`Upload`'s ``take()`` gives the array, ordered before the device's later
        work.  The host array must stay unchanged until the device's next synchronize."""

    @abstractmethod
    def copy_from(self, array) -> Any:
        """A copy on this device of an array that lives on any device."""

    @abstractmethod
    def copy_into(self, out, array) -> None:
        """Copy an array of any device into ``out``, an array of this device."""

    @abstractmethod
    def to_host(self, array) -> Any:
        """The array as a numpy array, once the work that writes it is done."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait until everything queued on this device has run."""


class Upload(Protocol):
    """An upload begun by :meth:`Device.upload`."""

    def take(self) -> Any:
        """The array on the device; the device's work queued from now on runs after the
        copy (call it on the thread, and so the stream, that uses the array)."""


class Uploaded:
    """An upload that is complete: the array itself (a CPU device reads host memory)."""

    def __init__(self, array):
        self.array = array

    def take(self):
        return self.array


__all__ = ["Device", "Upload", "Uploaded"]
