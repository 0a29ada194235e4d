"""The ``neuron`` layer: a neuron function (``LayerDef.neuron``) as a layer of its own.

The inline ``neuron=`` key of other layers is handled by
:class:`convnet.layers.core.ComputeLayer`; the functions live in :mod:`convnet.kernels.neurons`.
"""

from __future__ import annotations

from convnet.kernels.neurons import Neuron

from .core import ComputeLayer, neuron_switches


class NeuronLayer(ComputeLayer):
    allows_neuron = False  # the neuron is the layer itself

    def __init__(self, ldef):
        super().__init__(ldef)
        spec = ldef.neuron
        if spec is None:
            raise ValueError(f"layer '{ldef.name}': a neuron layer needs a 'neuron' function")
        self.fn = Neuron(spec.name, spec.args)

    def _forward(self, inputs, params, ctx):
        x = inputs[0]
        y = self.fn.forward(x, inplace=False)
        return y, (x if self.fn.uses_input else None, y)

    def _switches(self, inputs, state):
        x, y = state
        return [neuron_switches(self.fn, x, y)]

    def _backward(self, grad, inputs, params, state, ctx, need):
        if not need[0]:
            return [None], {}
        x, y = state
        return [self.fn.backward(grad, x, y)], {}
