"""The command line under mpiexec: the digits examples, resuming, errors and a killed rank."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from convnet.app.checkpoint import load_checkpoint
from tests.support import ROOT
from tests.support.mpi import (env, mpiexec, needs_mpi, rank_pid, rank_pids, run_alone,
                               run_mpi)

pytestmark = needs_mpi

CLI = str(ROOT / "convnet.py")
EXAMPLES = ROOT / "examples"


def _arrays(folder: Path) -> dict:
    arrays, _ = load_checkpoint(folder / "checkpoint.npz")
    return arrays


def _assert_same_state(a: Path, b: Path) -> None:
    got, want = _arrays(a), _arrays(b)
    assert sorted(got) == sorted(want)
    for key in want:
        assert np.array_equal(got[key], want[key]), key


def _digits(config: str) -> list[str]:
    params = "digits-hybrid-params.cfg" if config == "digits-hybrid.cfg" else "digits-params.cfg"
    return ["--layer-def", str(EXAMPLES / config), "--layer-params", str(EXAMPLES / params),
            "--no-progress"]


@pytest.mark.parametrize("config", ["digits-data.cfg", "digits-model.cfg", "digits-hybrid.cfg"])
def test_two_processes_save_what_one_process_saves(tmp_path, config):
    args = [CLI, *_digits(config), "--epochs", "1"]
    done = run_mpi(2, args + ["--gpu", "0", "--save-path", "A"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    alone = run_alone(args + ["--gpu", "0,1", "--save-path", "B"], cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    _assert_same_state(tmp_path / "A", tmp_path / "B")
    assert done.stdout.count("test cost") == alone.stdout.count("test cost") == 1
    assert done.stderr == ""  # one log, from rank 0; nothing from the others
    # the banner names each logical device's process and host, as --print-plan does
    assert re.search(r"0 -> rank 0 on \S+: (CPU worker|GPU) 0, 1 -> rank 1 on \S+: (CPU worker|GPU) 0",
                     done.stdout), done.stdout


def test_resume_with_another_process_count(tmp_path):
    args = [CLI, *_digits("digits-hybrid.cfg")]
    first = run_mpi(2, args + ["--gpu", "0", "--epochs", "1", "--save-path", "A"], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    # the printed command keeps the process count the saved (per-process) --gpu list needs
    assert "to train further: mpiexec -n 2 python " in first.stdout
    resumed = run_alone([CLI, "--load-file", "A", "--gpu", "0,1", "--epochs", "2",
                         "--no-progress"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    whole = run_alone(args + ["--gpu", "0,1", "--epochs", "2", "--save-path", "B"],
                      cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    _assert_same_state(tmp_path / "A", tmp_path / "B")


def test_local_sgd_in_two_processes_saves_what_one_process_saves(tmp_path):
    args = [CLI, *_digits("digits-hybrid.cfg"), "--epochs", "1", "--sync", "local:2"]
    done = run_mpi(2, args + ["--gpu", "0", "--save-path", "A"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    alone = run_alone(args + ["--gpu", "0,1", "--save-path", "B"], cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    _assert_same_state(tmp_path / "A", tmp_path / "B")


def test_async_in_two_processes_trains_saves_and_resumes_in_one(tmp_path):
    args = [CLI, *_digits("digits-data.cfg"), "--sync", "async:2", "--slow-device", "1:2"]
    done = run_mpi(2, args + ["--gpu", "0", "--epochs", "2", "--save-path", "A",
                              "--write-features", "probs"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    errors = [float(e) for e in re.findall(r"test cost [0-9.]+ error +([0-9.]+)%", done.stdout)]
    assert len(errors) == 2 and errors[-1] < 30  # it learns (chance: 90%)
    features = np.load(tmp_path / "A" / "features-probs" / "data_batch_6.npz")
    assert features["data"].shape[1] == 10
    np.testing.assert_allclose(features["data"].sum(axis=1), 1, rtol=1e-5)
    _, meta = load_checkpoint(tmp_path / "A" / "checkpoint.npz")
    assert meta["options"]["sync"] == "async:2" and meta["counters"]["epoch"] == 2
    # rank 0's replica, with the update of every shard of both ranks: test-only on one
    # process gives the test error the run printed last
    alone = run_alone([CLI, "--load-file", "A", "--gpu", "0,1", "--test-only"], cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert f"({errors[-1]:.2f}%)" in alone.stdout, alone.stdout
    resumed = run_alone([CLI, "--load-file", "A", "--gpu", "0,1", "--epochs", "3",
                         "--no-progress"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(tmp_path / "A" / "checkpoint.npz")[1]["counters"]["epoch"] == 3


def test_async_of_the_hybrid_example_trains_saves_and_resumes_under_mpiexec(tmp_path):
    """The default config (digits-hybrid.cfg): its convolutions replicated on both ranks,
    their increments exchanged apart, its fc layers model-parallel across them."""
    done = run_mpi(2, [CLI, "--gpu", "0", "--sync", "async", "--epochs", "2", "--no-progress",
                       "--save-path", "A"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    errors = [float(e) for e in re.findall(r"test cost [0-9.]+ error +([0-9.]+)%", done.stdout)]
    assert len(errors) == 2 and errors[-1] < 30  # it learns (chance: 90%)
    _, meta = load_checkpoint(tmp_path / "A" / "checkpoint.npz")
    assert meta["options"]["sync"] == "async:4" and meta["counters"]["epoch"] == 2
    # replica 0's weights, which the drained replicas agree with up to float rounding:
    # test-only on one process gives the test error the run printed last
    alone = run_alone([CLI, "--load-file", "A", "--gpu", "0,1", "--test-only"], cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert f"({errors[-1]:.2f}%)" in alone.stdout, alone.stdout
    resumed = run_mpi(2, [CLI, "--load-file", "A", "--gpu", "0", "--epochs", "3",
                          "--no-progress"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(tmp_path / "A" / "checkpoint.npz")[1]["counters"]["epoch"] == 3


def test_a_rank_without_work_is_an_error(tmp_path):
    done = run_mpi(4, [CLI, *_digits("digits-data.cfg"), "--gpu", "0"], cwd=tmp_path)
    assert done.returncode == 2
    # every rank finds the error; whichever reports it first ends the others
    assert re.search(r"error: rank [0-3]: rank\(s\) 2, 3 would have no work", done.stderr)
    assert "give --gpu" not in done.stderr  # more devices are not what it needs
    assert "Traceback" not in done.stderr


def test_too_few_devices_over_all_ranks_is_an_error(tmp_path):
    done = run_mpi(2, [CLI, "--layer-def",
                       str(EXAMPLES / "cuda-convnet2" / "layers-imagenet-4gpu-data.cfg"),
                       "--layer-params",
                       str(EXAMPLES / "cuda-convnet2" / "layer-params-imagenet-4gpu-data.cfg"),
                       "--gpu", "0", "--data-dims", "3x224x224", "--num-classes", "1000",
                       "--mini", "128", "--print-plan"], cwd=tmp_path)
    assert done.returncode == 2
    assert "2 processes x --gpu 0 give 2 logical devices" in done.stderr
    # --gpu is per process: each of the two lists two devices
    assert ("give --gpu 0,1 in each of the 2 processes, or --gpu 0,0 for 2 logical devices "
            "on device 0 in each of the 2 processes") in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, option", [(["--print-plan", "--simulate"], "--simulate"),
                                          (["--auto-place", "2"], "--auto-place")])
def test_a_profile_under_mpiexec_is_refused_before_it_starts(tmp_path, args, option):
    done = run_mpi(2, [CLI, "--gpu", "0", *args], cwd=tmp_path)
    assert done.returncode == 2
    assert f"{option} runs in one process" in done.stderr
    assert "profiling" not in done.stderr and "Traceback" not in done.stderr


def test_print_plan_shows_the_processes(tmp_path):
    done = run_mpi(2, [CLI, "--gpu", "0", "--print-plan"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Processes (logical device i on rank i // 1" in done.stdout
    assert done.stdout.count("Schedule (per pass") == 1  # printed by rank 0 only


def test_print_plan_says_async_across_processes_is_not_reproducible(tmp_path):
    done = run_mpi(2, [CLI, *_digits("digits-data.cfg"), "--gpu", "0", "--sync", "async:2",
                       "--print-plan"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Sync: asynchronous: the 2 replicas train apart" in done.stdout
    assert "NOT bitwise reproducible" in done.stdout
    assert "Between the 2 processes each shard's update (" in done.stdout


def test_print_plan_says_how_a_hybrid_nets_increments_cross_processes(tmp_path):
    done = run_mpi(2, [CLI, "--gpu", "0", "--sync", "async:2", "--print-plan"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Sync: async:2 in a hybrid plan: the steps stay lockstep" in done.stdout
    assert "NOT bitwise reproducible" in done.stdout
    assert "Between the 2 processes each update's increments go to every other process " \
           "with a replica of its layer" in done.stdout


def test_the_memory_check_counts_only_each_processs_own_devices(tmp_path):
    done = run_mpi(2, [CLI, "--gpu", "0", "--print-plan=json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout)["memory"]
    assert [pool["devices"] for pool in memory] == [[0]]  # rank 0's; device 1 is rank 1's


def test_ctrl_c_to_every_rank_lets_rank_0_say_which_checkpoint_survived(tmp_path):
    """A Ctrl-C in a terminal reaches every rank: the others leave rank 0 the time to name
    the checkpoint and draw log.png before it ends the run (no half-written file left)."""
    marker = uuid.uuid4().hex
    job = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, CLI, "--gpu", "0",
                            "--epochs", "1000", "--save-path", "K", "--no-progress"],
                           cwd=tmp_path, env=env(CONVNET_TEST_RUN=marker),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        epochs = 0
        while epochs < 2:  # the first epoch's checkpoint is saved before the second starts
            line = job.stdout.readline()
            assert line, job.stderr.read()
            epochs += line.startswith("epoch ")
        for pid in rank_pids(marker).values():
            os.kill(pid, signal.SIGINT)
        out, errors = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 130, errors
    assert "last saved: K/checkpoint.npz" in out + errors and "interrupted" in errors, errors
    assert "Traceback" not in errors
    assert not [p.name for p in (tmp_path / "K").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.parametrize("training, victim", [
    ([], 1), ([*_digits("digits-data.cfg"), "--sync", "async:2"], 1),
    ([*_digits("digits-data.cfg"), "--sync", "async:2"], 0)],  # the dealer and its courier
    ids=["hybrid-sync", "data-async", "data-async-rank-0"])
def test_a_killed_rank_ends_the_run_and_leaves_a_loadable_checkpoint(tmp_path, training,
                                                                     victim):
    marker = uuid.uuid4().hex
    job = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, CLI, *training, "--gpu", "0",
                            "--epochs", "1000", "--test-freq", "1", "--save-path", "K",
                            "--no-progress"], cwd=tmp_path, env=env(CONVNET_TEST_RUN=marker),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "K" / "checkpoint.npz").exists():
            assert job.poll() is None, job.stderr.read()
            assert time.monotonic() < deadline, "no checkpoint within 60 s"
            time.sleep(0.05)
        time.sleep(0.3)  # mid-training, between or inside steps
        pid = rank_pid(marker, victim)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        code = job.wait(timeout=30)
        assert time.monotonic() - killed < 30
        assert code != 0
        # the launcher ends the others; one that noticed first names the rank it lost
        errors = job.stderr.read()
        assert "Traceback" not in errors and "internal error" not in errors, errors
        assert all(f" rank {victim} " in line for line in errors.splitlines()
                   if line.startswith("error: ")), errors
    except (AssertionError, subprocess.TimeoutExpired) as failure:
        job.kill()
        job.wait()
        raise AssertionError(f"{failure}\nthe run's stderr:\n{job.stderr.read()}") from None
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    arrays, meta = load_checkpoint(tmp_path / "K" / "checkpoint.npz")
    assert any(k.startswith("weights/") for k in arrays) and meta["counters"]["step"] > 0
