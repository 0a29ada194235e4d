"""Config-language features beyond the reference files: syntax variants, dialects, all types."""

from __future__ import annotations

import math

import pytest

from convnet.config import NeuronSpec, Schedule, load_net, parse_net
from convnet.errors import ConfigError
from tests.support.configs import (DATA_LAYERS, WEIGHT_PARAMS, config_error, load_text, logreg_head,
                                   write_pair)

FC_PARAMS = "[fc]\n" + WEIGHT_PARAMS


@pytest.fixture
def net_with(tmp_path):
    """Load data layers + ``body`` + an fc/softmax/logreg head reading ``source``.

    ``source`` defaults to the last section of ``body``.
    """
    def build(body: str, params: str = "", source: str | None = None, **kwargs):
        last = source or [line[1:-1] for line in body.splitlines() if line.startswith("[")][-1]
        return load_text(tmp_path, DATA_LAYERS + body + logreg_head(last),
                         params + "\n" + FC_PARAMS, **kwargs)
    return build


CONV = "[conv]\ntype=conv\ninputs=data\nfilters=4\nfilterSize=3\nchannels=3\npadding=1\n"
CONV_PARAMS = "[conv]\n" + WEIGHT_PARAMS


def test_syntax_variants_read_the_same(net_with):
    plain = net_with(CONV, CONV_PARAMS)
    variant = (CONV.replace("filters=4", "  filters : 4   # inline comment")
               .replace("padding=1", "padding = 1 ; another")
               .replace("[conv]", "; a comment line\n[conv]  # header comment")
               .replace("\n", "\r\n"))
    other = net_with(variant, CONV_PARAMS.replace("epsW=0.01", "epsW = 0.01 # rate"), source="conv")
    assert [(l.name, l.attrs, l.params, l.output_shape) for l in plain] == \
           [(l.name, l.attrs, l.params, l.output_shape) for l in other]


def test_byte_order_mark_is_skipped(tmp_path):
    net = load_text(tmp_path, "\ufeff" + DATA_LAYERS + CONV, CONV_PARAMS)
    assert list(net.layers) == ["data", "labels", "conv"]


def test_v1_dialect(net_with):
    body = (CONV.replace("filters=4", "numFilters=4\npartialSum=1\nneuron=abstanh[1.7,0.66]")
            + "\n[fc0]\ntype=fc\ninputs=conv\nnumOutputs=7\n")
    net = net_with(body, CONV_PARAMS + "\n[fc0]\n" + WEIGHT_PARAMS)
    assert net["conv"].attrs["filters"] == 4 and "numFilters" not in net["conv"].attrs
    assert net["conv"].neuron == NeuronSpec("abstanh", (1.7, 0.66))
    assert net["fc0"].output_shape == (7,)


@pytest.mark.parametrize("text, expected", [
    ("0.01", Schedule("const", 0.01)),
    ("const[0.01]", Schedule("const", 0.01)),
    ("const[base=0.01]", Schedule("const", 0.01)),
    ("linear[0.01;10]", Schedule("linear", 0.01, 10.0)),
    ("exp[tgtFactor=100;base=0.01]", Schedule("exp", 0.01, 100.0)),
    ("dexp[0.01,250,4]", Schedule("dexp", 0.01, 250.0, 4)),
    ("dexp[0.01;tgtFactor=250;numSteps=4]", Schedule("dexp", 0.01, 250.0, 4)),
    (" dexp [ base = 0.01 ; numSteps = 4 ; tgtFactor = 250 ] ", Schedule("dexp", 0.01, 250.0, 4)),
])
def test_schedule_forms(net_with, text, expected):
    net = net_with(CONV, CONV_PARAMS.replace("epsB=0.02", f"epsB={text}"))
    assert net["conv"].params["epsB"] == expected


def test_schedule_values():
    linear, exp = Schedule("linear", 0.01, 10.0), Schedule("exp", 0.01, 100.0)
    assert math.isclose(linear.value(0.5), 0.01 * 0.5 + 0.001 * 0.5)
    assert math.isclose(exp.value(0.5), 0.001) and math.isclose(exp.value(1.0), 0.0001)


def test_per_input_schedules_with_brackets_and_commas(net_with):
    body = CONV.replace("inputs=data", "inputs=data,data")
    params = CONV_PARAMS.replace("epsW=0.01", "epsW=dexp[0.01,250,4],linear[base=0.1;tgtFactor=2]")
    conv = net_with(body, params)["conv"]
    assert conv.params["epsW"] == [Schedule("dexp", 0.01, 250.0, 4), Schedule("linear", 0.1, 2.0)]
    assert conv.params["momW"] == [0.9, 0.9] and conv.attrs["padding"] == [1, 1]


def test_groups_count_filters_per_group(net_with):
    body = ("[conv0]\ntype=conv\ninputs=data\nfilters=4\nfilterSize=1\nchannels=3\n\n"
            "[conv]\ntype=conv\ninputs=conv0\nfilters=8\ngroups=2\nfilterSize=3\nchannels=4\n"
            "sharedBiases=0\n")
    net = net_with(body, CONV_PARAMS + "\n[conv0]\n" + WEIGHT_PARAMS)
    conv = net["conv"]
    assert conv.attrs["filters"] == 16 and conv.attrs["filterChannels"] == [2]
    assert conv.output_shape == (16, 6, 6)
    assert conv.param_shapes() == {"W0": (16, 2, 3, 3), "b": (16, 6, 6)}


def test_flat_input_read_as_images(net_with):
    body = ("[fc0]\ntype=fc\ninputs=data\noutputs=48\n\n"
            "[conv]\ntype=conv\ninputs=fc0\nfilters=2\nfilterSize=2\nchannels=3\nstride=2\n")
    net = net_with(body, CONV_PARAMS + "\n[fc0]\n" + WEIGHT_PARAMS)
    assert net["conv"].attrs["imgSize"] == [4] and net["conv"].output_shape == (2, 2, 2)


def test_norm_params_in_layer_def_and_params_file_wins(net_with):
    body = CONV + "\n[norm]\ntype=rnorm\ninputs=conv\nchannels=4\nsizeX=3\nscale=0.5\npow=0.25\n"
    net = net_with(body, CONV_PARAMS + "\n[norm]\npow=0.75\n")
    assert net["norm"].attrs["size"] == 3
    assert net["norm"].params == {"scale": 0.5, "pow": 0.75, "minDiv": 1.0}


def test_pool_options(net_with):
    body = (CONV + "\n[pool]\ntype=pool\npool=avg\ninputs=conv\nsizeX=3\nstride=2\nstart=-1\n"
            "channels=4\n")
    pool = net_with(body, CONV_PARAMS)["pool"]
    assert pool.attrs["outputsX"] == 1 + math.ceil((8 + 1 - 3) / 2) and pool.attrs["imgSize"] == 8
    given = net_with(body.replace("start=-1", "outputsX=2"), CONV_PARAMS)["pool"]
    assert given.output_shape == (4, 2, 2)


@pytest.mark.parametrize("body, shape", [
    ("[a]\ntype=neuron\ninputs=data\nneuron=tanh[1.7,0.66]\n\n"
     "[b]\ntype=neuron\ninputs=data\nneuron=relu\n\n"
     "[cat]\ntype=concat\ninputs=a,b\n", (6, 8, 8)),
    ("[a]\ntype=sum\ninputs=data\n\n[cat]\ntype=pass\ninputs=a,data\n", (4, 8, 8)),
    ("[a]\ntype=softmax\ninputs=labels\n\n[cat]\ntype=concat\ninputs=a,data\n", (193,)),
    ("[a]\ntype=eltsum\ninputs=data,data\ncoeffs=1,-1\n", (3, 8, 8)),
    ("[a]\ntype=eltmax\ninputs=data,data\n", (3, 8, 8)),
    ("[a]\ntype=dropout2\ninputs=data\n", (3, 8, 8)),
])
def test_shape_preserving_and_merging_types(net_with, body, shape):
    assert net_with(body, source="cat" if "[cat]" in body else "a")["fc"].input_shapes == (shape,)


def test_sum_and_eltsum_attrs(net_with):
    body = ("[fc0]\ntype=fc\ninputs=data\noutputs=192\n\n[s]\ntype=sum\ninputs=data\nstride=3\n\n"
            "[s2]\ntype=sum\ninputs=fc0\nstride=4\n\n[e]\ntype=eltsum\ninputs=fc0,data\n")
    net = net_with(body, "[fc0]\n" + WEIGHT_PARAMS + "\n[e]\ncoeffs=2,0.5\n")
    assert net["s"].output_shape == (1, 8, 8) and net["s"].attrs["stride"] == 3
    assert net["s2"].output_shape == (48,)
    assert net["e"].attrs["coeffs"] == [2.0, 0.5] and net["e"].output_shape == (192,)


def test_dropout_and_cost_params(net_with):
    body = "[d]\ntype=dropout\ninputs=data\n"
    net = net_with(body, "[d]\nenable=false\n\n[cost]\ncoeff=0.5\ntopk=3\n")
    assert net["d"].params == {"enable": False, "keep": 0.5}
    assert net["cost"].params == {"coeff": 0.5, "topk": 3} and net["cost"].output_shape == (1,)


def test_other_costs(tmp_path):
    layer_def = DATA_LAYERS + """
[fc]
type=fc
inputs=data
outputs=4
neuron=logistic

[probs]
type=softmax
inputs=fc

[bce]
type=cost.bce
inputs=fc,fc

[ce]
type=cost.crossent
inputs=fc,probs

[sq]
type=cost.sum2
inputs=fc
"""
    net = load_text(tmp_path, layer_def, FC_PARAMS)
    assert net.num_classes == 4 and net["fc"].neuron == NeuronSpec("logistic")
    assert all(net[c].params == {"coeff": 1.0, "topk": 1} for c in ("ce", "sq"))
    assert net["bce"].params == {"coeff": 1.0, "topk": 1, "posWeight": 1.0}


def test_labels_default_and_data_dims_kept(net_with):
    net = net_with(CONV, CONV_PARAMS, data_dims={0: (3, 8, 8)})
    assert net["labels"].output_shape == (1,) and net.data_dims == {0: (3, 8, 8), 1: (1,)}


def test_parse_net_needs_no_data(tmp_path):
    net = parse_net(*write_pair(tmp_path, DATA_LAYERS + CONV, CONV_PARAMS))
    assert list(net.layers) == ["data", "labels", "conv"] and net["conv"].output_shape == ()


@pytest.mark.parametrize("data_dims, num_classes", [
    ({0: "3x8x8"}, None), ({0: (3, 8)}, None), ({0: (0,)}, None), ([3, 8, 8], None),
    ({0: (3, 8, 8)}, 0), ({0: (3, 8, 8)}, "10"),
])
def test_bad_arguments_are_config_errors(net_with, data_dims, num_classes):
    with pytest.raises(ConfigError) as info:
        net_with(CONV, CONV_PARAMS, data_dims=data_dims, num_classes=num_classes)
    assert info.value.file.endswith("layers.cfg")


def test_bad_path_argument():
    with pytest.raises(ConfigError):
        load_net(None, None, {0: (3, 8, 8)})


def test_data_layer_takes_no_gpu(tmp_path):
    layer_def = DATA_LAYERS.replace("dataIdx=0", "dataIdx=0\ngpu=0") + CONV
    err = config_error(tmp_path, layer_def, CONV_PARAMS)
    assert (err.section, err.key) == ("data", "gpu")
