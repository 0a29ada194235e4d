"""The ``data`` layer.  The executor loads data columns itself and never computes
with it; it is the identity on its (optional) single input so
that generic code can build every layer of a net."""

from __future__ import annotations

from .core import ComputeLayer


class DataLayer(ComputeLayer):
    allows_neuron = False
    fresh_output = False

    def _forward(self, inputs, params, ctx):
        if len(inputs) != 1:
            raise ValueError(f"data layer '{self.name}' is filled by the data provider, "
                             f"not computed")
        return inputs[0], None

    def _backward(self, grad, inputs, params, state, ctx, need):
        return [grad if (need and need[0]) else None], {}
