"""Neuron (activation) functions of cuda-convnet2 with their derivatives.

=================  ==========================================  ============================
name               f(x)                                        df/dx computed from
=================  ==========================================  ============================
``ident``          x                                           -
``logistic``       1 / (1 + e^-x)                              y: y (1 - y)
``abs``            abs(x)                                      x: 1 if x > 0 else -1
``relu``           max(0, x)                                   y: [y > 0]
``nrelu``          max(0, x)  (see below)                      y: [y > 0]
``softrelu``       log(1 + e^x)                                y: 1 - e^-y
``square``         x^2                                         x: 2x
``sqrt``           sqrt(x)                                     y: 1 / (2y)
``log[a]``         log(a + x)                                  x: 1 / (a + x)
``tanh[a,b]``      a tanh(b x)                                 y: b (a - y^2 / a)
``brelu[a]``       min(a, max(0, x))                           y: [0 < y < a]
``linear[a,b]``    a x + b                                     a
``drelu[a]``       x - a tanh(x / a)                           x: tanh(x / a)^2
``abstanh[a,b]``   a abs(tanh(b x))  (cuda-convnet v1)         x: a b (1 - tanh^2) sign(x)
=================  ==========================================  ============================

Choices where cuda-convnet2 is not a usable reference:

* ``nrelu`` ("max(0, x) + noise") is listed by cuda-convnet2's parser but has
  no implementation in its C++ code, so no noise model can be copied.  The
  engine computes the noise-free ``max(0, x)`` at train and test time, which
  keeps every run deterministic.
* ``softrelu`` is computed exactly as ``log(1 + e^x)`` (numerically stable form)
  instead of the original's switch to ``x`` above 4, which made the function
  jump by 0.018 there.
* ``abstanh`` uses ``abs(b)`` like the original parser.

Every function computes in the dtype of its input.  Layers reach them through
:class:`Neuron`, which calls the dispatchable kernels :func:`neuron_forward`
and :func:`neuron_backward`; the CUDA backend replaces those with fused kernels
(:mod:`convnet.kernels.cuda.neurons`).

:data:`NEURONS` is the one table of neurons: the config parser takes the names
and bracket parameters of ``neuron=`` from it, and the CUDA kernel sources are
keyed by it.  Adding a neuron is one entry here plus its CUDA expressions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import array_module, kernel


@dataclass(frozen=True)
class NeuronFn:
    """One neuron: its bracket parameters and its math.

    ``params`` names the bracket parameters in order; every one is required,
    as in cuda-convnet2, which gave none a default.  ``nonzero`` lists those
    the function divides by.
    """

    name: str
    params: tuple[str, ...]
    # forward(xp, x, args, out) -> y ; ``out`` may be x itself (in place) or None
    forward: Callable
    # backward(xp, g, x, y, args) -> dx ; x is None when ``uses_input`` is false
    backward: Callable
    uses_input: bool  # backward needs the input x (else only the output y)
    nonzero: tuple[str, ...] = ()

    @property
    def nargs(self) -> int:
        return len(self.params)

    @property
    def form(self) -> str:
        """How the neuron is written in a config, e.g. ``tanh[a,b]``."""
        return f"{self.name}[{','.join(self.params)}]" if self.params else self.name

    def check_count(self, count: int) -> None:
        """Raise ValueError unless ``count`` bracket values is what this neuron takes."""
        if count != self.nargs:
            raise ValueError(f"neuron {self.name} takes {self.nargs} parameter(s): "
                             f"write {self.form}")

    def check_args(self, args: tuple[float, ...]) -> None:
        """Raise ValueError unless ``args`` are valid bracket values for this neuron."""
        self.check_count(len(args))
        for param, value in zip(self.params, args):
            if value == 0 and param in self.nonzero:
                raise ValueError(f"neuron {self.form}: {param} must not be 0")


def _ident_f(xp, x, a, out):
    return x if out is None else out


def _ident_b(xp, g, x, y, a):
    return g


def _logistic_f(xp, x, a, out):
    # 1 / (1 + e^-x) = (1 + tanh(x/2)) / 2, stable for any x
    y = xp.multiply(x, 0.5, out=out)
    xp.tanh(y, out=y)
    y += 1.0
    y *= 0.5
    return y


def _logistic_b(xp, g, x, y, a):
    return g * y * (1.0 - y)


def _abs_f(xp, x, a, out):
    return xp.abs(x, out=out)


def _abs_b(xp, g, x, y, a):
    return xp.where(x > 0, g, -g)


RELU_CHUNK = 1 << 18  # values per np.maximum call of a numpy relu (1 MiB of float32)
_RELU_ZEROS: dict = {}  # dtype -> RELU_CHUNK zeros, never written


def _relu_f(xp, x, a, out):
    """``max(x, 0)``.  On numpy, a contiguous array goes in chunks against an array of
    zeros: numpy's vectorised maximum needs two contiguous operands, and against the
    scalar 0 runs 2-2.5x slower (the same values, -0.0 and NaN included)."""
    if xp is not np or x.dtype.kind != "f" or not x.flags.c_contiguous or (
            out is not None and not out.flags.c_contiguous):
        return xp.maximum(x, 0, out=out)
    zeros = _RELU_ZEROS.get(x.dtype)
    if zeros is None:
        zeros = _RELU_ZEROS.setdefault(x.dtype, np.zeros(RELU_CHUNK, x.dtype))
    y = np.empty_like(x) if out is None else out
    src, dst = x.reshape(-1), y.reshape(-1)
    for i in range(0, src.size, RELU_CHUNK):
        j = min(i + RELU_CHUNK, src.size)
        np.maximum(src[i:j], zeros[:j - i], out=dst[i:j])
    return y


def _relu_b(xp, g, x, y, a):
    return g * (y > 0)


def _softrelu_f(xp, x, a, out):
    return xp.logaddexp(x, 0, out=out)


def _softrelu_b(xp, g, x, y, a):
    return g * -xp.expm1(-y)


def _square_f(xp, x, a, out):
    return xp.multiply(x, x, out=out)


def _square_b(xp, g, x, y, a):
    return 2.0 * g * x


def _sqrt_f(xp, x, a, out):
    return xp.sqrt(x, out=out)


def _sqrt_b(xp, g, x, y, a):
    return g / (2.0 * y)


def _log_f(xp, x, a, out):
    y = xp.add(x, a[0], out=out)
    return xp.log(y, out=y)


def _log_b(xp, g, x, y, a):
    return g / (x + a[0])


def _tanh_f(xp, x, a, out):
    y = xp.multiply(x, a[1], out=out)
    xp.tanh(y, out=y)
    y *= a[0]
    return y


def _tanh_b(xp, g, x, y, a):
    if a[0] == 0:
        return xp.zeros_like(g)
    return g * (a[1] * (a[0] - y * y / a[0]))


def _brelu_f(xp, x, a, out):
    return xp.clip(x, 0, a[0], out=out)


def _brelu_b(xp, g, x, y, a):
    return g * ((y > 0) & (y < a[0]))


def _linear_f(xp, x, a, out):
    y = xp.multiply(x, a[0], out=out)
    y += a[1]
    return y


def _linear_b(xp, g, x, y, a):
    return g * a[0]


def _drelu_f(xp, x, a, out):
    t = xp.tanh(x / a[0])
    t *= a[0]
    return xp.subtract(x, t, out=out)


def _drelu_b(xp, g, x, y, a):
    t = xp.tanh(x / a[0])
    return g * (t * t)


def _abstanh_f(xp, x, a, out):
    y = xp.multiply(x, abs(a[1]), out=out)
    xp.tanh(y, out=y)
    xp.abs(y, out=y)
    y *= a[0]
    return y


def _abstanh_b(xp, g, x, y, a):
    b = abs(a[1])
    t = xp.tanh(b * x)
    return g * (a[0] * b) * (1.0 - t * t) * xp.sign(x)


NEURONS: dict[str, NeuronFn] = {n.name: n for n in [
    NeuronFn("ident", (), _ident_f, _ident_b, False),
    NeuronFn("logistic", (), _logistic_f, _logistic_b, False),
    NeuronFn("abs", (), _abs_f, _abs_b, True),
    NeuronFn("relu", (), _relu_f, _relu_b, False),
    NeuronFn("nrelu", (), _relu_f, _relu_b, False),
    NeuronFn("softrelu", (), _softrelu_f, _softrelu_b, False),
    NeuronFn("square", (), _square_f, _square_b, True),
    NeuronFn("sqrt", (), _sqrt_f, _sqrt_b, False),
    NeuronFn("log", ("a",), _log_f, _log_b, True),
    NeuronFn("tanh", ("a", "b"), _tanh_f, _tanh_b, False),
    NeuronFn("abstanh", ("a", "b"), _abstanh_f, _abstanh_b, True),
    NeuronFn("brelu", ("a",), _brelu_f, _brelu_b, False),
    NeuronFn("linear", ("a", "b"), _linear_f, _linear_b, False),
    NeuronFn("drelu", ("a",), _drelu_f, _drelu_b, True, nonzero=("a",)),
]}


@kernel
def neuron_forward(x, name, args, out=None):
    """f(x) for neuron ``name`` with parameters ``args``; ``out`` may be x (in place)."""
    return NEURONS[name].forward(array_module(x), x, args, out)


@kernel
def neuron_backward(g, x, y, name, args):
    """dL/dx from dL/dy = g; ``x`` is None when the neuron does not use its input."""
    return NEURONS[name].backward(array_module(g), g, x, y, args)


class Neuron:
    """One configured neuron, e.g. ``tanh[1.7159,0.6666]``."""

    def __init__(self, name: str, args=()):
        if name not in NEURONS:
            raise ValueError(f"unknown neuron type {name!r}; known: {', '.join(sorted(NEURONS))}")
        fn = NEURONS[name]
        args = tuple(float(a) for a in args)
        fn.check_args(args)
        self.fn = fn
        self.name = name
        self.args = args

    @property
    def uses_input(self) -> bool:
        return self.fn.uses_input

    @property
    def is_identity(self) -> bool:
        return self.name == "ident"

    def forward(self, x, inplace: bool = False):
        """f(x); with ``inplace`` x is overwritten (only when the caller owns it)."""
        return neuron_forward(x, self.name, self.args, x if inplace else None)

    def backward(self, g, x, y):
        """dL/dx from dL/dy; ``x`` may be None unless :attr:`uses_input`."""
        return neuron_backward(g, x if self.uses_input else None, y, self.name, self.args)

    def __repr__(self) -> str:
        if not self.args:
            return f"Neuron({self.name})"
        return f"Neuron({self.name}[{','.join(f'{a:g}' for a in self.args)}])"
