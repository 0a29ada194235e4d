"""Every kind of config mistake gives a ConfigError naming file, section and key.

Each case edits a small valid net and states where the error must point and,
for typos, the suggestion it must make.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from convnet.config import load_net, parse_data_dims
from convnet.errors import ConfigError
from tests.support.configs import DATA_LAYERS, WEIGHT_PARAMS, config_error, load_text, write_pair

NET = DATA_LAYERS + """\
[conv1]
type=conv
inputs=data
filters=16
filterSize=3
channels=3
neuron=relu

[pool1]
type=pool
pool=max
inputs=conv1
sizeX=3
stride=2
channels=16

[rnorm1]
type=cmrnorm
inputs=pool1
channels=16
size=5

[fc]
type=fc
inputs=rnorm1
outputs=10

[drop]
type=dropout
inputs=fc

[probs]
type=softmax
inputs=drop

[logprob]
type=cost.logreg
inputs=labels,probs
"""
PARAMS = f"""\
[conv1]
{WEIGHT_PARAMS}
[fc]
{WEIGHT_PARAMS}
[rnorm1]
scale=0.001
pow=0.75

[drop]
keep=0.5

[logprob]
coeff=1
"""


def edit(text: str, *pairs: tuple[str, str]) -> str:
    """Replace the first occurrence of each ``old`` with ``new`` (``old`` must occur)."""
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


class Case(NamedTuple):
    layer_def: str
    file: str  # "def" or "params": the file the error must name
    section: str | None
    key: str | None
    fragment: str  # a piece of the message
    suggestion: str | None = None
    layer_params: str = PARAMS
    data_dims: dict | None = None
    num_classes: int | None = None


def _def(section, key, fragment, *pairs, suggestion=None, **kw) -> Case:
    return Case(edit(NET, *pairs), "def", section, key, fragment, suggestion, **kw)


def _params(section, key, fragment, *pairs, suggestion=None, **kw) -> Case:
    return Case(NET, "params", section, key, fragment, suggestion,
                layer_params=edit(PARAMS, *pairs), **kw)


def _sync(value, fragment, layer="fc") -> Case:
    """A ``sync=value`` line in ``layer``'s layer-params section."""
    return _params(layer, "sync", fragment, (f"[{layer}]\n", f"[{layer}]\nsync={value}\n"))


CASES = {
    # Names: typos get the nearest valid word.
    "key_typo": _def("conv1", "filterSzie", "not a key of conv", ("filterSize=3", "filterSzie=3"),
                     suggestion="filterSize"),
    "type_typo": _def("conv1", "type", "unknown layer type",
                      ("type=conv", "type=cov"), suggestion="conv"),
    "neuron_typo": _def("conv1", "neuron", "unknown neuron", ("neuron=relu", "neuron=rleu"),
                        suggestion="relu"),
    "pool_typo": _def("pool1", "pool", "one of max, avg, maxabs", ("pool=max", "pool=mux"),
                      suggestion="max"),
    "input_typo": _def("conv1", "inputs", "no layer named 'dta'", ("inputs=data", "inputs=dta"),
                       suggestion="data"),
    "neuron_arity": _def("conv1", "neuron", "takes 2 parameter", ("neuron=relu", "neuron=tanh[1]")),
    "neuron_on_cost": _def("logprob", "neuron", "take no neuron",
                           ("inputs=labels,probs", "inputs=labels,probs\nneuron=relu")),
    "drelu_zero": _def("conv1", "neuron", "must not be 0", ("neuron=relu", "neuron=drelu[0]")),
    # Graph structure.
    "forward_reference": _def("conv1", "inputs", "'conv1' reads 'fc', which is defined after it",
                              ("inputs=data", "inputs=fc")),
    "self_reference": _def("conv1", "inputs", "reads itself", ("inputs=data", "inputs=conv1")),
    "input_count": _def("probs", "inputs", "read 1 input", ("inputs=drop", "inputs=drop,fc")),
    "data_with_inputs": _def("labels", "inputs", "read no inputs",
                             ("dataIdx=1", "dataIdx=1\ninputs=data")),
    "reads_cost": _def("extra", "inputs", "is a cost layer",
                       ("inputs=labels,probs",
                        "inputs=labels,probs\n[extra]\ntype=softmax\ninputs=logprob")),
    "missing_inputs": _def("probs", "inputs", "missing", ("inputs=drop", "")),
    # Syntax.
    "missing_type": _def("probs", "type", "missing", ("type=softmax", "")),
    "duplicate_section": _def("fc", None, "defined twice", ("[drop]", "[fc]\ntype=fc\n[drop]")),
    "key_outside_section": Case("type=data\n" + NET, "def", None, "type", "outside any [section]"),
    "no_equals": _def("conv1", None, "expected 'key = value'",
                      ("filters=16", "filters=16\njunk line")),
    "bad_header": _def(None, None, "must look like [name]", ("[fc]", "[fc")),
    "comma_in_name": _def("pro,bs", None, "may not contain", ("[probs]", "[pro,bs]")),
    "v1_alias_twice": _def("conv1", "numFilters", "same key",
                           ("filters=16", "filters=16\nnumFilters=16")),
    # Values.
    "not_an_int": _def("conv1", "filters", "expected an integer", ("filters=16", "filters=abc")),
    "negative_size": _def("conv1", "filterSize", ">= 1", ("filterSize=3", "filterSize=-3")),
    "zero_stride": _def("conv1", "stride", ">= 1", ("filters=16", "filters=16\nstride=0")),
    "huge_int": _def("conv1", "filters", "out of range",
                     ("filters=16", "filters=99999999999999999999")),
    "nan": _def("conv1", "initW", "finite", ("filters=16", "filters=16\ninitW=nan")),
    "inf": _def("conv1", "initB", "finite", ("filters=16", "filters=16\ninitB=inf")),
    "bad_bool": _def("conv1", "sharedBiases", "boolean",
                     ("filters=16", "filters=16\nsharedBiases=maybe")),
    "missing_attr": _def("conv1", "filterSize", "missing", ("filterSize=3", "")),
    "per_input_count": _def("conv1", "filterSize", "one per input",
                            ("inputs=data", "inputs=data,data"),
                            ("filterSize=3", "filterSize=3,3,3")),
    "empty_list_item": _def("conv1", "inputs", "empty items", ("inputs=data", "inputs=data,")),
    "negative_gpu": _def("conv1", "gpu", ">= 0", ("filters=16", "filters=16\ngpu=-1")),
    "rand_sparse_one_group": _def("conv1", "groups", "more than one filter group",
                                  ("filters=16", "filters=16\nrandSparse=1")),
    "bad_hint": _def("conv1", "sumWidth", "expected an integer",
                     ("filters=16", "filters=16\nsumWidth=x")),
    # Layer-params file.
    # [cnv1] names no layer (a warning); conv1 then lacks its params.
    "params_section_typo": _params("conv1", "epsW", "no [conv1] section", ("[conv1]", "[cnv1]"),
                                   suggestion="cnv1"),
    "params_key_typo": _params("conv1", "epsV", "not a layer-params key", ("epsW", "epsV"),
                               suggestion="epsW"),
    "params_missing_epsW": _params("conv1", "epsW", "missing epsW", ("epsW=0.01\n", "")),
    "params_missing_section": _params("conv1", "epsW", "no [conv1] section",
                                      ("[conv1]\n" + WEIGHT_PARAMS, "")),
    "params_def_key": _params("conv1", "filters", "belongs in the layer-def file",
                              ("[conv1]\n", "[conv1]\nfilters=16\n")),
    "params_for_data": _params("data", "keep", "take no layer-params keys",
                               ("[drop]", "[data]\nkeep=1\n[drop]")),
    "wball": _params("conv1", "wball", ">= 0", ("[conv1]\n", "[conv1]\nwball=-0.1\n")),
    "update_period": _params("conv1", "updatePeriod", ">= 0",
                             ("[conv1]\n", "[conv1]\nupdatePeriod=-1\n")),
    "sync_zero": _sync("local:0", "local:K (K an integer >= 1), e.g. local:8, got 'local:0'"),
    "sync_not_int": _sync("local:x", "got 'local:x'"),
    "sync_signed": _sync("local:+4", "got 'local:+4'"),
    "sync_no_period": _sync("local", "got 'local'"),
    "sync_async": _sync("async", "mode of the whole run (--sync async)"),
    "sync_async_bound": _sync("async:2", "'async:2' cannot be set per layer", layer="conv1"),
    "sync_on_pool": _params("pool1", "sync", "take no layer-params keys",
                            ("[drop]", "[pool1]\nsync=sync\n[drop]")),
    "sync_in_def": _def("fc", "sync", "expected sync or local:K",
                        ("outputs=10", "outputs=10\nsync=lcoal:4")),
    "schedule_typo": _params("conv1", "epsW", "unknown learning-rate schedule",
                             ("epsW=0.01", "epsW=dexpp[base=0.01;tgtFactor=10;numSteps=2]"),
                             suggestion="dexp"),
    "schedule_missing_arg": _params("conv1", "epsW", "needs numSteps",
                                    ("epsW=0.01", "epsW=dexp[base=0.01;tgtFactor=10]")),
    "schedule_arg_typo": _params("conv1", "epsB", "exp takes base, tgtFactor",
                                 ("epsB=0.02", "epsB=exp[base=0.01;tgtfactor=10]"),
                                 suggestion="tgtFactor"),
    "schedule_bad_number": _params("conv1", "epsW", "numSteps: expected an integer",
                                   ("epsW=0.01", "epsW=dexp[0.01;10;1.5]")),
    "norm_missing_scale": _params("rnorm1", "scale", "missing scale", ("scale=0.001\n", "")),
    "keep_range": _params("drop", "keep", "<= 1", ("keep=0.5", "keep=1.5")),
    "min_div_zero": _params("rnorm1", "minDiv", "> 0", ("pow=0.75", "pow=0.75\nminDiv=0")),
    "topk": _params("logprob", "topk", "at most the number of classes (10)",
                    ("coeff=1", "coeff=1\ntopk=11")),
    # Shapes.
    "channels_mismatch": _def("conv1", "channels", "has 3 channels", ("channels=3", "channels=4")),
    "flat_not_square": _def("conv1", "channels", "not square 3-channel images",
                            ("filters=16", "filters=16"),
                            data_dims={0: (10,), 1: (1,)}),
    "filter_too_large": _def("conv1", "filterSize", "larger than input 'data'",
                             ("filterSize=3", "filterSize=11")),
    "modules_differ": _def("conv1", "inputs", "same output size",
                           ("inputs=data", "inputs=data,data\npadding=1,0")),
    "groups_divide": _def("conv1", "groups", "does not divide channels=3",
                          ("filters=16", "filters=16\ngroups=2")),
    "pool_window": _def("pool1", "sizeX", "larger than the 6x6 input", ("sizeX=3", "sizeX=7")),
    "pool_stride": _def("pool1", "stride", "at most sizeX=3", ("stride=2", "stride=4")),
    "pool_outputs": _def("pool1", "outputsX", "run past", ("sizeX=3", "sizeX=3\noutputsX=9")),
    "pool_start": _def("pool1", "start", "leaves no window", ("sizeX=3", "sizeX=3\nstart=-3")),
    "cmrnorm_size": _def("rnorm1", "size", "at most the input's 16 channels",
                         ("size=5", "size=17")),
    "logreg_labels": _def("logprob", "inputs", "must be the labels",
                          ("inputs=labels,probs", "inputs=probs,probs")),
    "logreg_softmax": _def("logprob", "inputs", "must be a softmax",
                           ("inputs=labels,probs", "inputs=labels,drop")),
    "num_classes": _def("logprob", "inputs", "hold 12 classes, but input 'probs' gives only 10",
                        ("type=softmax", "type=softmax"),
                        num_classes=12),
    "missing_data_dims": _def("data", "dataIdx", "no data dimensions for dataIdx 0",
                              ("type=data", "type=data"),
                              data_dims={1: (1,)}),
    "non_square_dims": _def("data", "dataIdx", "square", ("type=data", "type=data"),
                            data_dims={0: (3, 8, 9), 1: (1,)}),
    "too_large": _def("conv1", "filters", "too large", ("filters=16", "filters=100000"),
                      data_dims={0: (3, 224, 224), 1: (1,)}),
}


def test_baseline_net_loads(tmp_path):
    net = load_text(tmp_path, NET, PARAMS)
    assert [l.output_shape for l in net][2:6] == [(16, 6, 6), (16, 3, 3), (16, 3, 3), (10,)]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_error_names_file_section_key(tmp_path, case):
    err = config_error(tmp_path, case.layer_def, case.layer_params,
                       data_dims=case.data_dims, num_classes=case.num_classes)
    layer_def, layer_params = tmp_path / "layers.cfg", tmp_path / "params.cfg"
    expected_file = str(layer_def if case.file == "def" else layer_params)
    assert (err.file, err.section, err.key) == (expected_file, case.section, case.key), str(err)
    assert case.fragment in err.message, str(err)
    assert err.suggestion == case.suggestion, str(err)
    text = str(err)
    assert expected_file in text
    for part in (case.section, case.key, case.suggestion):
        assert part is None or f"'{part}'" in text or f"[{part}]" in text


@pytest.mark.parametrize("content, fragment", [
    (b"", "defines no layers"),
    (b"\xff\xfe[data]\n", "not UTF-8"),
    (b"[data]\ntype=data\x00\n", "NUL"),
    (bytes(range(256)), "not UTF-8"),
])
def test_unusable_layer_def_file(tmp_path, content, fragment):
    paths = write_pair(tmp_path, content, "")
    with pytest.raises(ConfigError) as info:
        load_net(*paths, {0: (1,)})
    assert info.value.file == str(paths[0]) and fragment in str(info.value)


def test_missing_file_and_directory(tmp_path):
    layer_def, layer_params = write_pair(tmp_path, NET, PARAMS)
    for bad, fragment in [(tmp_path / "nope.cfg", "cannot read"), (tmp_path, "is a directory")]:
        with pytest.raises(ConfigError) as info:
            load_net(bad, layer_params, {0: (3, 8, 8), 1: (1,)})
        assert info.value.file == str(bad) and fragment in str(info.value)
        with pytest.raises(ConfigError) as info:
            load_net(layer_def, bad, {0: (3, 8, 8), 1: (1,)})
        assert info.value.file == str(bad)


def test_line_numbers_in_messages(tmp_path):
    err = config_error(tmp_path, edit(NET, ("filters=16", "filters=x")), PARAMS)
    line = NET.splitlines().index("filters=16") + 1
    assert f"line {line}:" in err.message


@pytest.mark.parametrize("text", ["", "3x", "x", "-3", "3x0x0", "3.5", "a", "3x" + "9" * 40])
def test_bad_data_dims_text(text):
    with pytest.raises(ConfigError) as info:
        parse_data_dims(text)
    assert "data dims" in str(info.value)


def test_data_dims_text():
    assert parse_data_dims("3x224x224") == (3, 224, 224)
    assert parse_data_dims(" 1 ") == (1,)
    assert parse_data_dims("3X32X32") == (3, 32, 32)
