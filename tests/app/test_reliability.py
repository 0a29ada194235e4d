"""Hostile use of the command line: shared save paths, copied run folders, nets too big
for the machine, checkpoint bombs and tampered fields, signals during start-up.

Each of these once ended in lost training, a traceback, a hang or gigabytes of
memory; now each is a one-line error with the documented exit status, and
nothing an earlier run saved is touched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from convnet.app.checkpoint import load_checkpoint, save_checkpoint
from convnet.app.run.memory_fit import CPU_THREAD_BYTES, memory_pools
from convnet.app.run.folder import LOCK_NAME, check_run_folder, claim_run_folder
from convnet.app.run import log as run_log
from convnet.errors import CheckpointError, ConfigError, UsageError
from tests.support.checkpoints import net_and_plan, npy_bytes, rebuild
from tests.support.cli import (DUMMY, assert_clean_error, checkpoint_arrays, command, ok, read_log,
                               run_cli, start_cli)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A finished one-epoch run's save path, and the bytes of what it saved."""
    folder = tmp_path_factory.mktemp("saved") / "run"
    ok(run_cli(*DUMMY, "--epochs", "1", "--save-path", folder))
    return folder, {p.name: p.read_bytes() for p in folder.iterdir()}


def unchanged(saved) -> None:
    folder, before = saved
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def tampered(saved, tmp_path, name="bad.npz", arrays=None, **meta_changes) -> Path:
    """A copy of the saved checkpoint with some arrays or meta sections replaced."""
    original, meta = load_checkpoint(saved[0] / "checkpoint.npz")
    for section, changes in meta_changes.items():
        meta[section] = {**meta.get(section, {}), **changes}
    path = tmp_path / name
    save_checkpoint(path, {**original, **(arrays or {})}, meta)
    return path


# ------------------------------------------------- one writer per run folder (2)
def test_a_second_writer_is_refused_with_the_holders_pid(saved, tmp_path):
    folder = tmp_path / "busy"
    with claim_run_folder(folder):
        assert (folder / LOCK_NAME).read_text().strip() == str(os.getpid())
        proc = run_cli(*DUMMY, "--epochs", "1", "--save-path", folder)
        assert_clean_error(proc, 1, f"{folder} is in use by another run (pid {os.getpid()})",
                           "--save-path")
        with pytest.raises(CheckpointError, match="in use by another run"):
            with claim_run_folder(folder):
                pass
        with pytest.raises(CheckpointError, match="in use by another run"):
            check_run_folder(folder)  # found before any data is loaded
    assert not folder.exists()  # the lock file goes with the run, and the empty folder it made
    check_run_folder(folder)
    check_run_folder(tmp_path / "new" / "run")
    assert not (tmp_path / "new").exists()  # checking makes nothing


def test_concurrent_runs_on_one_save_path_never_mix(tmp_path):
    folder = tmp_path / "shared"
    procs = [start_cli(*DUMMY, "--epochs", "2", "--test-freq", "1", "--overwrite",
                       "--save-path", folder) for _ in range(3)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert any(code == 0 for code, _ in results), results
    for code, err in results:
        if code:
            assert_clean_error((code, err), 1, "in use by another run")
    _, meta = checkpoint_arrays(folder / "checkpoint.npz")
    _, rows = read_log(folder / "log.csv")
    assert len(rows) == meta["counters"]["log_rows"] == 4  # one run's rows, in order
    assert [r["epoch"] for r in rows] == ["1", "1", "2", "2"]
    names = sorted(p.name for p in folder.iterdir() if p.name != "log.png")  # the log's plot
    assert names == ["checkpoint.npz", "log.csv"]  # no lock or temporary file left behind


def test_a_copied_run_saves_into_its_own_folder(saved, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(saved[0], copy)
    ok(run_cli("--load-file", copy, "--epochs", "2", "--no-progress"))
    unchanged(saved)
    steps = [checkpoint_arrays(f / "checkpoint.npz")[1]["counters"]["step"]
             for f in (saved[0], copy)]
    assert steps[1] == 2 * steps[0]
    assert len(read_log(copy / "log.csv")[1]) == 2
    ok(run_cli("--load-file", copy, "--test-only", "--write-features", "conv1"))
    assert (copy / "features-conv1" / "data_batch_9.npz").is_file()
    unchanged(saved)


def test_a_new_run_never_replaces_a_checkpoint_unasked(saved, tmp_path):
    line = assert_clean_error(run_cli(*DUMMY, "--epochs", "1", "--save-path", saved[0]), 2,
                              "holds the checkpoint of an earlier run")
    for way_out in (f"--load-file {saved[0]}", "another --save-path", "--overwrite"):
        assert way_out in line
    unchanged(saved)
    again = tmp_path / "again"
    shutil.copytree(saved[0], again)
    ok(run_cli(*DUMMY, "--epochs", "1", "--seed", "3", "--save-path", again, "--overwrite"))
    assert checkpoint_arrays(again / "checkpoint.npz")[1]["options"]["seed"] == 3


def test_a_checkpoint_slot_that_is_a_folder_is_found_before_training(tmp_path):
    (tmp_path / "run" / "checkpoint.npz").mkdir(parents=True)
    began = time.monotonic()
    proc = run_cli(*DUMMY, "--epochs", "50", "--save-path", tmp_path / "run", "--overwrite")
    assert_clean_error(proc, 1, "checkpoint.npz", "is a folder")
    assert "epoch" not in proc.stdout and time.monotonic() - began < 30


@pytest.mark.parametrize("args, code, fragment", [
    (["--data-provider", "cifar", "--data-path", "{tmp}/missing"], 1,
     "data folder does not exist"),
    ([*DUMMY, "--data-dims", "3x8x8"], 2, "channels"),  # the net does not fit the data
    ([*DUMMY, "--logreg-name", "fc10"], 2, "--logreg-name 'fc10'"),  # found by the trainer
])
def test_a_run_that_cannot_start_creates_no_save_folder(tmp_path, args, code, fragment):
    folder = tmp_path / "new" / "run"
    args = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    assert_clean_error(run_cli(*args, "--epochs", "1", "--save-path", folder), code, fragment)
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------ memory before allocating (3)
HUGE_NET = """\
[data]
type=data
dataIdx=0
[labels]
type=data
dataIdx=1
[fc1]
type=fc
inputs=data
outputs=1000000
initW=0.01
[fc2]
type=fc
inputs=fc1
outputs=10
initW=0.01
[probs]
type=softmax
inputs=fc2
[logprob]
type=cost.logreg
inputs=labels,probs
"""
HUGE_PARAMS = "".join(f"[{name}]\nepsW=0.01\nepsB=0.02\nmomW=0.9\nmomB=0.9\nwc=0\n"
                      for name in ("fc1", "fc2")) + "[logprob]\ncoeff=1\n"


@pytest.fixture()
def huge(tmp_path):
    """A net whose activations at --mini 10,000,000 need some 70 TiB."""
    (tmp_path / "huge.cfg").write_text(HUGE_NET)
    (tmp_path / "huge-params.cfg").write_text(HUGE_PARAMS)
    return ["--layer-def", tmp_path / "huge.cfg", "--layer-params", tmp_path / "huge-params.cfg",
            "--data-dims", "1x8x8", "--num-classes", "10", "--mini", "10000000"]


def test_a_net_too_big_for_the_machine_is_refused_before_allocating(huge):
    proc = run_cli(*huge, "--data-provider", "dummy", "--train-range", "1", "--test-range",
                   "2", "--no-progress", "--backend", "cpu", timeout=60)
    assert_clean_error(proc, 1, "not enough memory", "GiB of host RAM", "leaves only",
                       "--mini")


def test_print_plan_flags_a_plan_that_does_not_fit(huge):
    proc = run_cli(*huge, "--print-plan", "--backend", "cpu")
    assert proc.returncode == 0 and "Totals per device" in proc.stdout
    assert "warning: the plan needs about" in proc.stderr and "refused" in proc.stderr
    proc = run_cli(*huge, "--print-plan", "json", "--backend", "cpu")
    assert proc.returncode == 0
    [pool] = json.loads(proc.stdout)["memory"]
    assert pool["memory"] == "host RAM" and pool["fits"] is False
    assert pool["needed_bytes"] > pool["available_bytes"] > 0


def test_cpu_devices_share_host_memory():
    from convnet.app.options import resolve_options
    from convnet.app.command_line.parser import build_parser
    from convnet.app.run.assembly import build_net_and_plan
    from convnet.plan.report import device_totals

    opts = resolve_options(build_parser().parse_args(["--gpu", "0,1", "--data-dims", "1x8x8",
                                                      "--num-classes", "10", "--print-plan"]))
    net, plan = build_net_and_plan(opts)
    [pool] = memory_pools(plan, net, "cpu")
    assert pool.devices == (0, 1)
    assert pool.needed == (sum(t.peak_bytes for t in device_totals(plan, net))
                           + 2 * CPU_THREAD_BYTES)


# ------------------------------------------------------------ checkpoint bombs (4)
def test_an_unused_deflated_array_is_never_decompressed(saved, tmp_path):
    from convnet.app.run.resume_state import read_state

    bomb = rebuild(saved[0] / "checkpoint.npz", tmp_path / "bomb.npz",
                   {"weights/ghost/W0": npy_bytes((64 * 2**20 // 4,))})  # 64 MiB of zeros
    assert bomb.stat().st_size < 2**20
    net, plan = net_and_plan(saved[0])
    tracemalloc.start()
    try:
        arrays = read_state(bomb, net, plan)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20 and "weights/ghost/W0" not in arrays
    proc = ok(run_cli("--load-file", bomb, "--test-only"))
    assert "ghost" in proc.stderr  # named in the warning about unused layers


@pytest.mark.parametrize("member, message", [
    (npy_bytes((8000, 8000)), "has shape (8000, 8000), the net needs"),
    (None, "does not match its shape"),
])
def test_a_used_array_of_the_wrong_size_is_refused_unread(saved, tmp_path, member, message):
    arrays, _ = load_checkpoint(saved[0] / "checkpoint.npz")
    key = next(k for k in arrays if k.startswith("weights/conv1/"))
    if member is None:  # the right header, then 64 MiB more than it declares
        member = npy_bytes(arrays[key].shape, extra=64 * 2**20)
    bomb = rebuild(saved[0] / "checkpoint.npz", tmp_path / "bomb.npz", {key: member})
    assert bomb.stat().st_size < 2**20
    assert_clean_error(run_cli("--load-file", bomb, "--test-only"), 1, key, message)


# ----------------------------------------------------- checkpoint fields checked (5)
@pytest.mark.parametrize("dtype, shown", [(np.int32, "int32"), (np.complex64, "complex64"),
                                          ("<U3", "str"), (np.float64, "float64")])
def test_weights_must_be_float32(saved, tmp_path, dtype, shown):
    arrays, _ = load_checkpoint(saved[0] / "checkpoint.npz")
    key = next(k for k in arrays if k.startswith("weights/"))
    bad = tampered(saved, tmp_path, arrays={key: arrays[key].astype(dtype)})
    assert_clean_error(run_cli("--load-file", bad, "--test-only"), 1, key, shown)


@pytest.mark.parametrize("section, changes, fragment", [
    ("counters", {"cumulative_time": float("inf")}, "counters"),
    ("counters", {"log_rows": 10**12}, "counters"),
    ("counters", {"step": -1}, "counters"),
    ("counters", {"epoch": True}, "counters"),
    ("options", {"mini": "128"}, "'mini' has the bad value '128'"),
    ("options", {"gpu": list(range(100_000))}, "'gpu' has the bad value"),
    ("options", {"seed": 1.5}, "'seed'"),
    ("options", {"layer_def": "/etc/passwd"}, "is not named like a config file"),
    ("options", {"layer_def": "/dev/zero.cfg"}, "--layer-def /dev/zero.cfg does not exist"),
])
def test_hostile_checkpoint_fields_are_refused(saved, tmp_path, section, changes, fragment):
    bad = tampered(saved, tmp_path, **{section: changes})
    began = time.monotonic()
    line = assert_clean_error(run_cli("--load-file", bad, "--test-only", timeout=60), 1,
                              "damaged checkpoint" if section == "counters" else str(bad),
                              fragment)
    assert len(line) < 400 and "root:" not in line
    assert time.monotonic() - began < 30


@pytest.mark.parametrize("version, message", [
    (-5, "not a version number"), ("1", "not a version number"), (True, "not a version number"),
    (1.0, "not a version number"), (2, "version 2 is newer")])
def test_the_format_version_is_an_integer_this_program_knows(saved, tmp_path, version, message):
    bad = rebuild(saved[0] / "checkpoint.npz", tmp_path / "v.npz", version=version)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(bad)


# ------------------------------------------------------- signals during start-up (6)
def _caught_signals(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16)
    return 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("delay", [0, 0.02, 0.06, 0.1])
def test_a_signal_during_start_up_exits_cleanly(tmp_path, sig, delay):
    """From the launcher's first statement on, at any moment of the imports and set-up."""
    proc = start_cli(*DUMMY, "--epochs", "1", "--save-path", tmp_path / "run")
    term_bit = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _caught_signals(proc.pid) & term_bit:
                break
        except FileNotFoundError:
            break
        time.sleep(0.001)
    time.sleep(delay)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    code, word = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}[sig]
    assert proc.returncode == code, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == word


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_launch_never_gives_a_traceback(sig):
    """Before Python runs the launcher the signal's default action ends the process."""
    proc = subprocess.Popen(command("--help"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (-sig, 128 + sig, 0) and "Traceback" not in err


# ------------------------------------------------------- checkpoint FIFOs (7)
@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_fifo_as_load_file_is_refused_not_waited_on(tmp_path, where):
    fifo = tmp_path / ("checkpoint.npz" if where == "folder" else "pipe.npz")
    os.mkfifo(fifo)
    target = tmp_path if where == "folder" else fifo
    assert_clean_error(run_cli("--load-file", target, "--test-only", timeout=60), 1,
                       "is a FIFO (named pipe), not a regular file")


# ------------------------------------------------------------------ smaller (9)
def test_a_failed_log_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    log = run_log.RunLog(tmp_path, "logprob")

    def broken_writer(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("convnet.app.run.log.csv.writer", broken_writer)
    with pytest.raises(CheckpointError, match="No space left"):
        log.record(1, 1, run_log.TestResult(1.0, 0.5, 10), 0.01, write=lambda line: None)
    assert list(tmp_path.iterdir()) == []


def test_a_huge_section_name_is_cut_in_the_error(tmp_path):
    name = "x" * 3_000_000
    layer_def = tmp_path / "big.cfg"
    layer_def.write_text(f"[data]\ntype=data\ndataIdx=0\n\n[{name}]\ntype=nonsense\n")
    (tmp_path / "params.cfg").write_text("")
    proc = run_cli("--layer-def", layer_def, "--layer-params", tmp_path / "params.cfg",
                   "--print-plan",
                   "--data-dims", "1x8x8", "--num-classes", "10")
    line = assert_clean_error(proc, 2)
    assert len(line) < 500 and "xxx..." in line
    error = ConfigError("bad", file="f.cfg", section=name, key=name)
    assert len(str(error)) < 200


@pytest.mark.parametrize("which, key, value, message", [
    ("def", "initW", "１２", "expected a number"), ("params", "momB", "1e9", "<= 1")])
def test_config_numbers_are_ascii_and_momentum_at_most_one(tmp_path, which, key, value,
                                                          message):
    from convnet.config import parse_net
    from tests.support.cli import SINGLE_DEF, SINGLE_PARAMS

    files = {"def": (SINGLE_DEF, tmp_path / "net.cfg"),
             "params": (SINGLE_PARAMS, tmp_path / "params.cfg")}
    for name, (source, copy) in files.items():
        text = source.read_text()
        if name == which:
            text = re.sub(f"{key}=[^\\n]*", f"{key}={value}", text, count=1)
        copy.write_text(text)
    with pytest.raises(ConfigError, match=message):
        parse_net(files["def"][1], files["params"][1])


@pytest.mark.parametrize("option, value", [("--mini", "１２８"), ("--gpu", "０"),
                                           ("--color-noise", "０.５"), ("--gpu", "0,70")])
def test_option_numbers_are_ascii_and_devices_bounded(option, value):
    from convnet.app.command_line.parser import build_parser

    with pytest.raises(UsageError, match=option):
        build_parser().parse_args([option, value])


# ------------------------------------------------- found by reviewing the merged features


def test_a_dummy_run_resumes_on_other_data_without_its_dummy_cases(tmp_path):
    """The saved --dummy-cases belongs to the dummy provider: evaluating the checkpoint
    on the digits is not refused for an option the user never gave."""
    folder = tmp_path / "dummy"
    ok(run_cli(*DUMMY, "--dummy-cases", "128", "--epochs", "1", "--save-path", folder))
    test = ok(run_cli("--load-file", folder, "--test-only", "--data-provider", "digits",
                      "--train-range", "1-5", "--test-range", "6"))
    assert "test" in test.stdout


def test_compare_refuses_an_earlier_sub_run_before_training_anything(tmp_path):
    from tests.app.comparison.test_compare import digits_argv

    taken = tmp_path / "cmp" / "digits-data"
    taken.mkdir(parents=True)
    (taken / "checkpoint.npz").write_bytes(b"an earlier run's")
    proc = run_cli(*digits_argv(tmp_path / "cmp", epochs=1))
    line = assert_clean_error(proc, 2, "holds the checkpoint of an earlier run", "--overwrite")
    assert "--load-file" not in line  # --compare cannot resume; the hint must not offer it
    assert not (tmp_path / "cmp" / "digits-single" / "log.csv").exists()  # nothing trained


def test_a_feature_folder_that_cannot_be_made_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = run_cli(*DUMMY, "--epochs", "1", "--write-features", "fc10",
                   "--feature-path", blocker / "x")
    assert_clean_error(proc, 1, "cannot create feature folder")
    assert "epoch" not in proc.stdout


@pytest.mark.parametrize("batch_index", [999, 3])
def test_a_batch_index_beyond_the_train_range_is_refused(saved, tmp_path, batch_index):
    """The saved run trained 2 batches an epoch (--train-range 1-2): a checkpoint that
    claims to stand at batch 3 or 999 of an epoch is refused, not trained on from there."""
    bad = tampered(saved, tmp_path, counters={"batch_index": batch_index})
    assert_clean_error(run_cli("--load-file", bad, "--epochs", "3", "--no-progress"), 1,
                       str(bad), f"batch_index {batch_index}", "2 batches")
    ok(run_cli("--load-file", tampered(saved, tmp_path, "fine.npz", counters={"batch_index": 2}),
               "--epochs", "2", "--no-progress"))  # the end of an epoch is a saved position
