"""Fused CUDA neurons: forward and backward of every neuron as one element-wise kernel.

The generic neuron functions (:mod:`kernels.neurons`) are short chains of
array operations, e.g. relu's backward ``g * (y > 0)`` is two passes and a
temporary, logistic's forward four in-place passes.  Each kernel here is one
pass with the generic functions' operation order.

Integration point: :class:`kernels.neurons.Neuron` calls the per-neuron
functions directly, not through a dispatchable kernel, so these overrides
take effect once ``kernels/neurons.py`` routes ``Neuron.forward`` and
``Neuron.backward`` through two ``@kernel`` functions with these signatures::

    @kernel
    def neuron_forward(x, name, args, out=None):
        return NEURONS[name].forward(array_module(x), x, args, out)

    @kernel
    def neuron_backward(g, x, y, name, args):
        return NEURONS[name].backward(array_module(g), g, x, y, args)

(``out`` is x itself for an in-place forward, as now; ``x`` is None when the
neuron does not use its input.)  Until then they are registered under those
names and only reached by direct calls (the tests do that).
"""

from __future__ import annotations

from .kernel_set import contiguous, current
from .sources import NEURON_EXPRS, neuron_backward_constant


def _ab(args):
    a = float(args[0]) if len(args) > 0 else 0.0
    b = float(args[1]) if len(args) > 1 else 0.0
    return a, b


def neuron_forward(x, name, args, out=None):
    if name not in NEURON_EXPRS:
        raise ValueError(f"unknown neuron type {name!r}")
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
    if name not in NEURON_EXPRS:
        raise ValueError(f"unknown neuron type {name!r}")
    be = current()
    a, b = _ab(args)
    g = contiguous(g)
    x = g if x is None else contiguous(x).reshape(g.shape)
    y = g if y is None else contiguous(y).reshape(g.shape)
    dx = be.xp.empty(g.shape, dtype=g.dtype)
    be.kernel(f"cvn_neuron_bwd_{name}")(g, x, y, a, b, neuron_backward_constant(name, args), dx)
    return dx
