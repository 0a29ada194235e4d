"""Neuron (activation function) specs: ``relu``, ``tanh[1.7,0.66]``, ...

The names, bracket parameters and their checks come from the one table of
neurons, :data:`convnet.kernels.neurons.NEURONS`; this module only reads the text.
``abstanh[a,b]`` (``a * |tanh(b*x)|``) is the cuda-convnet v1 neuron the
older dialect still uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from convnet.config.values.brackets import split_call
from convnet.config.values.location import Where, quote
from convnet.config.values.suggest import nearest
from convnet.config.values.typed import Float
from convnet.kernels.neurons import NEURONS

_NUMBER = Float()


@dataclass(frozen=True)
class NeuronSpec:
    """An activation function with its bracketed parameters, e.g. ``tanh[1.7,0.66]``."""

    name: str
    args: tuple[float, ...] = ()

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}[{','.join(f'{a:g}' for a in self.args)}]"


class NeuronValue:
    """Converter for a ``neuron=`` value."""

    expected = "a neuron such as relu or tanh[1.7,0.66]"

    def __call__(self, text: str, where: Where) -> NeuronSpec:
        name, args = split_call(text, where, ",")
        if name not in NEURONS:
            raise where.error(f"unknown neuron {quote(name)}; known: {', '.join(NEURONS)}",
                              suggestion=nearest(name, NEURONS))
        neuron, args = NEURONS[name], args or ()
        try:
            neuron.check_count(len(args))
            values = tuple(_NUMBER(arg, where) for arg in args)
            neuron.check_args(values)
        except ValueError as problem:
            raise where.error(str(problem)) from None
        return NeuronSpec(name, values)
