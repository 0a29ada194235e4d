"""The array module and the compiled kernels the CUDA overrides run on.

The override functions of :mod:`convnet.kernels.cuda` are written against a
:class:`KernelSet`: an array module (``xp``) and a factory that turns a
:class:`~convnet.kernels.cuda.sources.KernelSpec` into a callable kernel.  In
production it is CuPy with ``cupy.ElementwiseKernel``; the test suite swaps
in (:func:`using`) numpy with the kernel sources compiled for the host, to
run the very same override code, index math included, without a GPU.
"""

from __future__ import annotations

import threading
from typing import Callable

from .sources import SPECS, KernelSpec
from .swappable import Swappable

#: The element types the CUDA kernel sources are written for.  Arrays of a 16-bit float
#: (``--precision bf16`` or ``fp16``) take the generic kernels on CuPy instead: the
#: sources' mixed float and ``T`` arithmetic does not compile for them (NVRTC rejects
#: 9 of float16's and 19 of bfloat16's).  The conv layers choose for themselves (cuDNN
#: takes every float type), and the dropout uniforms do not depend on the dtype.
KERNEL_DTYPES = ("float32", "float64")


class KernelSet:
    """An array module plus a kernel factory; compiled kernels are cached per spec."""

    def __init__(self, name: str, xp, make_kernel: Callable[[KernelSpec], Callable]):
        self.name = name
        self.xp = xp
        self._make = make_kernel
        self._kernels: dict[str, Callable] = {}
        self._lock = threading.Lock()

    def kernel(self, name: str) -> Callable:
        """The compiled kernel of spec ``name`` (compiled on first use)."""
        kern = self._kernels.get(name)
        if kern is None:
            with self._lock:
                kern = self._kernels.get(name)
                if kern is None:
                    kern = self._make(SPECS[name])
                    self._kernels[name] = kern
        return kern

    def __repr__(self) -> str:
        return f"KernelSet({self.name})"


def cupy_kernel_set() -> KernelSet:
    """CuPy with ``ElementwiseKernel`` (compiled by NVRTC on first use, per device)."""
    import cupy

    def make(spec: KernelSpec):
        return cupy.ElementwiseKernel(spec.in_params, spec.out_params, spec.body,
                                      name=spec.name, preamble=spec.preamble,
                                      options=tuple(spec.options))

    return KernelSet("cupy", cupy, make)


_current: Swappable[KernelSet] = Swappable(cupy_kernel_set)


def current() -> KernelSet:
    """The kernel set the overrides run on: CuPy's unless :func:`using` swapped it."""
    return _current.get()


def using(kernel_set: KernelSet):
    """Run the override functions on ``kernel_set`` inside the block (a context manager).

    The one seam through which the tests run the overrides on the host.
    """
    return _current.swapped(kernel_set)


def contiguous(a):
    """``a`` as a C-contiguous array of the current kernel set's array module (no copy
    when it is one)."""
    return current().xp.ascontiguousarray(a)


__all__ = ["KernelSet", "cupy_kernel_set", "current", "using", "contiguous"]
