"""Machinery shared by the layer families: the inline neuron and per-input attrs.

:class:`ComputeLayer` splits a layer into its own math (``_forward`` /
``_backward``, written by each family) and the optional inline ``neuron=``
applied to the output, so that every layer type gets the neuron for free and
its forward/backward always include it.
"""

from __future__ import annotations

from typing import Any

from convnet.config.model import LayerDef
from convnet.kernels import array_module
from convnet.kernels.neurons import Neuron

from .base import Context, Layer


def make_neuron(spec) -> Neuron | None:
    """A :class:`~convnet.kernels.neurons.Neuron` from a NeuronSpec (None for no neuron)."""
    if spec is None:
        return None
    return Neuron(spec.name, spec.args)


class ComputeLayer(Layer):
    """A layer whose output may go through an inline neuron.

    Subclasses implement ``_forward(inputs, params, ctx) -> (z, state)`` and
    ``_backward(grad_z, inputs, params, state, ctx, need_input_grads) ->
    (input_grads, param_grads)``.  ``z`` is the output before the neuron;
    layers that need their own output in ``_backward`` keep it in ``state``.

    ``fresh_output`` says whether ``z`` is a new array the layer owns and
    ``keeps_output`` whether ``state`` refers to it; a neuron that does not
    need its input overwrites z in place only when z is fresh and not kept.
    """

    fresh_output = True
    keeps_output = False  # ``state`` holds z itself (then no in-place neuron)
    allows_neuron = True

    def __init__(self, ldef: LayerDef):
        super().__init__(ldef)
        self.neuron = make_neuron(ldef.neuron) if self.allows_neuron else None
        if self.neuron is not None and self.neuron.is_identity:
            self.neuron = None

    # -- the Layer interface ------------------------------------------------
    def forward(self, inputs: list, params: dict, ctx: Context) -> tuple[Any, Any]:
        z, state = self._forward(inputs, params, ctx)
        if self.neuron is None:
            return z, state
        keep_z = self.neuron.uses_input
        inplace = self.fresh_output and not self.keeps_output and not keep_z
        y = self.neuron.forward(z, inplace=inplace)
        return y, (state, z if keep_z else None)

    def backward(self, grad_output, inputs: list, output, params: dict, state, ctx: Context,
                 need_input_grads: list[bool]) -> tuple[list, dict]:
        grad_z, state = self.through_neuron(grad_output, output, state)
        return self._backward(grad_z, inputs, params, state, ctx, need_input_grads)

    def through_neuron(self, grad_output, output, state):
        """(the gradient of z, the output before the neuron; the layer's own state) from
        the gradient of the output and the state :meth:`forward` returned."""
        if self.neuron is None:
            return grad_output, state
        state, z = state
        return self.neuron.backward(grad_output, z, output), state

    def switches(self, inputs: list, output, state) -> list:
        if self.neuron is None:
            return self._switches(inputs, state)
        state, z = state
        return self._switches(inputs, state) + [neuron_switches(self.neuron, z, output)]

    # -- for subclasses -----------------------------------------------------
    def _switches(self, inputs, state) -> list:
        """:meth:`switches` of the layer's own math (before the neuron)."""
        return []

    def _forward(self, inputs, params, ctx):
        raise NotImplementedError

    def _backward(self, grad, inputs, params, state, ctx, need_input_grads):
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------
    def attr(self, key: str, default=None):
        return self.ldef.attrs.get(key, default)

    def param(self, key: str, default=None):
        return self.ldef.params.get(key, default)

    def shape_output(self, y):
        """Reshape a (N, ...) result to the declared per-case output shape, if any."""
        shape = tuple(self.ldef.output_shape or ())
        if shape and tuple(y.shape[1:]) != shape:
            return y.reshape((y.shape[0],) + shape)
        return y


def neuron_switches(neuron: Neuron, x, y):
    """Which piece of a piecewise neuron each value is on: the sign of the
    derivative (relu: 0 or 1, abs: -1 or 1); constant for smooth neurons."""
    xp = array_module(y)
    return xp.sign(neuron.backward(xp.ones_like(y), x, y))


def per_input(value, n: int) -> list:
    """A per-input attribute as a list of length n (a scalar is repeated)."""
    if isinstance(value, (list, tuple)):
        if len(value) == n:
            return list(value)
        if len(value) == 1:
            return list(value) * n
        raise ValueError(f"expected {n} values, got {len(value)}")
    return [value] * n
