"""The config parser and the CUDA sources read the one neuron table of kernels.neurons."""

from __future__ import annotations

import pytest

from convnet.config.values.location import Where
from convnet.config.values.neurons import NeuronSpec, NeuronValue
from convnet.errors import ConfigError
from convnet.kernels.cuda.sources import SPECS
from convnet.kernels.neurons import NEURONS, Neuron

WHERE = Where("net.cfg", "layer", "neuron")


@pytest.mark.parametrize("name", list(NEURONS))
def test_every_neuron_parses_builds_and_has_cuda_kernels(name):
    fn = NEURONS[name]
    args = tuple(1.5 for _ in fn.params)
    text = f"{name}[{','.join('1.5' for _ in fn.params)}]" if fn.params else name
    assert NeuronValue()(text, WHERE) == NeuronSpec(name, args)
    assert Neuron(name, args).args == args
    for kind in ("fwd", "fwd_inplace", "bwd"):
        assert f"cvn_neuron_{kind}_{name}" in SPECS


def test_the_parser_and_the_kernels_check_arguments_alike():
    with pytest.raises(ConfigError, match=r"takes 2 parameter\(s\): write tanh\[a,b\]"):
        NeuronValue()("tanh[1]", WHERE)
    with pytest.raises(ValueError, match=r"takes 2 parameter\(s\): write tanh\[a,b\]"):
        Neuron("tanh", (1.0,))
    with pytest.raises(ConfigError, match="a must not be 0"):
        NeuronValue()("drelu[0]", WHERE)
    with pytest.raises(ValueError, match="a must not be 0"):
        Neuron("drelu", (0.0,))
