"""Configs written for cuda-convnet and cuda-convnet2 load as the originals read them.

One small config per leniency or feature the originals had: key case, a key
given twice, several data columns, cost heads of different widths, v1's
randSparse, wball, the dropout fork's ``dropout=`` and ``cost.ce``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from convnet.config import LayerDef, parse_data_columns
from convnet.data import DataOptions, make_provider
from convnet.errors import ConfigError, ConfigWarning, DataError
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.gradcheck import check_net_gradients
from convnet.kernels.constraints import UNIT_AXIS, ball_projection
from convnet.layers import build_layer
from convnet.layers.base import Context
from convnet.layers.costs import LogregCost
from tests.support import ROOT
from tests.support.configs import (DATA_LAYERS, WEIGHT_PARAMS, config_error, load_text, logreg_head,
                                   write_pair)

CONV = "[conv]\ntype=conv\ninputs=data\nfilters=4\nfilterSize=3\nchannels=3\npadding=1\n"
CONV_PARAMS = "[conv]\n" + WEIGHT_PARAMS
LOGREG_HEAD = logreg_head("conv")
HEAD_PARAMS = "\n[fc]\n" + WEIGHT_PARAMS


def test_key_names_ignore_case_as_configparser_did(tmp_path):
    """filterSize = filtersize = FILTERSIZE, in both files; v1 aliases too."""
    body = CONV.replace("channels", "Channels").replace("filterSize", "FILTERSIZE")
    body = body.replace("filters=", "numfilters=").replace("type=conv", "TYPE=conv")
    params = CONV_PARAMS.replace("epsW", "epsw").replace("momB", "MOMB")
    net = load_text(tmp_path, DATA_LAYERS + body, params)
    plain = load_text(tmp_path, DATA_LAYERS + CONV, CONV_PARAMS)
    assert net["conv"].attrs == plain["conv"].attrs and net["conv"].params == plain["conv"].params


def test_layer_names_stay_case_sensitive(tmp_path):
    with pytest.warns(ConfigWarning, match=r"\[Conv\]: line 1: no layer of this name"):
        err = config_error(tmp_path, DATA_LAYERS + CONV, CONV_PARAMS.replace("[conv]", "[Conv]"))
    assert err.section == "conv" and err.key == "epsW" and err.suggestion == "Conv"


def test_a_params_section_naming_no_layer_is_skipped_with_one_warning(tmp_path):
    """cuda-convnet2 read the params of the layers it defined and never looked at
    other sections (a params file shared by several nets): one warning line, and
    the section's keys, even bad ones, are not read."""
    params = CONV_PARAMS + HEAD_PARAMS + "\n[fc7]\nepsW=oops\nnot_a_key=1\n"
    with pytest.warns(ConfigWarning) as caught:
        net = load_text(tmp_path, DATA_LAYERS + CONV + LOGREG_HEAD, params)
    assert "fc7" not in net.layers
    (warning,) = caught
    line = params.splitlines().index("[fc7]") + 1
    assert str(warning.message) == (
        f"{tmp_path / 'params.cfg'} [fc7]: line {line}: no layer of this name in "
        f"{tmp_path / 'layers.cfg'}; its keys are not read, as in cuda-convnet2 "
        "(did you mean 'fc'?)")


def test_a_key_given_twice_takes_its_last_value_with_one_warning(tmp_path):
    body = CONV.replace("filters=4", "filters=4\nFilters=6")
    with pytest.warns(ConfigWarning) as caught:
        net = load_text(tmp_path, DATA_LAYERS + body, CONV_PARAMS)
    assert net["conv"].attrs["filters"] == 6
    (warning,) = caught
    text = str(warning.message)
    first = (DATA_LAYERS + body).splitlines().index("filters=4") + 1
    assert text.startswith(f"{tmp_path / 'layers.cfg'} [conv] key 'Filters': line {first + 1}: ")
    assert f"lines {first} and {first + 1}" in text and "\n" not in text


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "convnet.py"), *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_the_warning_is_one_line_on_stderr(tmp_path):
    """On the command line: one 'warning:' line, no traceback, no quoted source."""
    body = CONV.replace("filters=4", "filters=4\nfilters=6") + LOGREG_HEAD
    paths = write_pair(tmp_path, DATA_LAYERS + body, CONV_PARAMS + HEAD_PARAMS)
    done = _cli("--print-plan", "--layer-def", str(paths[0]), "--layer-params", str(paths[1]),
                "--data-dims", "3x8x8", "--num-classes", "5")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "given twice" in lines[0]


# -- several data columns and cost heads of different widths -----------------

TWO_HEADS = DATA_LAYERS + """[coarse]
type=data
dataIdx=2

""" + CONV + """
[fc10]
type=fc
inputs=conv
outputs=10

[probs10]
type=softmax
inputs=fc10

[cost10]
type=cost.logreg
inputs=labels,probs10

[fc3]
type=fc
inputs=conv
outputs=3

[probs3]
type=softmax
inputs=fc3

[cost3]
type=cost.logreg
inputs=coarse,probs3
"""
TWO_HEADS_PARAMS = CONV_PARAMS + "\n[fc10]\n" + WEIGHT_PARAMS + "\n[fc3]\n" + WEIGHT_PARAMS


def test_data_dims_give_every_column():
    assert parse_data_columns("3x224x224") == {0: (3, 224, 224), 1: (1,)}
    assert parse_data_columns("3x224x224,1,1") == {0: (3, 224, 224), 1: (1,), 2: (1,)}
    assert parse_data_columns("3x8x8, 1, 1x8x8")[2] == (1, 8, 8)
    with pytest.raises(ConfigError, match="one size per column"):
        parse_data_columns("3x8x8,,1")


def test_a_missing_column_hint_shows_the_extra_column_form(tmp_path):
    """The hint for dataIdx 2 lists every column up to it, the known ones as given,
    and the example parses to dims for column 2."""
    err = config_error(tmp_path, TWO_HEADS, TWO_HEADS_PARAMS, data_dims=parse_data_columns("3x8x8"))
    assert err.section == "coarse" and err.key == "dataIdx"
    assert "--data-dims 3x8x8,1,1 " in err.message, err.message
    example = re.search(r"--data-dims (\S+)", err.message).group(1)
    assert parse_data_columns(example) == {0: (3, 8, 8), 1: (1,), 2: (1,)}
    first = config_error(tmp_path, TWO_HEADS, TWO_HEADS_PARAMS, data_dims={})
    assert first.section == "data" and "e.g. --data-dims 3x224x224" in first.message


def test_heads_of_different_widths_on_several_label_columns(tmp_path):
    """A 10-way and a 3-way head, the second reading data column 2: it loads, each
    head's labels are drawn to fit it, and the whole net passes --check-grads."""
    net = load_text(tmp_path, TWO_HEADS, TWO_HEADS_PARAMS,
                    data_dims=parse_data_columns("3x8x8,1,1"), num_classes=10)
    assert net.data_dims == {0: (3, 8, 8), 1: (1,), 2: (1,)}
    assert (net["probs10"].outputs, net["probs3"].outputs) == (10, 3)
    lines = []
    assert check_net_gradients(net, batch_size=3, seed=2, report=lines.append), lines


def test_the_command_line_trains_a_net_with_a_third_data_column(tmp_path):
    """--data-dims gives the dims of column 2; the dummy provider serves it and both
    heads train; --print-plan takes the same shapes without data."""
    layer_def, layer_params = write_pair(tmp_path, TWO_HEADS, TWO_HEADS_PARAMS)
    common = ["--layer-def", str(layer_def), "--layer-params", str(layer_params),
              "--data-dims", "3x8x8,1,1", "--num-classes", "10", "--no-progress"]
    run = _cli(*common, "--train-range", "1", "--test-range", "9", "--mini", "64")
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "\nepoch   1 batch   1" in run.stdout, run.stdout
    plan = _cli(*common, "--print-plan")
    assert plan.returncode == 0 and "coarse" in plan.stdout, plan.stderr


def test_a_head_narrower_than_its_labels_is_refused(tmp_path):
    err = config_error(tmp_path, TWO_HEADS.replace("inputs=coarse,probs3", "inputs=labels,probs3"),
                       TWO_HEADS_PARAMS, data_dims=parse_data_columns("3x8x8,1,1"),
                       num_classes=10)
    assert (err.section, err.key) == ("cost3", "inputs") and "only 3 probabilities" in err.message


def test_a_label_outside_its_head_is_a_data_error_at_run_time():
    layer = LogregCost(LayerDef(name="cost3", type="cost.logreg", inputs=("coarse", "probs3"),
                                params={"coeff": 1.0, "topk": 1}))
    probs = np.full((2, 3), 1 / 3)
    with pytest.raises(DataError, match="label 3 .* 3-way input 'probs3'"):
        layer.forward([np.array([[0.0], [3.0]]), probs], {}, Context())


def test_the_dummy_provider_serves_every_column(tmp_path):
    """Column 2 (one value per case) is a coarse label fitting the 3-way head; a
    wider column is a per-class pattern; both follow the case's class."""
    dims = parse_data_columns("3x8x8,1,1,2x4")
    data = make_provider("dummy", options=DataOptions(data_dims=dims, cases_per_batch=40))
    assert data.data_dims == dims
    images, labels, coarse, pattern = data.get_batch(1, train=True, epoch=0)
    assert coarse.shape == (40, 1) and pattern.shape == (40, 2, 4)
    np.testing.assert_array_equal(coarse.ravel(), (labels.ravel() >= 5).astype(np.float32))
    assert set(np.unique(coarse)) == {0.0, 1.0}
    same = labels.ravel() == labels.ravel()[0]
    np.testing.assert_array_equal(pattern[same], np.broadcast_to(pattern[0], pattern[same].shape))
    views = data.get_test_views(9)
    assert len(views) == 4 and views[2].shape == (40, 1)
    data.check_dims(load_text(tmp_path, TWO_HEADS, TWO_HEADS_PARAMS, data_dims=dims).data_dims)


# -- randSparse, wball, the dropout fork, cost.ce ----------------------------

SPARSE_DIMS = {0: (4, 8, 8), 1: (1,)}
SPARSE = CONV.replace("channels=3", "channels=4\ngroups=2\nfilterChannels=4\nrandSparse=1")


def test_rand_sparse_loads_with_v1s_shapes(tmp_path):
    """cuda-convnet v1's randSparse: 2 groups each reading 4 of the 4 channels (two
    permutations); the weights are (filters x groups, filterChannels, fs, fs) and the
    connectivity table C0 has groups x filterChannels entries."""
    net = load_text(tmp_path, DATA_LAYERS + SPARSE + LOGREG_HEAD, CONV_PARAMS + HEAD_PARAMS,
                    data_dims=SPARSE_DIMS)
    conv = net["conv"]
    assert conv.attrs["randSparse"] == [True] and conv.attrs["filterChannels"] == [4]
    assert conv.param_shapes() == {"W0": (8, 4, 3, 3), "b": (8,), "C0": (8,)}
    local = load_text(tmp_path, DATA_LAYERS + SPARSE.replace("type=conv", "type=local")
                      + LOGREG_HEAD, CONV_PARAMS + HEAD_PARAMS, data_dims=SPARSE_DIMS)["conv"]
    assert local.param_shapes()["W0"] == (64, 8, 4, 3, 3) and local.param_shapes()["C0"] == (8,)


@pytest.mark.parametrize("change, key, words", [
    ("groups=2", "groups", "more than one filter group"),  # groups=1 below
    ("filterChannels=3", "filterChannels", "must divide channels=4"),
    ("filterChannels=1", "filterChannels", "multiple of channels=4"),
])
def test_rand_sparse_follows_v1s_rules(tmp_path, change, key, words):
    body = SPARSE.replace(change, "groups=1") if key == "groups" else \
        SPARSE.replace("filterChannels=4", change)
    err = config_error(tmp_path, DATA_LAYERS + body + LOGREG_HEAD, CONV_PARAMS + HEAD_PARAMS,
                       data_dims=SPARSE_DIMS)
    assert (err.section, err.key) == ("conv", key) and words in err.message


def test_rand_sparse_without_filter_channels_reads_channels_over_groups(tmp_path):
    body = SPARSE.replace("filterChannels=4\n", "")
    net = load_text(tmp_path, DATA_LAYERS + body + LOGREG_HEAD, CONV_PARAMS + HEAD_PARAMS,
                    data_dims=SPARSE_DIMS)
    assert net["conv"].attrs["filterChannels"] == [2] and net["conv"].param_shapes()["C0"] == (4,)


def test_filter_channels_is_accepted_when_it_is_channels_over_groups(tmp_path):
    body = CONV.replace("channels=3", "channels=4\ngroups=2\nfilterChannels=2") + LOGREG_HEAD
    net = load_text(tmp_path, DATA_LAYERS + body, CONV_PARAMS + HEAD_PARAMS,
                    data_dims={0: (4, 8, 8), 1: (1,)})
    assert net["conv"].attrs["filterChannels"] == [2]
    err = config_error(tmp_path, DATA_LAYERS + body.replace("filterChannels=2", "filterChannels=1"),
                       CONV_PARAMS + HEAD_PARAMS, data_dims={0: (4, 8, 8), 1: (1,)})
    assert (err.section, err.key) == ("conv", "filterChannels")
    assert "randSparse" in err.message and "did you mean" not in str(err)


LOCAL = ("[local]\ntype=local\ninputs=data\nfilters=4\nfilterSize=3\nchannels=3\n"
         "padding=1\n")
LOCAL_HEAD = LOGREG_HEAD.replace("inputs=conv", "inputs=local")


def test_wball_is_read_for_conv_and_fc_and_refused_for_local(tmp_path):
    net = load_text(tmp_path, DATA_LAYERS + CONV + LOGREG_HEAD,
                    CONV_PARAMS + "wball=0.5\n" + HEAD_PARAMS + "wball=2\n")
    assert net["conv"].params["wball"] == [0.5] and net["fc"].params["wball"] == [2.0]
    err = config_error(tmp_path, DATA_LAYERS + LOCAL + LOCAL_HEAD,
                       "[local]\n" + WEIGHT_PARAMS + "wball=0.5\n" + HEAD_PARAMS)
    assert (err.section, err.key) == ("local", "wball") and "local layer" in err.message


@pytest.mark.parametrize("gpus", [(0,), (0, 1)])
@pytest.mark.parametrize("parallel", [True, False])
def test_wball_rescales_every_unit_after_each_update(tmp_path, gpus, parallel):
    """After a step every conv filter and fc output unit has norm wball, on every
    replica alike (with two replicas the update is sharded: the rescaling follows the
    gather); biases and a layer without wball are left alone."""
    gpu_line = f"gpu={','.join(map(str, gpus))}\n"
    head = LOGREG_HEAD.replace("inputs=labels,probs\n", "inputs=labels,probs\n" + gpu_line)
    net = load_text(tmp_path, DATA_LAYERS + CONV.replace("padding=1\n", "padding=1\n" + gpu_line)
                    + head, CONV_PARAMS + "wball=0.5\n" + HEAD_PARAMS, num_classes=5)
    plan = make_plan(net, gpus, 8)
    executor = Executor(net, plan, make_devices(gpus, "cpu"), parallel=parallel)
    try:
        rng = np.random.default_rng(0)
        batch = [rng.standard_normal((8, 3, 8, 8)).astype(np.float32),
                 rng.integers(0, 5, (8, 1)).astype(np.float32)]
        before = {k: v.copy() for k, v in executor.store.weights["fc"][0].items()}
        for _ in range(2):
            executor.step(batch)
        replicas = executor.store.weights["conv"]
        norms = np.sqrt((replicas[0]["W0"].astype(np.float64) ** 2).sum(axis=(1, 2, 3)))
        np.testing.assert_allclose(norms, 0.5, rtol=1e-5)
        for other in replicas[1:]:
            assert all(np.array_equal(other[k], replicas[0][k]) for k in replicas[0])
        fc = executor.store.weights["fc"][0]
        assert not np.allclose(np.sqrt((fc["W0"] ** 2).sum(axis=0)), 0.5)  # no wball there
        assert not np.array_equal(fc["W0"], before["W0"])
    finally:
        executor.close()


def test_ball_projection_by_hand():
    """cuda-convnet2's wball: each filter (conv) / output unit (fc) to norm r."""
    conv = np.zeros((2, 1, 2, 2), np.float32)
    conv[0, 0] = [[3, 0], [0, 4]]          # norm 5 -> scaled by 2/5
    conv[1, 0] = [[0.5, 0.5], [0.5, 0.5]]  # norm 1 -> scaled up by 2
    out = ball_projection(conv, 2.0, UNIT_AXIS["conv"])
    np.testing.assert_allclose(out[0, 0], [[1.2, 0], [0, 1.6]], rtol=1e-6)
    np.testing.assert_allclose(out[1, 0], np.full((2, 2), 1.0), rtol=1e-6)
    fc = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)  # second unit all zero: stays zero
    np.testing.assert_allclose(ball_projection(fc, 3.0, UNIT_AXIS["fc"]),
                               [[3 / 2 ** 0.5, 0], [3 / 2 ** 0.5, 0]], rtol=1e-6)
    assert out.dtype == np.float32


FC_DROPOUT = DATA_LAYERS + logreg_head("data", outputs=6)


def test_the_dropout_forks_fc_dropout_key(tmp_path):
    """dropout=p (dnouri/cuda-convnet): drop outputs with probability p at train
    time, unscaled; multiply by 1 - p at test time; gradients pass the mask."""
    net = load_text(tmp_path, FC_DROPOUT, "[fc]\n" + WEIGHT_PARAMS + "dropout=0.5\n",
                    data_dims={0: (4,), 1: (1,)}, num_classes=6)
    layer = build_layer(net["fc"])
    params = layer.init_params(np.random.default_rng(0))
    x = [np.random.default_rng(1).standard_normal((50, 4)).astype(np.float32)]
    full = build_layer(load_text(tmp_path, FC_DROPOUT, "[fc]\n" + WEIGHT_PARAMS,
                                 data_dims={0: (4,), 1: (1,)})["fc"]).forward(x, params, Context())[0]
    train, mask = layer.forward(x, params, Context(train=True, seed=3))
    np.testing.assert_array_equal(train, full * mask)
    assert 0.3 < mask.mean() < 0.7
    np.testing.assert_allclose(layer.forward(x, params, Context(train=False))[0], full * 0.5)
    g = np.ones_like(train)
    _, grads = layer.backward(g, x, train, params, mask, Context(train=True, seed=3), [False])
    np.testing.assert_allclose(grads["b"], mask.sum(axis=0))
    assert check_net_gradients(net, batch_size=4, seed=1, report=lambda line: None)
    err = config_error(tmp_path, FC_DROPOUT, "[fc]\n" + WEIGHT_PARAMS + "dropout=1\n",
                       data_dims={0: (4,), 1: (1,)})
    assert err.key == "dropout" and "< 1" in err.message


CONV_DROPOUT = DATA_LAYERS + CONV + LOGREG_HEAD


def test_the_dropout_forks_dropout_key_on_a_conv_layer(tmp_path):
    """dropout=p on conv, as on fc: each output (case, filter, pixel) dropped with
    probability p at train time, unscaled; x (1 - p) at test time; the mask's
    bits do not depend on the shard split; the whole net passes --check-grads."""
    net = load_text(tmp_path, CONV_DROPOUT, CONV_PARAMS + "dropout=0.5\n" + HEAD_PARAMS)
    layer = build_layer(net["conv"])
    params = layer.init_params(np.random.default_rng(0))
    x = [np.random.default_rng(1).standard_normal((6, 3, 8, 8)).astype(np.float32)]
    full = build_layer(load_text(tmp_path, CONV_DROPOUT, CONV_PARAMS + HEAD_PARAMS)["conv"]
                       ).forward(x, params, Context())[0]
    train, state = layer.forward(x, params, Context(train=True, seed=3, step=2))
    mask = state[1]
    assert mask.shape == train.shape == (6, 4, 8, 8)
    np.testing.assert_array_equal(train, full * mask)
    assert 0.4 < mask.mean() < 0.6
    np.testing.assert_allclose(layer.forward(x, params, Context(train=False))[0], full * 0.5)
    halves = [layer.forward([x[0][lo:lo + 3]], params,
                            Context(train=True, seed=3, step=2, case_offset=lo))[1][1]
              for lo in (0, 3)]
    np.testing.assert_array_equal(np.concatenate(halves), mask)
    _, grads = layer.backward(np.ones_like(train), x, train, params, state,
                              Context(train=True, seed=3, step=2), [False])
    np.testing.assert_allclose(grads["b"], mask.sum(axis=(0, 2, 3)))
    assert check_net_gradients(net, batch_size=4, seed=1, report=lambda line: None)


def test_cost_ce_is_cost_crossent(tmp_path):
    body = DATA_LAYERS.replace("dataIdx=1", "dataIdx=2") + CONV + LOGREG_HEAD.replace(
        "cost.logreg", "cost.ce")
    net = load_text(tmp_path, body, CONV_PARAMS + HEAD_PARAMS,
                    data_dims={0: (3, 8, 8), 2: (5,)})
    assert net["cost"].type == "cost.crossent"
