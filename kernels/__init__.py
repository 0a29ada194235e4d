"""Array math shared by all layers, over numpy on the CPU and CuPy on GPUs.

Kernels take and return arrays of one array module; :func:`array_module`
says which (the Chainer/CuPy ``get_array_module`` idiom), so a layer written
once runs on both backends.

Every public kernel is written once against the array module (``xp``) and
runs as is on numpy.  A backend that can do better (a fused CUDA kernel, a
cuDNN call) registers a replacement with :func:`register_kernel` under the
kernel's name; :func:`kernel`-decorated functions dispatch to it when their
first array argument belongs to that backend.  Layers only ever call the
generic names, so a GPU backend adds kernels without touching ``layers/``.

Kernels compute in the dtype of their inputs (float32 in training, float64
in the gradient check); none of them casts to float32 on its own.

Submodules: :mod:`kernels.conv` (conv and local layers, im2col/GEMM),
:mod:`kernels.pool`, :mod:`kernels.norm`, :mod:`kernels.neurons`,
:mod:`kernels.nn` (fc, softmax, costs, element-wise combinations) and
:mod:`kernels.random` (counter-based uniforms for dropout masks).
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

try:  # CuPy is optional (the ``gpu`` extra).
    import cupy as _cupy
except Exception:  # noqa: BLE001 - any import failure means "no CUDA backend"
    _cupy = None


def array_module(*arrays):
    """numpy, or cupy when any of ``arrays`` lives on a GPU."""
    if _cupy is not None:
        return _cupy.get_array_module(*arrays)
    return np


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    if _cupy is None:
        return False
    try:
        return _cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no driver, no device
        return False


def backend_name(xp) -> str:
    """``'numpy'`` or ``'cupy'`` for an array module."""
    return "numpy" if xp is np else getattr(xp, "__name__", "cupy").split(".")[0]


# (kernel name, backend name) -> replacement implementation
_OVERRIDES: dict[tuple[str, str], Callable] = {}


def register_kernel(name: str, backend: str = "cupy"):
    """Decorator: use the decorated function for kernel ``name`` on ``backend``.

    The replacement takes exactly the arguments of the generic kernel.
    """
    def deco(fn: Callable) -> Callable:
        _OVERRIDES[(name, backend)] = fn
        return fn
    return deco


def registered_kernels() -> dict[tuple[str, str], Callable]:
    """A copy of the backend-specific replacements registered so far."""
    return dict(_OVERRIDES)


def kernel(fn: Callable) -> Callable:
    """Make ``fn`` a dispatchable kernel (see the module docstring).

    The backend is chosen from the first positional argument that is an
    array; numpy calls skip the lookup entirely when nothing is registered.
    """
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _OVERRIDES:
            for a in args:
                if hasattr(a, "shape") and hasattr(a, "dtype"):
                    impl = _OVERRIDES.get((name, backend_name(array_module(a))))
                    if impl is not None:
                        return impl(*args, **kwargs)
                    break
        return fn(*args, **kwargs)

    wrapper.generic = fn  # the portable implementation, for tests and fallbacks
    return wrapper


__all__ = ["array_module", "cupy_available", "backend_name", "register_kernel",
           "registered_kernels", "kernel"]
