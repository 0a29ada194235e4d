"""``--micro-batches M`` and ``--pipeline-schedule`` end to end (docs/PIPELINE.md): saved
in the checkpoint, resumed with the same or another M or schedule, the sequential walk
bitwise, the refusals one line each."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.cli import (DUMMY, SINGLE_DEF, SINGLE_PARAMS, assert_clean_error,
                               assert_same_arrays, checkpoint_arrays, ok, run_cli)
from tests.support.pipeline import split_layer_def


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """The digits net in two stages: convolutions on device 0, fc layers on device 1."""
    folder = tmp_path_factory.mktemp("split")
    layer_def = split_layer_def(SINGLE_DEF, ["fca"], folder / "split.cfg")
    return ["--layer-def", layer_def, "--layer-params", SINGLE_PARAMS, "--gpu", "0,1"]


@pytest.fixture(scope="module")
def pipelined_run(split, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipelined") / "run"
    ok(run_cli(*DUMMY, *split, "--micro-batches", "4", "--epochs", "2", "--save-path", folder))
    return folder


def test_the_checkpoint_keeps_m_and_the_sequential_walk_is_bitwise(split, pipelined_run,
                                                                    tmp_path):
    arrays, meta = checkpoint_arrays(pipelined_run / "checkpoint.npz")
    assert meta["options"]["micro_batches"] == 4
    ok(run_cli(*DUMMY, *split, "--micro-batches", "4", "--epochs", "2", "--sequential",
               "--save-path", tmp_path / "walked"))
    assert_same_arrays(arrays, checkpoint_arrays(tmp_path / "walked" / "checkpoint.npz")[0])


def test_resume_keeps_m_or_takes_another(split, pipelined_run, tmp_path):
    """One epoch with M = 4; resumed, the saved M is the plan's, and the second epoch
    with M = 2 trains the same net up to float summation order."""
    first = tmp_path / "first"
    ok(run_cli(*DUMMY, *split, "--micro-batches", "4", "--epochs", "1", "--save-path", first))
    planned = ok(run_cli("--load-file", first, "--print-plan")).stdout
    assert "Pipeline: 4 micro-batch(es) per shard" in planned
    ok(run_cli("--no-progress", "--load-file", first, "--epochs", "2", "--micro-batches", "2",
               "--save-path", tmp_path / "other"))
    whole, _ = checkpoint_arrays(pipelined_run / "checkpoint.npz")
    other, meta = checkpoint_arrays(tmp_path / "other" / "checkpoint.npz")
    assert meta["options"]["micro_batches"] == 2
    weights = [k for k in whole if k.startswith("weights/")]
    assert any(not np.array_equal(other[k], whole[k]) for k in weights)  # other sums
    for key in weights:
        np.testing.assert_allclose(other[key], whole[key], rtol=1e-3, atol=1e-5, err_msg=key)


def test_the_checkpoint_keeps_the_schedule_and_a_resume_may_change_it(split, pipelined_run,
                                                                     tmp_path):
    """One epoch under fill-drain, resumed under 1F1B (the default the run of
    ``pipelined_run`` took for both epochs): bitwise the same weights."""
    assert checkpoint_arrays(pipelined_run / "checkpoint.npz")[1]["options"][
        "pipeline_schedule"] == "1f1b"
    first = tmp_path / "first"
    ok(run_cli(*DUMMY, *split, "--micro-batches", "4", "--pipeline-schedule", "fill-drain",
               "--epochs", "1", "--save-path", first))
    assert checkpoint_arrays(first / "checkpoint.npz")[1]["options"][
        "pipeline_schedule"] == "fill-drain"
    assert "fill-drain schedule" in ok(run_cli("--load-file", first, "--print-plan")).stdout
    ok(run_cli("--no-progress", "--load-file", first, "--epochs", "2", "--pipeline-schedule",
               "1f1b", "--save-path", tmp_path / "other"))
    other, meta = checkpoint_arrays(tmp_path / "other" / "checkpoint.npz")
    assert meta["options"]["pipeline_schedule"] == "1f1b"
    whole, _ = checkpoint_arrays(pipelined_run / "checkpoint.npz")
    assert_same_arrays({k: v for k, v in whole.items() if k.startswith("weights/")},
                       {k: v for k, v in other.items() if k.startswith("weights/")})


def test_an_unknown_schedule_is_refused(split):
    proc = run_cli(*DUMMY, *split, "--micro-batches", "2", "--pipeline-schedule", "gpipe")
    assert_clean_error(proc, 2, "--pipeline-schedule", "gpipe")


def test_async_with_micro_batches_is_refused(split):
    proc = run_cli(*DUMMY, *split, "--micro-batches", "2", "--sync", "async")
    assert_clean_error(proc, 2, "--micro-batches 2 pipelines lockstep steps", "--sync async:4")


def test_more_micro_batches_than_a_shard_has_cases_is_refused(split):
    proc = run_cli(*DUMMY, *split, "--mini", "8", "--micro-batches", "9", "--print-plan")
    assert_clean_error(proc, 2, "--micro-batches 9 must be between 1 and the 8 case(s)")
