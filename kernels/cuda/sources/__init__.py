"""CUDA source of the element-wise kernels that replace numpy kernels on CuPy, as plain data.

Every kernel is a ``cupy.ElementwiseKernel`` body: ``i`` is the flat index
of the output element the thread computes, ``raw`` arrays are indexed with
flat (C-order) indices, non-raw outputs are references to element ``i``.
Keeping the sources here, apart from CuPy, lets the test suite compile them
on the host and run them element by element (``tests/cuda_emulation.py``)
on machines without a GPU, and compare them with the numpy kernels.

Rules the bodies follow so that the same text compiles with NVRTC (in CuPy)
and with a host C++ compiler (the emulator):

* only ``raw`` array inputs, scalar inputs and outputs; arrays are passed
  C-contiguous, and raw outputs are only used with an explicit ``size``;
* helpers in the preamble are templates (the element type ``T`` is a
  typedef CuPy emits per call) and marked ``__device__``;
* ``min``/``max`` only on two operands of one type; index arithmetic in
  ``long long`` where a product can pass 2^31;
* no ``NAN``/``INFINITY`` macros (not defined under NVRTC).

Each body mirrors the operation order of the numpy kernel it replaces
(window sums in the same order, the same roundings; compiled without FMA
contraction), so many of them agree with numpy bit for bit.

The files: :mod:`~convnet.kernels.cuda.sources.registry` (:class:`KernelSpec`,
the :data:`SPECS` registry, :func:`parse_params`),
:mod:`~convnet.kernels.cuda.sources.helpers` (the device helpers of the default
preamble), and one module per kernel family, named like the module of
:mod:`convnet.kernels.cuda` that launches its kernels: ``conv`` (conv and local
layers), ``pool``, ``norm``, ``nn`` (``cost.logreg``), ``dropout``, ``neurons``,
``update`` (the momentum update), ``batch_norm`` and ``images`` (stored images made
float).
Importing this package registers every family's kernels.
"""

from __future__ import annotations

# each family registers its kernels on import, in this order (the order of SPECS)
from . import conv, pool, norm, nn, dropout, neurons, update, batch_norm, images  # noqa: F401, I001
from .helpers import HELPERS
from .neurons import NEURON_EXPRS, neuron_backward_constant
from .registry import SPECS, KernelSpec, parse_params

__all__ = ["KernelSpec", "SPECS", "HELPERS", "NEURON_EXPRS", "neuron_backward_constant",
           "parse_params"]
