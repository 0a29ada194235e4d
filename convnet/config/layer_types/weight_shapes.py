"""Each weighted layer type's weight-shape rule: ``rule(layer) -> {name: shape}``.

The arrays are ``W0``, ``W1``, ... (one per input) and ``b``, and ``C<i>`` for
an input with ``randSparse``: its connectivity table (the channel each filter
group reads, groups x filterChannels of them), which is drawn once, never
trained, and saved and restored with the weights; a ``bnorm`` layer's running
averages ``mean`` and ``var`` are also never trained (its forward pass updates
them) and saved with the weights.  These rules are
the one place that knows the shapes: the layer library allocates from them and
the planner counts parameters with them, both through
:meth:`convnet.config.model.LayerDef.param_shapes`.  They need the attrs that
shape inference derives (``modulesX``, ``filterChannels``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

WeightShapes = dict[str, tuple[int, ...]]
WeightRule = Callable[..., WeightShapes]  # (layer) -> WeightShapes


def fc_weights(layer) -> WeightShapes:
    """W<i>: (features of input i, outputs); b: (outputs,)."""
    outputs = layer.attrs["outputs"]
    shapes = {f"W{i}": (int(math.prod(shape)), outputs)
              for i, shape in enumerate(layer.input_shapes)}
    shapes["b"] = (outputs,)
    return shapes


def conv_weights(layer) -> WeightShapes:
    """W<i>: (filters, filterChannels[i], fs, fs); b: (filters,) with shared biases,
    else one per output position, (filters, modulesX, modulesX)."""
    a = layer.attrs
    shapes = {f"W{i}": (a["filters"], fch, fs, fs) for i, (fch, fs) in enumerate(_filters(layer))}
    shapes["b"] = _biases(layer, shared=a.get("sharedBiases", True))
    return shapes | connection_shapes(layer)


def local_weights(layer) -> WeightShapes:
    """W<i>: (modulesX*modulesX, filters, filterChannels[i], fs, fs): a filter bank per
    output position; b: (filters, modulesX, modulesX)."""
    a = layer.attrs
    positions = a["modulesX"] * a["modulesX"]
    shapes = {f"W{i}": (positions, a["filters"], fch, fs, fs)
              for i, (fch, fs) in enumerate(_filters(layer))}
    shapes["b"] = _biases(layer, shared=False)
    return shapes | connection_shapes(layer)


#: The running averages of a batch-normalisation layer: the mean and the variance per
#: channel that testing normalises with, saved and restored with the weights, never
#: trained (no gradient).
RUNNING_KEYS = ("mean", "var")


def batch_norm_weights(layer) -> WeightShapes:
    """W0: the scale per channel; b: the shift; mean and var: the running averages."""
    channels = (layer.attrs["channels"],)
    return {"W0": channels, "b": channels} | dict.fromkeys(RUNNING_KEYS, channels)


def is_learned_key(key: str) -> bool:
    """Whether the array ``key`` learns from gradients (not a connectivity table or a
    running average)."""
    return not is_connection_key(key) and key not in RUNNING_KEYS


def connection_key(input_index: int) -> str:
    """The name of input ``input_index``'s connectivity table."""
    return f"C{input_index}"


def is_connection_key(key: str) -> bool:
    """Whether ``key`` names a connectivity table (not a trained array)."""
    return key.startswith("C")


def connection_shapes(layer) -> WeightShapes:
    """C<i>: (groups x filterChannels,) for each input with ``randSparse``: group g reads
    the channels at entries g x filterChannels ... (g + 1) x filterChannels - 1."""
    a = layer.attrs
    return {connection_key(i): (a["groups"][i] * a["filterChannels"][i],)
            for i, random in enumerate(a.get("randSparse") or ()) if random}


def kernel_channels(attrs: dict) -> list[int]:
    """The channels the convolution of each input reads: all of the input's, or under
    ``randSparse`` the groups x filterChannels gathered for the groups."""
    sparse = attrs.get("randSparse") or [False] * len(attrs["channels"])
    return [g * fc if random else c for c, g, fc, random in
            zip(attrs["channels"], attrs["groups"], attrs.get("filterChannels") or
                [None] * len(sparse), sparse)]


def _filters(layer) -> list[tuple[int, int]]:
    """(filterChannels, filterSize) of each input."""
    a = layer.attrs
    return [(a["filterChannels"][i], a["filterSize"][i]) for i in range(len(layer.inputs))]


def _biases(layer, shared: bool) -> tuple[int, ...]:
    filters, modules = layer.attrs["filters"], layer.attrs["modulesX"]
    return (filters,) if shared else (filters, modules, modules)
