"""Starting from another run (--init-from), frozen layers, and the class-count warning.

One base run (the digits net, data-parallel on two logical devices, one epoch) serves
every test; the fine-tuned nets run on one device with a narrower fcb, so that fcb and
fc10 (which reads it) differ in shape while conv1, conv2 and fca fit.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from convnet.app.command_line.main import main
from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.run.assembly import build_net_and_plan, make_data_provider, make_executor
from convnet.app.run.training import Trainer
from convnet.config import load_net
from convnet.errors import OneLineWarning
from convnet.plan import make_plan
from tests.support.cli import EXAMPLES, SINGLE_DEF, SINGLE_PARAMS, run_main

RATES = "epsW=0.05\nepsB=0.1\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The digits net trained one epoch on two logical devices (data-parallel)."""
    folder = tmp_path_factory.mktemp("base")
    assert main(["--no-progress", "--layer-def", str(EXAMPLES / "digits-data.cfg"),
                 "--layer-params", str(SINGLE_PARAMS), "--gpu", "0,0", "--epochs", "1",
                 "--mini", "64", "--save-path", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def head_net(tmp_path_factory):
    """(layer-def, layer-params) of the one-device digits net with fcb 32 wide, and a
    params file whose conv1 is frozen and whose conv2 learns only its biases."""
    folder = tmp_path_factory.mktemp("head")
    text = SINGLE_DEF.read_text()
    start = text.index("[fcb]")
    layers = text[:start] + text[start:].replace("outputs=64", "outputs=32", 1)
    frozen = SINGLE_PARAMS.read_text()
    frozen = _set_rates(frozen, "conv1", "epsW=0\nepsB=0\n")
    frozen = _set_rates(frozen, "conv2", "epsW=0\nepsB=0.1\n")
    (folder / "head.cfg").write_text(layers)
    (folder / "frozen-params.cfg").write_text(frozen)
    return folder / "head.cfg", folder / "frozen-params.cfg"


def _set_rates(params: str, layer: str, rates: str) -> str:
    start = params.index(f"[{layer}]\n") + len(f"[{layer}]\n")
    assert params[start:].startswith(RATES)
    return params[:start] + rates + params[start + len(RATES):]


def _trainer(*argv):
    opts = resolve_options(build_parser().parse_args([str(a) for a in argv]))
    provider = make_data_provider(opts)
    net, plan = build_net_and_plan(opts, provider)
    return opts, Trainer(opts, provider, net, plan, make_executor(opts, net, plan),
                         announce=False)


def _saved(folder):
    with np.load(folder / "checkpoint.npz") as arrays:
        return {k: arrays[k] for k in arrays.files if "/" in k}


def test_init_from_loads_what_fits_and_starts_the_rest_from_init(base, head_net, capsys):
    layer_def, params = head_net
    args = ["--no-progress", "--layer-def", layer_def, "--layer-params", params]
    opts, tuned = _trainer(*args, "--init-from", base)
    _, fresh = _trainer(*args)
    try:
        tuned.start_from(opts.init_from)
        table = capsys.readouterr().out
        got, init = tuned.executor.state_arrays(), fresh.executor.state_arrays()
    finally:
        tuned.executor.close()
        fresh.executor.close()
    assert "3 layer(s) loaded, 0 new, 2 with other shapes" in table
    assert re.search(r"loaded +conv1, conv2, fca\n", table)
    assert "fcb: W0 (512, 64) saved, (512, 32) here; b (64,) saved, (32,) here" in table
    assert "fc10: W1 (64, 10) saved, (32, 10) here" in table
    saved = _saved(base)
    for key in got:
        group, layer, _ = key.split("/")
        if group == "weights" and layer in ("conv1", "conv2", "fca"):
            np.testing.assert_array_equal(got[key], saved[key])
        else:  # new layers, and every momentum, as a fresh run starts them
            np.testing.assert_array_equal(got[key], init[key])
    assert not any(np.any(v) for k, v in got.items() if k.startswith("momentum/"))


def test_frozen_layers_stay_bitwise_after_init_from_and_after_a_resume(base, head_net,
                                                                       tmp_path, capsys):
    layer_def, params = head_net
    tuned = tmp_path / "tuned"
    code, out, _ = run_main(capsys, "--no-progress", "--layer-def", layer_def,
                            "--layer-params", params, "--init-from", base, "--epochs", "1",
                            "--save-path", tuned)
    assert code == 0 and "epoch   1" in out
    before, after = _saved(base), _saved(tuned)
    for key in ("weights/conv1/W0", "weights/conv1/b", "weights/conv2/W0"):
        np.testing.assert_array_equal(after[key], before[key])
    assert not np.array_equal(after["weights/conv2/b"], before["weights/conv2/b"])
    # The base run's momentum would move the frozen arrays on a resume; it must not.
    code, _, _ = run_main(capsys, "--no-progress", "--load-file", base, "--layer-def",
                          EXAMPLES / "digits-data.cfg", "--layer-params", params,
                          "--epochs", "2", "--save-path", tmp_path / "resumed")
    assert code == 0
    resumed = _saved(tmp_path / "resumed")
    assert np.any(before["momentum/conv1/W0"])
    for key in ("weights/conv1/W0", "weights/conv1/b", "weights/conv2/W0"):
        np.testing.assert_array_equal(resumed[key], before[key])
    assert not np.any(resumed["momentum/conv2/W0"])


def test_frozen_layers_have_no_update_and_no_backward_below_what_learns(head_net):
    layer_def, params = head_net
    net = load_net(layer_def, params, {0: (1, 8, 8), 1: (1,)}, 10)
    plan = make_plan(net, (0,), 32)
    kinds = {(op.kind, op.layer) for op in plan.ops}
    assert ("backward", "conv1") not in kinds and ("update", "conv1") not in kinds
    assert ("backward", "conv2") in kinds and ("update", "conv2") in kinds
    assert plan.layers["conv1"].frozen and not plan.layers["conv2"].frozen
    assert plan.layers["conv2"].input_grads == (False,)  # conv1 below learns nothing


def test_print_plan_marks_frozen_layers(head_net, capsys):
    layer_def, params = head_net
    frozen = params.read_text().replace("epsB=0.1", "epsB=0", 1)  # conv2 frozen whole
    params.with_name("all-frozen.cfg").write_text(frozen)
    code, out, _ = run_main(capsys, "--layer-def", layer_def, "--layer-params",
                            params.with_name("all-frozen.cfg"), "--print-plan",
                            "--data-dims", "1x8x8", "--num-classes", "10")
    assert code == 0
    assert re.search(r"^conv1 .*frozen \(rates 0\)", out, re.M)
    assert ("frozen (epsW and epsB 0): conv1, conv2: no update and no weight gradients; "
            "no backward pass at all for conv1, conv2") in out


def test_load_file_refusal_points_to_init_from(base, head_net, capsys):
    layer_def, params = head_net
    code, _, err = run_main(capsys, "--no-progress", "--load-file", base, "--layer-def",
                            layer_def, "--layer-params", params, "--epochs", "2",
                            "--save-path", base.parent / "refused")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "'weights/fcb/W0' has shape (512, 64), the net needs (512, 32)" in err
    assert "give --init-from instead of --load-file" in err
    assert not (base.parent / "refused").exists()


def test_load_file_on_other_data_points_to_init_from(base, head_net, capsys):
    """New data with fewer training batches than the saved run's: the checkpoint's place
    in its epoch lies beyond them, which is no damage but a run to start anew."""
    layer_def, params = head_net
    code, _, err = run_main(capsys, "--no-progress", "--load-file", base, "--layer-def",
                            layer_def, "--layer-params", params, "--train-range", "1-2",
                            "--epochs", "2")
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "was saved with other data or another --train-range" in err
    assert "give --init-from instead of --load-file" in err


@pytest.mark.parametrize("case", ["both", "not-a-checkpoint", "nothing-fits", "with-predict"])
def test_init_from_bad_input_is_one_line(base, tmp_path, capsys, case):
    args = ["--no-progress", "--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS,
            "--save-path", tmp_path / "run"]
    if case == "both":
        args += ["--init-from", base, "--load-file", base]
    elif case == "not-a-checkpoint":
        (tmp_path / "weights.npz").write_bytes(b"PK\x03\x04 not really")
        args += ["--init-from", tmp_path / "weights.npz"]
    elif case == "nothing-fits":
        for source, index in ((SINGLE_DEF, 2), (SINGLE_PARAMS, 4)):
            text = source.read_text()
            for name in ("conv1", "conv2", "fca", "fcb", "fc10"):
                text = text.replace(f"[{name}]", f"[{name}x]").replace(f"={name}\n",
                                                                        f"={name}x\n")
            args[index] = tmp_path / source.name
            args[index].write_text(text.replace("inputs=fca,fcb", "inputs=fcax,fcbx"))
        args += ["--init-from", base, "--data-provider", "dummy", "--data-dims", "1x8x8",
                 "--num-classes", "10"]
    else:
        args += ["--init-from", base, "--predict", SINGLE_DEF]
    code, out, err = run_main(capsys, *args)
    assert code in (1, 2) and len(err.strip().splitlines()) == 1, err
    assert "--init-from" in err or "checkpoint" in err
    assert not (tmp_path / "run").exists()


def test_a_classifier_wider_than_the_classes_is_warned_about(capsys):
    with pytest.warns(OneLineWarning) as caught:
        code, _, _ = run_main(capsys, "--layer-def", SINGLE_DEF, "--layer-params",
                              SINGLE_PARAMS, "--print-plan", "--data-dims", "1x8x8",
                              "--num-classes", "4")
    assert code == 0
    lines = [str(w.message) for w in caught if "classifier" in str(w.message)]
    assert len(lines) == 1
    assert lines[0].startswith("the classifier 'fc10' has 10 outputs but --num-classes says "
                               "4 classes; give 'fc10' outputs=4")


def test_a_saved_layer_whose_name_here_has_no_weights_is_listed_as_not_in_this_net(
        base, tmp_path, capsys):
    """The saved ``fca`` (an fc layer) meets a pooling layer named ``fca``: its weights
    have no place here, which the table says, as for a name the net does not have."""
    layers = SINGLE_DEF.read_text().replace("fca", "fcx").replace("pool1", "fca")
    (tmp_path / "renamed.cfg").write_text(layers)
    (tmp_path / "params.cfg").write_text(SINGLE_PARAMS.read_text().replace("fca", "fcx"))
    opts, tuned = _trainer("--no-progress", "--layer-def", tmp_path / "renamed.cfg",
                           "--layer-params", tmp_path / "params.cfg", "--init-from", base)
    try:
        tuned.start_from(opts.init_from)
    finally:
        tuned.executor.close()
    table = capsys.readouterr().out
    assert re.search(r"new +fcx\n", table)
    assert re.search(r"not in this net +fca\n", table), table
