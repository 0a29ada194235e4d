"""Killing the real training command: SIGKILL at random moments (many of them while a
checkpoint is being written) never leaves a checkpoint that does not load, and the
run resumed after every kill ends with bitwise the weights of an uninterrupted run.
Ctrl-C (SIGINT) and SIGTERM end a run cleanly, without a traceback."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

from convnet.app.run.summary import where_text

from tests.support.cli import (DUMMY, assert_same_arrays, checkpoint_arrays, ok, parse_test_line,
                               read_log, run_cli, start_cli)

#: The digits net on dummy data, testing and saving after every batch: 4 batches of
#: 512 cases per epoch, so 40 checkpoints in a whole run.
RUN = [*DUMMY, "--train-range", "1-4", "--test-freq", "1", "--epochs", "10"]
KILLS = 6  # three of them while a checkpoint is being written


def _temps(folder) -> list[str]:
    try:
        return [n for n in os.listdir(folder) if n.startswith(".checkpoint.npz.")]
    except FileNotFoundError:
        return []


def _wait(predicate, proc, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.0005)
    return False


def test_sigkill_during_training_always_leaves_a_loadable_checkpoint(tmp_path):
    reference = tmp_path / "reference"
    ok(run_cli(*RUN, "--save-path", reference))
    folder = tmp_path / "killed"
    checkpoint = folder / "checkpoint.npz"
    rng = random.Random(20240611)
    mid_write = finished = 0
    for cycle in range(KILLS):
        resume = ["--load-file", checkpoint] if checkpoint.exists() else []
        before = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        proc = start_cli(*RUN, "--save-path", folder, *resume)
        # let this process save at least once, so the run moves on between kills
        _wait(lambda: checkpoint.exists() and checkpoint.stat().st_mtime_ns != before, proc)
        if cycle % 2:  # kill while the next checkpoint is being written
            _wait(lambda: bool(_temps(folder)), proc, timeout=5)
        else:  # kill at a random moment
            time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        if proc.returncode == 0:
            finished += 1  # the run ended before the signal came; nothing to test
            break
        assert proc.returncode == -signal.SIGKILL
        mid_write += bool(_temps(folder))
        # the last good checkpoint loads, with the real command
        test = ok(run_cli("--load-file", checkpoint, "--test-only"))
        assert parse_test_line(test.stdout)[2] == 512
        print("kill", cycle, checkpoint_arrays(checkpoint)[1]["counters"], bool(_temps(folder)))
    assert mid_write >= 1, "no kill landed while a checkpoint was being written"
    # finish the run from the last checkpoint: the same weights as without kills
    ok(run_cli("--load-file", checkpoint, "--no-progress"))
    assert_same_arrays(checkpoint_arrays(checkpoint)[0],
                       checkpoint_arrays(reference / "checkpoint.npz")[0])
    assert not _temps(folder)  # the leftovers of killed saves are cleaned up
    # and its log has one row per test interval, as the uninterrupted run's
    _, rows = read_log(folder / "log.csv")
    _, expected = read_log(reference / "log.csv")
    keys = ["epoch", "batch", "cost", "test_error"]
    assert [[r[k] for k in keys] for r in rows] == [[r[k] for k in keys] for r in expected]


def _interrupt(tmp_path, *signals: int):
    folder = tmp_path / "run"
    proc = start_cli(*DUMMY, "--epochs", "100", "--test-freq", "1", "--save-path", folder,
                     env={"PYTHONFAULTHANDLER": "1"})
    for line in proc.stdout:  # the banner, then the first test line: training is under way
        if line.startswith("epoch"):
            break
    else:
        raise AssertionError(proc.stderr.read())
    deadline = time.monotonic() + 30  # the first save follows the line: wait for it
    while not (folder / "checkpoint.npz").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)
    for s in signals:
        proc.send_signal(s)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # show where it hangs (faulthandler dumps on SIGABRT)
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate()
        raise AssertionError(f"no exit within 60 s of signals {signals}:\n{err}") from None
    return proc.returncode, err, folder


def test_ctrl_c_saves_at_a_batch_end_and_prints_the_command_that_resumes(tmp_path):
    code, err, folder = _interrupt(tmp_path, signal.SIGINT)
    assert code == 130, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[-1] == "interrupted"
    assert any(l.startswith("Ctrl-C: stopping after this batch") for l in lines), err
    # "saved CHECKPOINT (WHERE); to resume: python .../convnet.py --load-file FOLDER"
    saved, command = lines[-2].split("; to resume: ")
    assert saved.startswith(("saved ", "last saved: ")), lines[-2]
    assert command.endswith(f"--load-file {folder}") and "convnet.py" in command
    counters = checkpoint_arrays(folder / "checkpoint.npz")[1]["counters"]
    assert saved.endswith(f"({where_text(counters['epoch'], counters['batch_index'], 2)})")
    test = ok(run_cli("--load-file", folder, "--test-only"))  # the save loads
    assert parse_test_line(test.stdout)[2] == 512
    # the banner's files hold: the log's picture is drawn from the rows so far
    assert (folder / "log.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    code, err, folder = _interrupt(tmp_path, signal.SIGINT, signal.SIGINT)
    assert code == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "interrupted"


def test_sigterm_exits_cleanly_with_143(tmp_path):
    code, err, folder = _interrupt(tmp_path, signal.SIGTERM)
    assert code == 143, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "terminated"
    ok(run_cli("--load-file", folder, "--test-only"))
    assert (folder / "log.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ctrl_c_before_the_first_test_of_an_overwriting_run_keeps_no_earlier_log(tmp_path):
    """--overwrite, then Ctrl-C before the new run's first test line: the log beside the
    checkpoint holds exactly the rows that checkpoint counts.  When the new run saved (it
    trained a batch before the signal: 0 rows), the earlier run's rows are gone; when the
    signal came before its first batch (a loaded machine), the earlier run's checkpoint
    and log stand together, untouched."""
    folder = tmp_path / "run"
    ok(run_cli(*DUMMY, "--epochs", "2", "--test-freq", "1", "--save-path", folder))
    assert len(read_log(folder / "log.csv")[1]) == 4
    earlier = (folder / "checkpoint.npz").stat().st_mtime_ns
    proc = start_cli(*DUMMY, "--train-range", "1-8", "--epochs", "100", "--overwrite",
                     "--save-path", folder)  # its first test comes after 8 batches
    for line in proc.stdout:  # the banner's last line: training starts now
        if line.startswith("data:"):
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    counters = checkpoint_arrays(folder / "checkpoint.npz")[1]["counters"]
    header, rows = read_log(folder / "log.csv")
    assert len(rows) == counters["log_rows"] and "test_error" in header, (counters, rows, err)
    if (folder / "checkpoint.npz").stat().st_mtime_ns == earlier:
        assert len(rows) == 4, err  # nothing trained: the earlier run's files, as they were
        return
    assert counters["log_rows"] == 0 and counters["step"] > 0, (counters, err)
    ok(run_cli("--load-file", folder, "--epochs", "1", "--no-progress"))
    assert [r["batch"] for r in read_log(folder / "log.csv")[1]] == ["8"]
