"""Where the CUDA kernels get their array module and their compiled kernels from.

The override functions of :mod:`kernels.cuda` are written against a
:class:`Backend`: an array module (``xp``) and a factory that turns a
:class:`~kernels.cuda.sources.KernelSpec` into a callable kernel.  In
production it is CuPy with ``cupy.ElementwiseKernel``; the test suite swaps
in numpy with the host-compiled emulator (:mod:`kernels.cuda.emulate`) to
run the very same override code, index math included, without a GPU.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

from .sources import SPECS, KernelSpec


class Backend:
    """An array module plus a kernel factory; compiled kernels are cached per spec."""

    def __init__(self, name: str, xp, make_kernel: Callable[[KernelSpec], Callable]):
        self.name = name
        self.xp = xp
        self._make = make_kernel
        self._kernels: dict[str, Callable] = {}
        self._lock = threading.Lock()

    def kernel(self, name: str) -> Callable:
        kern = self._kernels.get(name)
        if kern is None:
            with self._lock:
                kern = self._kernels.get(name)
                if kern is None:
                    kern = self._make(SPECS[name])
                    self._kernels[name] = kern
        return kern

    def __repr__(self) -> str:
        return f"Backend({self.name})"


def cupy_backend() -> Backend:
    """CuPy with ``ElementwiseKernel`` (compiled by NVRTC on first use, per device)."""
    import cupy

    def make(spec: KernelSpec):
        return cupy.ElementwiseKernel(spec.in_params, spec.out_params, spec.body,
                                      name=spec.name, preamble=spec.preamble,
                                      options=tuple(spec.options))

    return Backend("cupy", cupy, make)


_current: Backend | None = None
_swap_lock = threading.Lock()


def current() -> Backend:
    """The active backend (CuPy once :func:`kernels.cuda.install` ran)."""
    global _current
    if _current is None:
        with _swap_lock:
            if _current is None:
                _current = cupy_backend()
    return _current


@contextlib.contextmanager
def using(backend: Backend):
    """Run the override functions on ``backend`` inside the block (tests)."""
    global _current
    with _swap_lock:
        saved, _current = _current, backend
    try:
        yield backend
    finally:
        with _swap_lock:
            _current = saved


def contiguous(a):
    """``a`` as a C-contiguous array of the active backend (no copy when it is one)."""
    return current().xp.ascontiguousarray(a)


__all__ = ["Backend", "cupy_backend", "current", "using", "contiguous"]
