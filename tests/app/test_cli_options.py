"""The command line's options: --help, the cuda-convnet2 option names, bad values and
combinations (one line on stderr, exit 2), checked in-process where nothing trains."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.cli import assert_clean_error, ok, run_cli
from convnet.app.command_line.main import main
from convnet.app.command_line.parser import build_parser
from convnet.app.option_values import DEFAULT_STALENESS

CUDA_CONVNET2_OPTIONS = ("--layer-def --layer-params --gpu --mini --epochs --data-provider --data-path "
                "--train-range --test-range --test-freq --save-path --load-file --test-only "
                "--check-grads --inner-size --color-noise --scalar-mean --multiview-test "
                "--logreg-name --write-features --feature-path --force-save "
                "--max-test-err").split()


def _all_options() -> list[str]:
    return [s for a in build_parser()._actions for s in a.option_strings if s.startswith("--")]


def call(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_help_explains_every_option():
    proc = ok(run_cli("--help"))
    text = proc.stdout
    assert "usage: convnet.py" in text
    for action in build_parser()._actions:
        assert action.help and len(action.help) > 10, action.option_strings
    for option in _all_options():
        assert re.search(rf"^\s+(-\w, )?{re.escape(option)}\b", text, re.M), f"{option} not in --help"
    for option in CUDA_CONVNET2_OPTIONS + ["--backend"]:
        assert option in _all_options()
    assert "exit status" in text


@pytest.mark.parametrize("argv", [
    ["--layer-def", "a.cfg", "--layer-params", "b.cfg"], ["--gpu", "3,2,1,0"], ["--mini", "512"],
    ["--epochs", "3"], ["--data-provider", "cifar"], ["--data-path", "/data"],
    ["--train-range", "1-5"], ["--test-range", "6"], ["--test-freq", "10"],
    ["--save-path", "out"], ["--load-file", "out"], ["--test-only", "1"], ["--test-only"],
    ["--check-grads", "1"], ["--check-grads"], ["--inner-size", "24"],
    ["--color-noise", "0.1"], ["--scalar-mean", "128"], ["--multiview-test", "1"],
    ["--logreg-name", "logprob"], ["--write-features", "fc10"], ["--feature-path", "f"],
    ["--force-save", "1"], ["--max-test-err", "0.3"], ["--backend", "cpu"],
    ["--print-plan"], ["--print-plan=json"], ["--test-freq=3", "--gpu=0", "--mini=32"],
    ["--sync", "sync"], ["--sync", "local:4"], ["--sync", "async"], ["--sync", "async:0"],
])
def test_spec_options_are_accepted(argv):
    build_parser().parse_args(argv)


def test_the_originals_f_is_load_file():
    args = build_parser().parse_args(["-f", "runs/a", "--epochs", "3"])
    assert str(args.load_file) == "runs/a" and args.epochs == 3


@pytest.mark.parametrize("argv, fragments", [
    (["--save-file", "runs/b"], ["cuda-convnet2's --save-file named the checkpoint folder to "
                                 "save to", "use --save-path DIR"]),
    (["--test-one=1"], ["cuda-convnet2's --test-one tested on one test batch at a time",
                        "give a --test-range of one batch"]),
])
def test_the_originals_retired_flags_say_what_to_use_here(capsys, argv, fragments):
    code, err = call(capsys, *argv)
    assert_clean_error((code, err), 2, *fragments)
    assert "did you mean" not in err


def test_cuda_convnet2_flag_values():
    args = build_parser().parse_args(["--test-only=1", "--force-save=0", "--multiview-test",
                                      "true"])
    assert args.test_only is True and args.force_save is False and args.multiview_test is True


@pytest.mark.parametrize("argv, fragment", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--epoch", "3"], "did you mean '--epochs'"),
    (["--mini", "0"], "--mini: expected a positive integer"),
    (["--mini", "many"], "--mini"),
    (["--epochs", "-1"], "--epochs"),
    (["--test-freq", "0"], "--test-freq"),
    (["--gpu", "a"], "--gpu"),
    (["--gpu", "0,-1"], "--gpu"),
    (["--inner-size", "-2"], "--inner-size"),
    (["--color-noise", "-0.5"], "--color-noise"),
    (["--color-noise", "nan"], "--color-noise"),
    (["--scalar-mean", "inf"], "--scalar-mean"),
    (["--max-test-err", "5"], "0.05 means 5%"),
    (["--train-range", "5-1"], "runs backwards"),
    (["--test-range", "x"], "--test-range"),
    (["--data-provider", "digts"], "did you mean 'digits'"),
    (["--data-dims", "3x"], "--data-dims"),
    (["--num-classes", "0"], "--num-classes"),
    (["--seed", "-1"], "--seed"),
    (["--backend", "gpu"], "--backend"),
    (["--print-plan=xml"], "--print-plan"),
    (["--test-only", "maybe"], "--test-only"),
    (["--mini"], "expected one argument"),
    (["--gpu", "-1,0"], "one that begins with '-' is written --gpu=VALUE"),
    (["--gpu=-1,0"], "device numbers are >= 0, got '-1,0'"),
    (["--sync", "local:0"], "--sync: expected sync, local:K"),
    (["--sync", "local:"], "--sync"),
    (["--sync", "local:x"], "--sync"),
    (["--sync", "async:-1"], "async[:S] with S a staleness bound >= 0"),
    (["--sync", "async:x"], "--sync"),
    (["--sync", "asynch"], "--sync"),
    (["--slow-device", "1"], "--slow-device: expected D:F"),
    (["--slow-device", "1:0.5"], "--slow-device"),
    (["--slow-device", "1:nan"], "--slow-device"),
    (["--slow-device", "x:2"], "--slow-device"),
    (["--slow-device", "any"], "--slow-device: expected D:F or any:F"),
])
def test_bad_values_exit_2_with_one_line(capsys, argv, fragment):
    assert_clean_error(call(capsys, *argv), 2, fragment, "(see --help)")


@pytest.mark.parametrize("argv, fragment", [
    (["--test-only"], "--test-only evaluates a saved net"),
    (["--feature-path", "f"], "--feature-path"),
    (["--multiview-test"], "--inner-size"),
    (["--print-plan", "--check-grads"], "cannot be combined"),
    (["--layer-def", "examples/digits-single.cfg"], "--layer-params"),
    (["--data-path", "/tmp"], "--data-provider"),
    (["--data-provider", "cifar"], "needs --data-path"),
    (["--data-provider", "digits", "--data-path", "/tmp"], "reads no files"),
    (["--slow-device", "2:3"], "--slow-device 2:3: --gpu lists 2 device(s)"),
    (["--sync", "async", "--profile"], "--profile times the operations of lockstep steps"),
])
def test_options_that_do_not_go_together_exit_2(capsys, argv, fragment):
    assert_clean_error(call(capsys, *argv), 2, fragment)


def test_print_plan_says_what_local_sgd_changes(capsys):
    assert main(["--print-plan", "--sync", "local:4"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Sync:")]
    assert len(lines) == 1
    assert "average their weights every 4 step(s)" in lines[0]
    assert "not bitwise reproducible against --sync sync" in lines[0]
    assert main(["--print-plan"]) == 0
    assert "Sync:" not in capsys.readouterr().out


PER_LAYER = ["--layer-def", "examples/digits-data.cfg", "--layer-params",
             "examples/digits-local-fc-params.cfg", "--gpu", "0,1"]


def test_print_plan_shows_each_replicated_layers_sync_key_and_the_all_reduces(capsys):
    """The example keeps the convolutions synchronous and averages the three fc layers
    every 8 steps: 2 + 3/8 all-reduces per minibatch instead of 5."""
    assert main(["--print-plan", *PER_LAYER]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Sync:")]
    assert len(lines) == 1
    assert ("per layer (its sync= key, else --sync sync): conv1 sync, conv2 sync, fca local:8, "
            "fcb local:8, fc10 local:8" in lines[0])
    assert "All-reduces per minibatch (of gradients, or of weights when averaging): 2.38 " \
           "(5 under --sync sync)." in lines[0]
    assert main(["--print-plan=json", *PER_LAYER, "--sync", "local:2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["layer_sync"] == {"conv1": "local:2", "conv2": "local:2", "fca": "local:8",
                                     "fcb": "local:8", "fc10": "local:8"}
    assert "All-reduces per minibatch (of gradients, or of weights when averaging): 1.38 " \
           in summary["sync_note"]


def test_simulate_predicts_the_keyed_net_synchronous(capsys):
    """--simulate profiles synchronous steps: the sync= keys are left out of its profile."""
    assert main(["--print-plan", "--simulate", *PER_LAYER]) == 0
    assert "predicted step" in capsys.readouterr().out


def test_print_plan_says_a_sync_key_without_replicas_changes_nothing(capsys):
    one_device = ["--layer-def", "examples/digits-single.cfg"] + PER_LAYER[2:4]
    assert main(["--print-plan", *one_device]) == 0
    assert ("Sync: the sync= keys change nothing here: no layer with weights is replicated."
            in capsys.readouterr().out.splitlines())


def test_layer_sync_keys_are_refused_under_async(capsys):
    assert_clean_error(call(capsys, "--print-plan", *PER_LAYER, "--sync", "async:2"), 2,
                       "--sync async:2 runs the replicas of the whole net apart",
                       "sync= for fca, fcb, fc10")


def test_spellings_of_sync_modes():
    parse = build_parser().parse_args
    assert parse(["--sync", "async"]).sync == [f"async:{DEFAULT_STALENESS}"]
    assert parse(["--sync", " ASYNC:02 "]).sync == ["async:2"]
    assert parse(["--sync", "Local:3", "sync"]).sync == ["local:3", "sync"]  # --compare
    assert parse(["--slow-device", "1:2.5"]).slow_device == (1, 2.5)
    assert parse(["--slow-device", " Any:3"]).slow_device == (None, 3.0)  # moves


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_print_plan_says_async_is_not_bitwise_reproducible(capsys, fmt):
    data_net = ["--layer-def", "examples/digits-data.cfg", "--layer-params",
                "examples/digits-params.cfg", "--gpu", "0,1", "--sync", "async:2"]
    assert main([f"--print-plan={fmt}", *data_net]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        summary = json.loads(out)
        assert summary["sync"] == "async:2"
        assert "NOT bitwise reproducible" in summary["sync_note"]
    else:
        lines = [line for line in out.splitlines() if line.startswith("Sync:")]
        assert len(lines) == 1 and "NOT bitwise reproducible" in lines[0]
        assert "at most 2 step(s) ahead of the slowest" in lines[0]
    assert main(["--print-plan", "--sync", "async"]) == 0  # the hybrid bundled example
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("Sync:"))
    assert "in a hybrid plan: the steps stay lockstep" in line
    assert "at most 4 step(s) late" in line and "NOT bitwise reproducible" in line
    assert main(["--print-plan", "--sync", "async:0"]) == 0  # fixed order: reproducible
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("Sync:"))
    assert "NOT" not in line and "runs are bitwise reproducible and equal sync's" in line


def test_unknown_option_from_the_real_command():
    proc = run_cli("--no-such-option", "1")
    assert_clean_error(proc, 2, "--no-such-option")
    assert proc.stdout == ""


@pytest.mark.parametrize("tool", [["--check-grads"], ["--auto-place", "2"], ["--test-only"]])
def test_the_plan_graph_does_not_stand_in_for_another_tool(capsys, tmp_path, tool):
    """--plan-graph alone plans and draws; with --check-grads or --auto-place it once drew
    the graph and skipped the tool asked for, with exit 0."""
    png = tmp_path / "graph.png"
    assert_clean_error(call(capsys, *tool, "--plan-graph", png), 2,
                       f"--plan-graph and {tool[0]} cannot be combined")
    assert not png.exists()
