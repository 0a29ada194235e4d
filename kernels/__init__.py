"""Array math shared by all layers, over numpy on the CPU and CuPy on GPUs.

Kernels take and return arrays of one array module (numpy or CuPy);
:func:`array_module` says which (the Chainer/CuPy ``get_array_module``
idiom), so a layer written once runs on the CPU and on GPUs.

Every public kernel is written once against the array module (``xp``) and
runs as is on numpy.  Where an array module allows better (a fused CUDA
kernel, a cuDNN call), a replacement is registered with
:func:`register_kernel` under the kernel's name and the array module's name
(:func:`array_module_name`); :func:`kernel`-decorated functions dispatch to
it when their first array argument belongs to that array module.  Layers
only ever call the generic names, so the CUDA kernels (:mod:`convnet.kernels.cuda`)
are added without touching ``layers/``.

Kernels compute in the dtype of their inputs (float32 in training, float64
in the gradient check); none of them casts to float32 on its own.

Submodules: :mod:`convnet.kernels.conv` (conv and local layers, im2col/GEMM and
Winograd), :mod:`convnet.kernels.pool`, :mod:`convnet.kernels.norm`,
:mod:`convnet.kernels.neurons`, :mod:`convnet.kernels.nn` (fc, softmax, costs,
element-wise combinations), :mod:`convnet.kernels.random` (counter-based uniforms
for dropout masks) and :mod:`convnet.kernels.scratch` (per-thread reusable
temporaries of the conv and pool kernels).
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

try:  # CuPy is optional (the ``gpu`` extra).
    import cupy as _cupy
except Exception:  # noqa: BLE001 - any import failure means "no CuPy"
    _cupy = None


def array_module(*arrays):
    """numpy, or cupy when any of ``arrays`` lives on a GPU.

    A plain ``isinstance`` test rather than ``cupy.get_array_module``: that one imports
    ``cupyx.scipy`` lazily on its first call, and when the worker threads of several
    logical devices make that first call together, one of them can find the module
    half-imported (``module 'cupyx' has no attribute 'scipy'``).
    """
    if _cupy is not None and any(isinstance(a, _cupy.ndarray) for a in arrays):
        return _cupy
    return np


def cuda_device_count() -> int:
    """The CUDA GPUs CuPy sees (after ``CUDA_VISIBLE_DEVICES``); 0 without CuPy or a driver."""
    if _cupy is None:
        return 0
    try:
        return int(_cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no driver, no device
        return 0


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    return cuda_device_count() > 0


def array_module_name(xp) -> str:
    """``'numpy'`` or ``'cupy'`` for an array module (CuPy bound to a device included)."""
    return "numpy" if xp is np else xp.__name__.split(".")[0]


# (kernel name, array module name) -> replacement implementation
_OVERRIDES: dict[tuple[str, str], Callable] = {}


def register_kernel(name: str, module_name: str = "cupy"):
    """Decorator: use the decorated function for kernel ``name`` on arrays of the
    array module named ``module_name`` (see :func:`array_module_name`).

    The replacement takes exactly the arguments of the generic kernel.
    """
    def deco(fn: Callable) -> Callable:
        _OVERRIDES[(name, module_name)] = fn
        return fn
    return deco


def registered_kernels() -> dict[tuple[str, str], Callable]:
    """A copy of the replacements registered so far, by (kernel, array module name)."""
    return dict(_OVERRIDES)


def kernel(fn: Callable) -> Callable:
    """Make ``fn`` a dispatchable kernel (see the module docstring).

    The array module is taken from the first positional argument that is an
    array; numpy calls skip the lookup entirely when nothing is registered.
    """
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _OVERRIDES:
            for a in args:
                if hasattr(a, "shape") and hasattr(a, "dtype"):
                    impl = _OVERRIDES.get((name, array_module_name(array_module(a))))
                    if impl is not None:
                        return impl(*args, **kwargs)
                    break
        return fn(*args, **kwargs)

    wrapper.generic = fn  # the portable implementation, for tests and fallbacks
    return wrapper


__all__ = ["array_module", "cupy_available", "cuda_device_count", "array_module_name",
           "register_kernel", "registered_kernels", "kernel"]
