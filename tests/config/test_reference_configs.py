"""The twelve cuda-convnet2 reference configs load, with the shapes and values cuda-convnet2 gives them."""

from __future__ import annotations

import math

import pytest

from convnet.config import NeuronSpec, Schedule, infer_shapes, load_net, parse_net
from convnet.errors import ConfigError
from tests.support.configs import IMAGENET_DIMS, REFERENCE_NAMES, reference_dims, reference_pair

IMAGENET = [n for n in REFERENCE_NAMES if n.startswith("imagenet")]


def _load(name, dims=None, num_classes=None):
    return load_net(*reference_pair(name), dims or reference_dims(name), num_classes)


@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_reference_pair_loads(name):
    net = _load(name)
    layer_def, layer_params = reference_pair(name)
    assert net.layer_def_file == str(layer_def) and net.layer_params_file == str(layer_params)
    assert all(layer.output_shape for layer in net)
    assert net.num_classes == (10 if name.startswith("cifar") else 1000)
    for layer in net:  # file order is a topological order
        names = list(net.layers)
        assert all(names.index(i) < names.index(layer.name) for i in layer.inputs)


@pytest.mark.parametrize("name", IMAGENET)
def test_imagenet_shapes_on_224(name):
    net = _load(name)
    suffix = "a" if name == "imagenet-2gpu-model" else ""
    conv1, pool1, pool2 = net["conv1" + suffix], net["pool1" + suffix], net["pool2" + suffix]
    pool3 = net["pool3" + suffix]
    assert conv1.output_shape[1:] == (55, 55) and conv1.attrs["modulesX"] == 55
    assert conv1.output_shape[0] == (48 if suffix else 64)
    assert pool1.output_shape[1:] == (27, 27) and pool1.attrs["outputsX"] == 27
    assert pool2.output_shape[1:] == (13, 13)
    assert pool3.output_shape[1:] == (6, 6)
    if not suffix:
        assert pool3.output_shape == (256, 6, 6) and pool3.outputs == 9216
    assert net["probs"].output_shape == (1000,)
    assert net["data"].output_shape == (3, 224, 224)


def test_imagenet_conv1_derived_attrs_and_weights():
    conv1 = _load("imagenet-1gpu")["conv1"]
    assert conv1.attrs["imgSize"] == [224] and conv1.attrs["filterChannels"] == [3]
    assert conv1.attrs["padding"] == [0] and conv1.attrs["stride"] == [4]
    assert conv1.attrs["sharedBiases"] is True and conv1.gpu == (0,)
    assert conv1.param_shapes() == {"W0": (64, 3, 11, 11), "b": (64,)}


@pytest.mark.parametrize("size, after_pool1, after_pool2", [(24, 12, 6), (32, 16, 8)])
def test_cifar_shapes(size, after_pool1, after_pool2):
    net = _load("cifar10-11pct", {0: (3, size, size), 1: (1,)})
    assert net["conv1"].output_shape == (64, size, size)
    assert net["pool1"].output_shape == (64, after_pool1, after_pool1)
    assert net["rnorm1"].output_shape == (64, after_pool1, after_pool1)
    assert net["pool2"].output_shape == (64, after_pool2, after_pool2)
    local3 = net["local3"]
    assert local3.output_shape == (64, after_pool2, after_pool2)
    assert local3.param_shapes()["W0"] == (after_pool2 ** 2, 64, 64, 3, 3)
    assert local3.param_shapes()["b"] == (64, after_pool2, after_pool2)
    assert net["local4"].output_shape == (32, after_pool2, after_pool2)
    assert net["fc10"].input_shapes == ((32, after_pool2, after_pool2),)
    assert net["fc10"].output_shape == (10,)
    assert net["logprob"].input_shapes == ((1,), (10,))


def test_cifar_values_and_defaults():
    net = _load("cifar10-11pct")
    conv1 = net["conv1"]
    assert conv1.neuron == NeuronSpec("relu") and conv1.attrs["initW"] == [0.0001]
    assert conv1.attrs["initB"] == 0.0 and conv1.attrs["groups"] == [1]
    assert conv1.params == {"epsW": [Schedule("const", 0.001)], "epsB": Schedule("const", 0.002),
                            "momW": [0.9], "momB": 0.9, "wc": [0.0], "wball": [0.0],
                            "updatePeriod": 0, "sync": None, "dropout": 0.0}
    assert net["rnorm1"].params == {"scale": 0.001, "pow": 0.75, "minDiv": 1.0}
    assert net["rnorm1"].attrs["size"] == 9
    assert net["logprob"].params == {"coeff": 1.0, "topk": 1}
    assert net["pool1"].attrs["outputsX"] == 12 and net["pool1"].attrs["start"] == 0
    assert net["data"].gpu is None and net["logprob"].gpu == (0,)


def test_imagenet_params():
    net = _load("imagenet-1gpu")
    assert net["logprob"].params == {"coeff": 1.0, "topk": 5}
    assert net["dropout1"].type == "dropout2"
    assert net["dropout1"].params == {"enable": True, "keep": 0.5}
    assert net["rnorm1"].params["minDiv"] == 2.0
    assert net["conv1"].params["updatePeriod"] == 1
    assert net["pool1"].neuron == NeuronSpec("relu")
    assert net["fc1000"].attrs["initB"] == -7.0


@pytest.mark.parametrize("progress, expected", [
    (0.0, 0.01), (0.2, 0.01), (0.3, 0.01 * 250 ** (-1 / 3)),
    (0.6, 0.01 * 250 ** (-2 / 3)), (0.8, 0.01 / 250), (1.0, 0.01 / 250),
])
def test_dexp_schedule_values(progress, expected):
    conv1 = _load("imagenet-1gpu")["conv1"]
    assert conv1.params["epsW"] == [Schedule("dexp", 0.01, 250.0, 4)]
    assert math.isclose(conv1.params["epsW"][0].value(progress), expected)
    assert math.isclose(conv1.params["epsB"].value(progress), 0.02 if progress < 0.5 else 0.002)


def test_per_input_lists_expand():
    net = _load("imagenet-2gpu-model")
    conv3a = net["conv3a"]
    assert conv3a.inputs == ("pool2a", "pool2b")
    assert conv3a.attrs["filters"] == 192 and conv3a.attrs["channels"] == [128, 128]
    assert conv3a.attrs["imgSize"] == [13, 13] and conv3a.attrs["modulesX"] == 13
    assert len(conv3a.params["epsW"]) == 2 and conv3a.params["epsW"][0] == conv3a.params["epsW"][1]
    assert conv3a.params["momW"] == [0.9, 0.9] and conv3a.params["wball"] == [0.0, 0.0]
    assert set(conv3a.param_shapes()) == {"W0", "W1", "b"}
    fc1000 = net["fc1000"]
    assert fc1000.attrs["initW"] == [0.01, 0.01] and fc1000.params["momW"] == [0.9, 0.9]
    assert fc1000.params["wc"] == [0.0005, 0.0005] and len(fc1000.params["epsW"]) == 2
    assert net["fc2048a"].input_shapes == ((128, 6, 6), (128, 6, 6))
    assert net["cnorm2a"].type == "rnorm" and net["cnorm2a"].params["scale"] == 0.001


def test_pass_layers_concatenate():
    net = _load("imagenet-4gpu-data-model")
    assert net["pass1a"].output_shape == (4096,) and net["pass1a"].gpu == (0,)
    assert net["pass2a"].inputs == ("dropout2a", "dropout2b", "dropout2c", "dropout2d")
    assert net["fc1000"].input_shapes == ((4096,),)
    assert net["conv1"].gpu == (0, 1, 2, 3)


def test_parse_then_infer_is_load():
    name = "imagenet-2gpu-data"
    parsed = parse_net(*reference_pair(name))
    assert all(layer.output_shape == () for layer in parsed)
    inferred = infer_shapes(parsed, IMAGENET_DIMS)
    assert all(layer.output_shape == () for layer in parsed), "infer_shapes changed its input"
    loaded = _load(name)
    assert [(l.name, l.output_shape, l.attrs) for l in inferred] == \
           [(l.name, l.output_shape, l.attrs) for l in loaded]
    assert inferred.data_dims == IMAGENET_DIMS


def test_labels_must_fit_the_head():
    """As in cuda-convnet2, only the labels a head reads must fit its probabilities."""
    assert _load("imagenet-1gpu", num_classes=1000).num_classes == 1000
    assert _load("imagenet-1gpu", num_classes=10).num_classes == 10
    with pytest.raises(ConfigError) as info:
        _load("imagenet-1gpu", num_classes=1001)
    assert info.value.section == "logprob" and info.value.key == "inputs"
