"""--precision on the command line: planned, refused where meaningless, saved and resumed;
and --profile's count of host waits."""

from __future__ import annotations

import json

import pytest

from convnet.app.checkpoint import load_checkpoint

from tests.support.cli import DUMMY, SINGLE_DEF, SINGLE_PARAMS, assert_clean_error, run_main

pytest.importorskip("ml_dtypes")
NET = ["--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS, "--backend", "cpu"]


def test_print_plan_names_the_precision(capsys):
    code, out, _ = run_main(capsys, *NET, *DUMMY, "--print-plan", "--precision", "fp16")
    assert code == 0
    assert "Precision: fp16: layers in float16 (softmax and costs in float32), float32 " \
           "master weights and updates, dynamic loss scaling" in out
    code, out, _ = run_main(capsys, *NET, *DUMMY, "--print-plan", "json")
    assert code == 0 and json.loads(out)["precision"] == "fp32"


def test_the_16_bit_estimate_holds_less_than_float32(capsys):
    peaks = {}
    for precision in ("fp32", "bf16", "fp16"):
        code, out, _ = run_main(capsys, *NET, *DUMMY, "--print-plan", "json",
                                "--precision", precision)
        assert code == 0
        peaks[precision] = json.loads(out)["totals"][0]
    assert peaks["bf16"]["activation_bytes"] < peaks["fp32"]["activation_bytes"]
    # fp16 also keeps a copy of the weights and momentum to undo an overflowing step
    assert peaks["fp16"]["peak_bytes"] > peaks["bf16"]["peak_bytes"]


@pytest.mark.parametrize("args,fragments", [
    (["--precision", "tf32"], ("--precision tf32", "the cpu backend computes float32")),
    (["--precision", "fp16", "--sync", "local:2"],
     ("--precision fp16 skips the steps whose gradients overflow", "--sync local:2")),
])
def test_meaningless_combinations_are_refused(capsys, args, fragments):
    assert_clean_error(run_main(capsys, *NET, *DUMMY, "--epochs", "1", *args)[::2], 2,
                       *fragments)


def test_fp16_is_saved_with_its_loss_scale_and_resumed(capsys, tmp_path):
    save = tmp_path / "run"
    code, out, err = run_main(capsys, *NET, *DUMMY, "--epochs", "1", "--precision", "fp16",
                              "--dummy-cases", "128", "--train-range", "1", "--save-path", save)
    assert code == 0, err
    _, meta = load_checkpoint(save / "checkpoint.npz")
    assert meta["options"]["precision"] == "fp16"
    scale = meta["loss_scale"]
    assert scale["scale"] <= 2.0 ** 16 and scale["good_steps"] >= 0
    code, out, err = run_main(capsys, "--load-file", save, "--epochs", "2", "--print-plan")
    assert code == 0 and "Precision: fp16" in out  # the saved mode, unless given again


def test_profile_counts_one_host_wait_per_step_and_device(capsys):
    code, out, err = run_main(capsys, *NET, *DUMMY, "--epochs", "1", "--profile")
    assert code == 0, err
    assert "host waits per step: 1 (" in out
