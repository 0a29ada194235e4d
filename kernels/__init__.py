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
import sys
import threading
from typing import Callable

import numpy as np

# CuPy is optional (the ``gpu`` extra) and costs a third of a second to import, so it is
# imported when first needed (a CUDA device, the question whether there is a GPU), not
# with this package: --help, a bad command line and --backend cpu runs never import it.
_NOT_LOADED = object()
_cupy = _NOT_LOADED  # the module, None when it does not import, or not tried yet
_cupy_error = ""  # why it does not import
_cupy_lock = threading.Lock()


def cupy_module():
    """The cupy module, imported on first call; None when it does not import
    (:func:`cupy_import_error` says why)."""
    global _cupy, _cupy_error
    if _cupy is _NOT_LOADED:
        with _cupy_lock:
            if _cupy is _NOT_LOADED:
                try:
                    import cupy
                except Exception as error:  # noqa: BLE001 - any failure means "no CuPy"
                    _cupy_error = f"{type(error).__name__}: {error}"
                    cupy = None
                _cupy = cupy
    return _cupy


def cupy_import_error() -> str:
    """Why CuPy does not import ('' when it does, or was not tried)."""
    return _cupy_error


def array_module(*arrays):
    """numpy, or cupy when any of ``arrays`` lives on a GPU.

    A CuPy array can only exist once CuPy is imported, so the test looks for the module
    among those imported (never importing it here) and uses a plain ``isinstance``
    rather than ``cupy.get_array_module``: that one imports ``cupyx.scipy`` lazily on its
    first call, and when the worker threads of several logical devices make that first
    call together, one of them can find the module half-imported (``module 'cupyx' has
    no attribute 'scipy'``).
    """
    ndarray = getattr(sys.modules.get("cupy"), "ndarray", None)
    if ndarray is not None and any(isinstance(a, ndarray) for a in arrays):
        return sys.modules["cupy"]
    return np


def cuda_device_count() -> int:
    """The CUDA GPUs CuPy sees (after ``CUDA_VISIBLE_DEVICES``); 0 without CuPy or a driver."""
    cupy = cupy_module()
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
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


__all__ = ["array_module", "cupy_available", "cuda_device_count", "cupy_import_error",
           "cupy_module", "array_module_name", "register_kernel", "registered_kernels",
           "kernel"]
