"""Fused CUDA neurons: forward and backward of every neuron as one element-wise kernel.

The generic neuron functions (:mod:`convnet.kernels.neurons`) are short chains of
array operations, e.g. relu's backward ``g * (y > 0)`` is two passes and a
temporary, logistic's forward four in-place passes.  Each kernel here is one
pass with the generic functions' operation order.

These replace the dispatchable kernels :func:`convnet.kernels.neurons.neuron_forward`
and :func:`convnet.kernels.neurons.neuron_backward` for CuPy arrays, with the same
signatures: ``out`` is x itself for an in-place forward, and ``x`` is None
when the neuron does not use its input.  The kernels are compiled for every
neuron of :data:`convnet.kernels.neurons.NEURONS` (:mod:`convnet.kernels.cuda.sources`).
"""

from __future__ import annotations

from ..neurons import NEURONS
from .kernel_set import contiguous, current
from .sources import neuron_backward_constant


def _ab(args):
    a = float(args[0]) if len(args) > 0 else 0.0
    b = float(args[1]) if len(args) > 1 else 0.0
    return a, b


def _check_name(name: str) -> None:
    if name not in NEURONS:
        raise ValueError(f"unknown neuron type {name!r}")


def neuron_forward(x, name, args, out=None):
    _check_name(name)
    be = current()
    a, b = _ab(args)
    if out is not None and out is x and x.flags.c_contiguous:
        be.kernel(f"cvn_neuron_fwd_inplace_{name}")(a, b, x)
        return x
    y = be.xp.empty(x.shape, dtype=x.dtype)
    be.kernel(f"cvn_neuron_fwd_{name}")(contiguous(x), a, b, y)
    if out is not None:
        out[...] = y
        return out
    return y


def neuron_backward(g, x, y, name, args):
    _check_name(name)
    be = current()
    a, b = _ab(args)
    g = contiguous(g)
    x = g if x is None else contiguous(x).reshape(g.shape)
    y = g if y is None else contiguous(y).reshape(g.shape)
    dx = be.xp.empty(g.shape, dtype=g.dtype)
    be.kernel(f"cvn_neuron_bwd_{name}")(g, x, y, a, b, neuron_backward_constant(name, args), dx)
    return dx
