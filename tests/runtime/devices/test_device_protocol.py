"""Both logical device classes implement the Device protocol the executor and collectives use.

The CUDA class is checked from the class alone (the suite runs without
CuPy); ``tests/cuda/test_device.py`` checks an instance made on a CuPy stand-in.
"""

from __future__ import annotations

import typing

import numpy as np

from convnet.runtime.devices.cuda import CudaDevice
from convnet.runtime.devices.base import Device
from convnet.runtime.devices.cpu import CpuDevice

METHODS = ("activate", "scope", "to_device", "upload", "copy_from", "copy_into", "to_host",
           "synchronize")
ATTRIBUTES = ("index", "physical", "kind", "xp")


def test_the_protocol_lists_what_the_runtime_uses_of_a_device():
    assert set(typing.get_type_hints(Device)) == set(ATTRIBUTES)
    assert Device.__abstractmethods__ == frozenset(METHODS)


def test_cpu_device_is_a_device():
    device = CpuDevice(1, 0)
    assert isinstance(device, Device)
    assert (device.index, device.physical, device.kind, device.xp) == (1, 0, "cpu", np)
    with device.scope() as current:
        assert current is device


def test_cuda_device_implements_every_member_of_the_protocol():
    assert Device in CudaDevice.__mro__  # declared, not only structural
    assert not CudaDevice.__abstractmethods__
    for name in METHODS:
        assert getattr(CudaDevice, name) is not getattr(Device, name), name
    assert CudaDevice.kind == "cuda"


def test_an_object_without_scope_is_not_a_device():
    class NoScope:
        index = physical = 0
        kind = "cpu"
        xp = np

        def activate(self): ...
        def to_device(self, host_array): ...
        def copy_from(self, array): ...
        def copy_into(self, out, array): ...
        def to_host(self, array): ...
        def synchronize(self): ...

    assert not isinstance(NoScope(), Device)
