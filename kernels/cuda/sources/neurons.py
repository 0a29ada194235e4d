"""CUDA source of the neurons: forward (out of place and in place) and backward per neuron.

The expressions are written once per neuron of the one table,
:data:`convnet.kernels.neurons.NEURONS`, and checked against it at import.
Used by :mod:`convnet.kernels.cuda.neurons`.
"""

from __future__ import annotations

from ...neurons import NEURONS
from .registry import spec

# The CUDA expressions of each neuron of the one table, kernels.neurons.NEURONS:
# name -> (forward expression of x, a, b; backward expression of g, x, y, a, b, c)
# with the operation order of kernels.neurons; c is a constant the caller
# computes in double precision where numpy does (abstanh: a * |b|).
NEURON_EXPRS: dict[str, tuple[str, str]] = {
    "ident": ("x", "g"),
    "logistic": ("((T)1 + tanh(x * (T)0.5)) * (T)0.5", "g * y * ((T)1 - y)"),
    "abs": ("cvn_abs(x)", "(x > (T)0 ? g : -g)"),
    "relu": ("(x < (T)0 ? (T)0 : x)", "g * (T)(y > (T)0)"),
    "nrelu": ("(x < (T)0 ? (T)0 : x)", "g * (T)(y > (T)0)"),
    "softrelu": ("(x > (T)0 ? x + log1p(exp(-x)) : log1p(exp(x)))", "g * -expm1(-y)"),
    "square": ("x * x", "(T)2 * g * x"),
    "sqrt": ("sqrt(x)", "g / ((T)2 * y)"),
    "log": ("log(x + a)", "g / (x + a)"),
    "tanh": ("tanh(x * b) * a", "(a == (T)0 ? (T)0 : g * (b * (a - y * y / a)))"),
    "abstanh": ("cvn_abs(tanh(x * cvn_abs(b))) * a",
                "g * c * ((T)1 - tanh(cvn_abs(b) * x) * tanh(cvn_abs(b) * x))"
                " * (T)((x > (T)0) - (x < (T)0))"),
    "brelu": ("((x < (T)0 ? (T)0 : x) > a ? a : (x < (T)0 ? (T)0 : x))",
              "g * (T)(y > (T)0 && y < a)"),
    "linear": ("x * a + b", "g * a"),
    "drelu": ("x - tanh(x / a) * a", "g * (tanh(x / a) * tanh(x / a))"),
}
_missing, _unknown = NEURONS.keys() - NEURON_EXPRS.keys(), NEURON_EXPRS.keys() - NEURONS.keys()
if _missing or _unknown:
    raise RuntimeError("the CUDA neuron expressions must match kernels.neurons.NEURONS: "
                       f"missing {sorted(_missing)}, unknown {sorted(_unknown)}")

for _name in NEURONS:
    _fwd, _bwd = NEURON_EXPRS[_name]
    spec(f"cvn_neuron_fwd_{_name}", "T x, T a, T b", "T y", f"y = {_fwd};", arrays=("x",))
    # in place: the output holds x on entry
    spec(f"cvn_neuron_fwd_inplace_{_name}", "T a, T b", "T y",
         f"const T x = y;\ny = {_fwd};")
    spec(f"cvn_neuron_bwd_{_name}", "T g, T x, T y, T a, T b, T c", "T dx",
         f"dx = {_bwd};", arrays=("g", "x", "y"))


def neuron_backward_constant(name: str, args) -> float:
    """The ``c`` argument of a neuron's backward kernel (see NEURON_EXPRS)."""
    if name == "abstanh":
        return float(args[0]) * abs(float(args[1]))
    return 0.0
