"""The CUDA tests' layer catalogue (:mod:`tests.support.cuda_cases`) covers every
layer type and neuron, and its runner gives every gradient of a layer."""

from __future__ import annotations

import numpy as np

from convnet.config.layer_types.table import LAYER_TYPES
from convnet.kernels.neurons import NEURONS
from tests.support.cuda_cases import forward_backward, layer_cases


def test_cases_cover_every_layer_type_and_neuron():
    cases = layer_cases()
    types = {c.ldef.type for c in cases.values()}
    assert set(LAYER_TYPES) - {"data"} <= types
    neurons = {c.ldef.neuron.name for c in cases.values() if c.ldef.neuron is not None}
    assert set(NEURONS) <= neurons
    out = forward_backward(cases["conv-plain"], np.asarray, np.asarray)
    assert set(out) == {"y", "d_in0", "d_W0", "d_b"}
