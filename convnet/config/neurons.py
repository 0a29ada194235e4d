"""Neuron (activation function) specs: ``relu``, ``tanh[1.7,0.66]``, ... (SPEC section 2).

cuda-convnet2 gave no neuron parameter a default, so every listed parameter
is required.  ``abstanh[a,b]`` (``a * |tanh(b*x)|``) is the cuda-convnet v1
neuron the older dialect still uses.
"""

from __future__ import annotations

from convnet.config.brackets import split_call
from convnet.config.location import Where, quote
from convnet.config.model import NeuronSpec
from convnet.config.suggest import nearest
from convnet.config.values import Float

# Name -> parameter names, in bracket order.
NEURONS: dict[str, tuple[str, ...]] = {
    "ident": (), "logistic": (), "abs": (), "relu": (), "nrelu": (), "softrelu": (),
    "square": (), "sqrt": (),
    "log": ("a",),            # log(a + x)
    "tanh": ("a", "b"),       # a * tanh(b * x)
    "abstanh": ("a", "b"),    # a * |tanh(b * x)|   (cuda-convnet v1)
    "brelu": ("a",),          # min(a, max(0, x))
    "linear": ("a", "b"),     # a * x + b
    "drelu": ("a",),          # x - a * tanh(x / a)
}
# Parameters that are divisors in the function.
_NONZERO = {("drelu", "a")}
_NUMBER = Float()


class NeuronValue:
    """Converter for a ``neuron=`` value."""

    expected = "a neuron such as relu or tanh[1.7,0.66]"

    def __call__(self, text: str, where: Where) -> NeuronSpec:
        name, args = split_call(text, where, ",")
        if name not in NEURONS:
            raise where.error(f"unknown neuron {quote(name)}; known: {', '.join(NEURONS)}",
                              suggestion=nearest(name, NEURONS))
        names = NEURONS[name]
        form = f"{name}[{','.join(names)}]" if names else name
        if len(args or ()) != len(names):
            raise where.error(f"neuron {name} takes {len(names)} parameter(s): write {form}")
        values = tuple(_NUMBER(arg, where) for arg in args or ())
        for param, value in zip(names, values):
            if value == 0 and (name, param) in _NONZERO:
                raise where.error(f"neuron {form}: {param} must not be 0")
        return NeuronSpec(name, values)
