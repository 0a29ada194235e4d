"""--check-grads: the finite-difference check of a whole net."""

from __future__ import annotations


import numpy as np
import pytest

from convnet import kernels
from convnet.config.layer_types.table import LAYER_TYPES
from convnet.config.model import LayerDef, NetConfig
from convnet.runtime.gradcheck import check_net_gradients
from convnet.kernels.neurons import NEURONS

from tests.support import ROOT
from tests.support.layers import conv_def, fc_def, neuron, norm_def, pool_def, simple_def

EXAMPLES = ROOT / "examples"


def _renamed(ldef, name, inputs):
    ldef.name, ldef.inputs = name, tuple(inputs)
    return ldef


def small_net() -> NetConfig:
    """data -> conv(relu) -> pool -> cmrnorm -> fc -> dropout -> fc -> softmax -> logreg."""
    layers = [
        LayerDef(name="data", type="data", attrs={"dataIdx": 0}, output_shape=(3, 6, 6)),
        LayerDef(name="labels", type="data", attrs={"dataIdx": 1}, output_shape=(1,)),
        _renamed(conv_def(in_shapes=((3, 6, 6),), filters=4, neuron_="relu"), "conv1", ["data"]),
        _renamed(pool_def(in_shape=(4, 6, 6), size=3, stride=2), "pool1", ["conv1"]),
        _renamed(norm_def("cmrnorm", in_shape=(4, 3, 3), size=3), "rnorm1", ["pool1"]),
        _renamed(fc_def(in_shapes=((4, 3, 3),), outputs=6, neuron_="tanh[1,0.5]"), "fc1",
                 ["rnorm1"]),
        _renamed(simple_def("dropout", [(6,)], params={"keep": 0.7}), "drop1", ["fc1"]),
        _renamed(fc_def(in_shapes=((6,),), outputs=3), "fc2", ["drop1"]),
        _renamed(simple_def("softmax", [(3,)]), "probs", ["fc2"]),
        _renamed(simple_def("cost.logreg", [(1,), (3,)], out_shape=(1,)), "logprob",
                 ["labels", "probs"]),
    ]
    return NetConfig(layers={l.name: l for l in layers}, data_dims={0: (3, 6, 6), 1: (1,)},
                     num_classes=3)


def test_small_net_passes_with_one_line_per_layer():
    lines = []
    assert check_net_gradients(small_net(), batch_size=3, seed=1, report=lines.append)
    body = lines[1:-1]
    names = [ln.split()[0] for ln in body]
    assert names == ["conv1", "pool1", "rnorm1", "fc1", "drop1", "fc2", "probs", "logprob"]
    for ln in body:
        assert " OK " in ln
        assert float(ln.split()[2]) < 1e-4
    assert "net:W0" in body[0]  # weight layers are also checked against the whole net's cost
    assert lines[-1] == "gradient check passed"


def test_a_wrong_gradient_is_reported():
    """Replace the cmrnorm backward by one that ignores the normaliser's dependence
    on the input: the check must fail on that layer only."""
    def wrong(gy, x, y, cache, **kw):
        return gy * cache[1]

    kernels.register_kernel("response_norm_backward", "numpy")(wrong)
    try:
        lines = []
        assert not check_net_gradients(small_net(), batch_size=3, seed=1, report=lines.append)
    finally:
        kernels._OVERRIDES.pop(("response_norm_backward", "numpy"))
    failing = [ln.split()[0] for ln in lines if " FAIL " in ln]
    # rnorm1 fails its own check; conv1 below it fails the whole-net check
    assert failing == ["conv1", "rnorm1"]
    conv_line = next(ln for ln in lines if ln.startswith("conv1"))
    assert "W0 " in conv_line and "net:W0" in conv_line
    assert lines[-1] == "gradient check FAILED"


def test_nan_is_a_failure():
    net = small_net()
    net.layers["rnorm1"].params["pow"] = float("nan")
    lines = []
    assert not check_net_gradients(net, batch_size=2, report=lines.append)


def _example_layer_types_and_neurons():
    import configparser
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    cp.optionxform = str
    cp.read(EXAMPLES / "all-layers.cfg")
    types = {cp[s]["type"] for s in cp.sections()}
    neurons = {neuron(cp[s]["neuron"]).name for s in cp.sections() if "neuron" in cp[s]}
    pools = {cp[s]["pool"] for s in cp.sections() if cp[s]["type"] == "pool"}
    return types, neurons, pools


def test_example_uses_every_layer_type_and_neuron():
    types, neurons, pools = _example_layer_types_and_neurons()
    assert types == set(LAYER_TYPES)
    assert neurons == set(NEURONS)
    assert pools == {"max", "avg", "maxabs"}


def test_example_config_passes():
    config = pytest.importorskip("convnet.config", reason="the config parser is not available")
    if not hasattr(config, "load_net"):
        pytest.skip("convnet.config.load_net is not available yet")
    net = config.load_net(EXAMPLES / "all-layers.cfg", EXAMPLES / "all-layers-params.cfg",
                          data_dims={0: (3, 8, 8), 1: (1,)}, num_classes=4)
    lines = []
    ok = check_net_gradients(net, batch_size=4, seed=0, report=lines.append)
    assert ok, "\n".join(lines)
    assert len(lines) == 2 + sum(1 for l in net if not l.is_data)
    assert np.all([" OK " in ln for ln in lines[1:-1]])


def test_a_saved_run_is_checked_at_random_weights_and_says_so(tmp_path, capsys):
    """--check-grads --load-file RUN checks the saved config's net at random weights and
    data (--seed), as without it; it printed the same figures without saying that the
    checkpoint's weights played no part."""
    from tests.support.cli import DUMMY, SINGLE_DEF, SINGLE_PARAMS, run_main

    run = tmp_path / "run"
    code, _, err = run_main(capsys, "--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS,
                            *DUMMY, "--epochs", "1", "--save-path", run)
    assert code == 0, err
    code, out, err = run_main(capsys, "--load-file", run, "--check-grads")
    assert code == 0, err
    assert "gradient check passed" in out
    assert (f"warning: --check-grads checks the net of {run / 'checkpoint.npz'} at random "
            "weights and data (--seed 0), not at the weights it saved") in err
