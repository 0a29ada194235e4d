"""Weight constraints applied after an update: cuda-convnet2's ``wball``.

With ``wball = r > 0`` for an input's weights, cuda-convnet2's conv and fc
layers rescaled, after each weight update, every filter's (conv) or every
output unit's (fc) incoming weight vector to Euclidean norm exactly ``r``
(``HardWeightConstraintOperator``: the factor is ``r / norm`` whether the
norm was above or below ``r``), only for weights the layer owns and learns
(base ``epsW`` > 0).  Biases are never constrained.
"""

from __future__ import annotations

from . import array_module

#: The axis of each layer type's weight array that indexes the vectors rescaled
#: one by one: conv W (filters, channels, size, size) per filter; fc W
#: (inputs, outputs) per output unit.
UNIT_AXIS = {"conv": 0, "fc": 1}


def ball_projection(w, radius: float, unit_axis: int):
    """``w`` with every slice along ``unit_axis`` rescaled to L2 norm ``radius``.

    A new array in w's dtype.  An all-zero slice has no direction and stays
    zero (the original divided by its zero norm).
    """
    xp = array_module(w)
    other = tuple(a for a in range(w.ndim) if a != unit_axis % w.ndim)
    norm = xp.sqrt((w * w).sum(axis=other, keepdims=True))
    scale = xp.where(norm > 0, radius / xp.where(norm > 0, norm, 1), 0)
    return (w * scale).astype(w.dtype, copy=False)
