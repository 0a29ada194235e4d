"""CuPy kernels for ``--backend cuda``, behind the generic kernel interface.

Importing this package or its modules never needs CuPy and registers
nothing: the kernel sources (:mod:`convnet.kernels.cuda.sources`) are plain strings
and the override functions only touch CuPy when called (through
:mod:`convnet.kernels.cuda.kernel_set`).  :func:`install` registers the overrides with
:func:`convnet.kernels.register_kernel` for the array module ``'cupy'``, so the
generic kernels dispatch to them for CuPy arrays and numpy calls are
unaffected; :class:`convnet.runtime.devices.cuda.CudaDevice` calls it.  Without CuPy
or without a GPU, :func:`install` raises :class:`CudaUnavailable` with the reason.

Overrides (module: kernels replaced):

* :mod:`~convnet.kernels.cuda.conv`: ``conv_forward``, ``conv_backward``,
  ``local_forward``, ``local_backward``;
* :mod:`~convnet.kernels.cuda.pool`: ``pool_forward``, ``pool_backward``;
* :mod:`~convnet.kernels.cuda.norm`: ``response_norm_forward``, ``response_norm_backward``;
* :mod:`~convnet.kernels.cuda.nn`: ``logreg_cost``, ``logreg_grad``;
* :mod:`~convnet.kernels.cuda.dropout`: ``uniform_like`` (bit-identical to numpy);
* :mod:`~convnet.kernels.cuda.neurons`: ``neuron_forward``, ``neuron_backward``;
* :mod:`~convnet.kernels.cuda.update`: ``momentum_update`` (the weight update, gated by
  its finite flag on the device);
* :mod:`~convnet.kernels.cuda.batch_norm`: ``batch_moments``, ``batch_norm_forward``,
  ``batch_norm_grad_sums``, ``batch_norm_backward``.
* :mod:`~convnet.kernels.cuda.images`: ``images_to_float`` (a minibatch's stored images
  made float on the device, bit-identical to numpy).

Every other generic kernel runs on CuPy unchanged.  Setting the environment
variable ``CONVNET_CUDA_KERNELS=generic`` makes :func:`install` register
nothing, so a GPU run uses only the generic kernels (to compare the two).  Before
registering, :func:`install` runs the self-test (:mod:`convnet.kernels.cuda.self_test`)
once per process: a family whose machine code disagrees with the generic kernels on
this GPU is not registered, with one warning.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings

from convnet import kernels as _kernels
from convnet.errors import OneLineWarning

from .kernel_set import KERNEL_DTYPES

#: kernel name -> module holding its CuPy override
OVERRIDES = {
    "conv_forward": "conv", "conv_backward": "conv",
    "local_forward": "conv", "local_backward": "conv",
    "pool_forward": "pool", "pool_backward": "pool",
    "response_norm_forward": "norm", "response_norm_backward": "norm",
    "logreg_cost": "nn", "logreg_grad": "nn",
    "uniform_like": "dropout",
    "neuron_forward": "neurons", "neuron_backward": "neurons",
    "momentum_update": "update",
    "batch_moments": "batch_norm", "batch_norm_forward": "batch_norm",
    "batch_norm_grad_sums": "batch_norm", "batch_norm_backward": "batch_norm",
    "images_to_float": "images",
}

#: The overrides that take every float type (see :data:`~.kernel_set.KERNEL_DTYPES`).
_ANY_DTYPE = ("conv_forward", "conv_backward", "uniform_like")

_install_lock = threading.Lock()
_self_test = None  # the SelfTest of this process, once run


class CudaUnavailable(RuntimeError):
    """CuPy is missing or sees no GPU."""


class CudaKernelWarning(OneLineWarning):
    """A fused kernel family disagrees with the generic kernels on this GPU."""


def available() -> bool:
    """True when CuPy imports and sees a CUDA device (same test as kernels.cupy_available)."""
    return _kernels.cupy_available()


def unavailable_reason() -> str:
    """Why :func:`install` cannot run here ('' when it can)."""
    if _kernels.cupy_module() is None:
        return (f"CuPy is not installed (pip install -e '.[gpu]'): "
                f"{_kernels.cupy_import_error()}")
    if not available():
        return "CuPy is installed but finds no CUDA GPU"
    return ""


def install(force: bool = False, self_test: bool = True) -> bool:
    """Register the CuPy overrides; False when ``CONVNET_CUDA_KERNELS=generic`` (unless
    ``force``).  With ``self_test`` (the default) the families that fail the self-test
    (:mod:`convnet.kernels.cuda.self_test`, run once per process on the current GPU)
    stay on the generic kernels; without it every override is registered (the GPU tests
    check the fused kernels themselves)."""
    if not available():
        raise CudaUnavailable(unavailable_reason())
    if os.environ.get("CONVNET_CUDA_KERNELS", "").strip().lower() == "generic" and not force:
        return False
    with _install_lock:
        failed = {r.family for r in self_test_result().failed} if self_test else set()
        import importlib

        for name, module in OVERRIDES.items():
            if module in failed:
                _kernels._OVERRIDES.pop((name, "cupy"), None)
                continue
            impl = getattr(importlib.import_module(f"{__name__}.{module}"), name)
            if name not in _ANY_DTYPE:
                impl = for_kernel_dtypes(impl, _generic(name))
            _kernels.register_kernel(name, "cupy")(impl)
    return True


def self_test_result():
    """This process's :class:`~convnet.kernels.cuda.self_test.SelfTest`, run on the
    current GPU the first time it is asked for; a failure is warned about once, naming
    the failing kernels, the GPU and the NVRTC and driver versions."""
    global _self_test
    if _self_test is None:
        from . import self_test

        result = self_test.run()
        if result.failed:
            from .versions import compiler_text

            warnings.warn(f"the CUDA kernels disagree with the generic kernels on "
                          f"{compiler_text()}: " + "; ".join(
                              f"{r.kernel} ({r.family}): {r.detail}" for r in result.failed)
                          + f"; the generic kernels run instead for "
                          f"{', '.join(r.family for r in result.failed)} (slower, not "
                          f"wrong); make gpu-check reports it", CudaKernelWarning, stacklevel=2)
        _self_test = result
    return _self_test


def _generic(name: str):
    """The generic kernel an override replaces (the ``generic`` of its dispatcher)."""
    import importlib

    for module in ("conv", "pool", "norm", "nn", "random", "neurons", "update", "batch_norm",
                   "images"):
        found = getattr(importlib.import_module(f"convnet.kernels.{module}"), name, None)
        if found is not None and hasattr(found, "generic"):
            return found.generic
    raise LookupError(f"no generic kernel {name!r}")


def for_kernel_dtypes(impl, generic):
    """``impl`` for arrays of :data:`KERNEL_DTYPES`, ``generic`` for other floats (judged
    by the first array argument, or the first of a list of them)."""
    @functools.wraps(impl)
    def dispatch(*args, **kwargs):
        first = args[0][0] if isinstance(args[0], (list, tuple)) else args[0]
        dtype = getattr(first, "dtype", None)
        if dtype is not None and dtype.kind == "f" and dtype.name not in KERNEL_DTYPES:
            return generic(*args, **kwargs)
        return impl(*args, **kwargs)

    return dispatch


def uninstall() -> None:
    """Remove the CuPy overrides again (the CUDA benchmark times the generic kernels too)."""
    with _install_lock:
        for name in OVERRIDES:
            _kernels._OVERRIDES.pop((name, "cupy"), None)


__all__ = ["OVERRIDES", "CudaKernelWarning", "CudaUnavailable", "available",
           "unavailable_reason", "install", "self_test_result", "uninstall"]
