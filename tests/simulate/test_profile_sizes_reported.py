"""The two minibatch sizes a --simulate profile times, as the report states them: the
text, the JSON and the progress lines name the sizes really profiled, and a profile
that could time only one size is refused before it starts."""

from __future__ import annotations

import json

import pytest

from convnet.app import launch
from tests.support.cli import EXAMPLES, assert_clean_error, run_main

REFERENCE = EXAMPLES / "cuda-convnet2"
SINGLE = ["--layer-def", EXAMPLES / "digits-single.cfg",
          "--layer-params", EXAMPLES / "digits-params.cfg"]


def test_an_odd_minibatch_is_reported_at_the_sizes_it_was_profiled_at(capsys):
    """--mini 3 profiles 3 cases and 1 (half, rounded down): the text once said 1.5."""
    code, out, err = run_main(capsys, *SINGLE, "--mini", "3", "--print-plan", "--simulate")
    assert code == 0, err
    assert "profiling at 3 and 1 cases" in err
    assert "each operation timed at 1 and 3 cases per shard" in out
    code, out, err = run_main(capsys, *SINGLE, "--mini", "3", "--print-plan=json",
                              "--simulate")
    assert code == 0, err
    simulation = json.loads(out)["simulation"]
    assert (simulation["profile_small_shard_size"], simulation["profile_shard_size"]) == (1, 3)


def test_a_profile_of_one_case_cannot_be_extrapolated_to_a_larger_minibatch(capsys):
    """At --profile-mini 1 both profiled sizes are 1 case: no line through them, and every
    operation would be read as a fixed cost, the step at --mini 64 as the step of one case."""
    code, _, err = run_main(capsys, *SINGLE, "--mini", "64", "--profile-mini", "1",
                            "--print-plan", "--simulate")
    assert_clean_error((code, err), 2, "--profile-mini 1", "--profile-mini 2 or more")
    assert "profiling" not in err


@pytest.mark.parametrize("option, rest", [("--simulate", ["--print-plan"]),
                                          ("--auto-place", ["2", "--gpu", "0,1"])])
def test_a_profile_under_mpiexec_is_refused_before_anything_is_profiled(
        capsys, monkeypatch, tmp_path, option, rest):
    """Under mpiexec the refusal came after the profile had said it was starting (and,
    for --auto-place, after every candidate was planned)."""
    monkeypatch.setattr(launch, "process_count", lambda: 2)
    monkeypatch.chdir(tmp_path)  # where --auto-place would write its file
    code, out, err = run_main(capsys, *SINGLE, option, *rest)
    assert_clean_error((code, err), 2, f"{option} runs in one process; start it without "
                                       "mpiexec")
    assert out == "" and "profiling" not in err
    assert not list(tmp_path.iterdir())


def test_a_pipelined_plan_is_predicted_at_the_size_of_a_micro_batch(capsys):
    """With --micro-batches 4 each operation runs on a quarter of the shard, and the text
    said the line gave it at the whole shard's 32 cases."""
    code, out, err = run_main(capsys, "--layer-def", EXAMPLES / "digits-pipeline.cfg",
                              "--layer-params", EXAMPLES / "digits-params.cfg", "--gpu", "0,1",
                              "--mini", "32", "--micro-batches", "4", "--print-plan",
                              "--simulate")
    assert code == 0, err
    assert "a line through the two sizes gives it at 8 cases (one micro-batch) [fitted]" in out


def test_the_predicted_peak_memory_is_the_plans_own_peak(capsys):
    """Under --sync local:4 each replica keeps its own weights, and under bf16 the step
    holds 2-byte activations: the plan's totals said so, while the simulation's peak
    column beside them gave the --sync sync, float32 figures."""
    code, out, err = run_main(capsys, "--layer-def", EXAMPLES / "digits-data.cfg",
                              "--layer-params", EXAMPLES / "digits-params.cfg", "--gpu", "0,1",
                              "--mini", "16", "--sync", "local:4", "--precision", "bf16",
                              "--print-plan=json", "--simulate")
    assert code == 0, err
    plan = json.loads(out)
    peaks = [device["peak_bytes"] for device in plan["totals"]]
    assert peaks[0] == peaks[1]  # each replica its own weights and momentum
    assert [device["peak_memory_bytes"] for device in plan["simulation"]["devices"]] == peaks
    assert plan["simulation"]["not_modelled"].startswith("not modelled: local:4 (conv1, ")


def test_a_prediction_under_local_sgd_says_it_is_of_the_synchronous_step(capsys):
    """The simulator models --sync sync only (--compare prints n/a for the others), and
    --print-plan --simulate --sync local:4 printed a step with an all-reduce every step,
    all-reduce time and all, without saying so."""
    code, out, err = run_main(capsys, "--layer-def", EXAMPLES / "digits-data.cfg",
                              "--layer-params", EXAMPLES / "digits-params.cfg", "--gpu", "0,1",
                              "--mini", "16", "--sync", "local:4", "--print-plan", "--simulate")
    assert code == 0, err
    block = out.split("Simulation (one training step)\n", 1)[1]
    assert ("  not modelled: local:4 (conv1, conv2, fca, fcb, fc10); the step is "
            "predicted as under --sync sync, every replicated layer all-reduced every step"
            in block.splitlines())


def test_a_net_profiled_as_placed_needs_a_half_minibatch_of_a_case_per_shard(capsys):
    """The 4-GPU data-model net runs only as placed (its pass layers need distinct
    devices), so it is profiled in 4 shards, at --mini and half of it: at --mini 4 the half,
    2 cases, could not be cut into 4 shards, and the command ended with an error about a
    minibatch of 2 cases that the user never gave."""
    name = "imagenet-4gpu-data-model"
    code, _, err = run_main(capsys, "--layer-def", REFERENCE / f"layers-{name}.cfg",
                            "--layer-params", REFERENCE / f"layer-params-{name}.cfg",
                            "--data-dims", "3x52x52", "--num-classes", "1000", "--mini", "4",
                            "--print-plan", "--simulate")
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1] == (
        "error: --simulate profiles this net as it is placed (it cannot run on one device), "
        "in 4 shards, at 4 cases and half of it, 2, which has fewer cases than shards: give "
        "--mini 8 or more")


def test_a_profile_without_its_data_is_refused_before_it_starts(capsys):
    """--data-dims lets --print-plan plan without the data, but the profile of --simulate
    trains on it: the refusal came from the profile, after it had said it was starting."""
    code, _, err = run_main(capsys, *SINGLE, "--data-provider", "cifar", "--data-dims",
                            "1x8x8", "--num-classes", "10", "--print-plan", "--simulate")
    assert_clean_error((code, err), 2, "the 'cifar' data provider needs --data-path DIR")
    assert "profiling" not in err
