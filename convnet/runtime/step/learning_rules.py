"""Which hyper-parameters update which weight array of a layer.

A weight layer holds one weight array per input, named by :func:`weight_key`,
and one bias, :data:`BIAS_KEY` (the names the layer library and
:meth:`convnet.config.model.LayerDef.param_shapes` use).  Input i's weights
learn with ``epsW[i]``, ``momW[i]`` and ``wc[i]`` of the layer-params file;
the bias with ``epsB`` and ``momB`` and no weight decay (a ``bnorm`` layer's
scale is its ``W0``, its shift its bias); a ``randSparse`` input's connectivity
table (``C<i>``) and a ``bnorm`` layer's running averages with :data:`FIXED`
(they get no gradient, so no update ever reads the rule).  This module is the
one place that pairs the arrays with those values: the weight store checks
that a layer's arrays are exactly the ones named here, and the optimizer
reads the rule of each array from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from convnet.config.layer_types.weight_shapes import RUNNING_KEYS, connection_shapes
from convnet.config.model import LayerDef
from convnet.config.values.schedules import Schedule
from convnet.kernels.constraints import UNIT_AXIS

BIAS_KEY = "b"


def _ball(ldef: LayerDef, i: int) -> tuple[float, int]:
    """Input i's ``wball`` radius and the axis of its units.  cuda-convnet2 applied it
    only to weights that learn (base ``epsW`` > 0); the config refuses it for layer
    types without a ``UNIT_AXIS``."""
    radius = (ldef.params.get("wball") or [0.0] * len(ldef.inputs))[i]  # bnorm has none
    if not radius or ldef.params["epsW"][i].base <= 0:
        return 0.0, 0
    return radius, UNIT_AXIS[ldef.type]


def weight_key(input_index: int) -> str:
    """The name of the weights applied to the layer's input ``input_index``."""
    return f"W{input_index}"


@dataclass(frozen=True)
class LearningRule:
    """The hyper-parameters of one weight array: learning rate over training
    progress, momentum and weight decay (L2, scaled by the learning rate), and
    ``ball``: after each update, rescale every filter / output unit of the array
    to this norm along ``unit_axis`` (cuda-convnet2's ``wball``; 0: never)."""

    eps: Schedule
    momentum: float
    decay: float
    ball: float = 0.0
    unit_axis: int = 0

    @property
    def frozen(self) -> bool:
        """Whether the array never changes: its learning rate is 0 throughout (``epsW=0``
        or ``epsB=0``), so not even a momentum step saved where it learned may move it."""
        return self.eps.base == 0


#: The rule of an array that never learns (a connectivity table): no rate, no momentum.
FIXED = LearningRule(Schedule("const", 0.0), 0.0, 0.0)


def learning_rules(ldef: LayerDef) -> dict[str, LearningRule]:
    """The rule of each of ``ldef``'s weight arrays, by array name (empty without weights)."""
    if not ldef.has_weights:
        return {}
    params = ldef.params
    rules = {weight_key(i): LearningRule(params["epsW"][i], params["momW"][i], params["wc"][i],
                                         *_ball(ldef, i))
             for i in range(len(ldef.inputs))}
    rules[BIAS_KEY] = LearningRule(params["epsB"], params["momB"], 0.0)
    rules.update(dict.fromkeys(connection_shapes(ldef), FIXED))
    rules.update(dict.fromkeys(set(ldef.param_shapes()) & set(RUNNING_KEYS), FIXED))
    return rules


@dataclass(frozen=True)
class ScaledRate:
    """A learning-rate schedule times a constant factor (``value`` is all the optimizer
    reads)."""

    schedule: object
    factor: float

    @property
    def base(self) -> float:
        return self.schedule.base * self.factor

    def value(self, progress: float) -> float:
        return self.schedule.value(progress) * self.factor


def scale_rates(rules: dict[str, dict[str, LearningRule]], layer: str, factor: float) -> None:
    """Multiply the learning rates of ``layer``'s rules by ``factor`` (asynchronous
    replicas: R updates of a step, each with 1/R of the rate, add up to one)."""
    rules[layer] = {k: dataclasses.replace(r, eps=ScaledRate(r.eps, factor))
                    for k, r in rules[layer].items()}
