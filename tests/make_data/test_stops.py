"""make-data on two worker processes stopped half-way: SIGTERM (``timeout``, a batch
scheduler) and Ctrl-C end it with one line and 143 or 130, a worker killed with
SIGKILL (as the system does when memory runs out) with one line naming it, never a
hang or a traceback; the batches written stay, no worker is left running, and a rerun
writes the rest.

Each run is stopped right after its first batch is written
(tests/support/make_data_stops.py), so it is mid-way however loaded the machine is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support import ROOT
from tests.support.image_trees import image_bytes, load_batches, make_data

IMAGES = 24  # a batch each: far more tasks than the workers take ahead


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    src = tmp_path_factory.mktemp("stops") / "src"
    for k in range(IMAGES):
        (src / f"class{k % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"class{k % 3}" / f"{k}.jpg").write_bytes(image_bytes(24, 20, k))
    return src


def _stopped_run(src, out, action: str) -> tuple[int, str]:
    """make-data on two workers, ``action`` after its first batch; (status, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.make_data_stops", action, "--src-dir", str(src),
         "--tgt-dir", str(out), "--size", "16", "--batch-size", "1", "--workers", "2",
         "--no-progress"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)  # its own process group, as a shell's job has
    try:
        out_text, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    workers = [int(line.split()[1]) for line in out_text.splitlines()
               if line.startswith("worker ")]
    assert len(workers) == 2
    assert not [pid for pid in workers if _running(pid)], "a worker was left running"
    return proc.returncode, err


def _running(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _kept_and_finished(src, out) -> None:
    """The batches written before the stop are complete, and a rerun (one process)
    keeps them and writes the rest."""
    written = sorted(p.name for p in out.iterdir() if p.name.startswith("data_batch_"))
    assert written and not [p for p in out.iterdir() if p.name.startswith(".")]
    assert len(written) < IMAGES
    assert make_data(src, out, "--batch-size", "1", "--sub-batch-size", "1")[0] == 0
    assert len(load_batches(out)) == IMAGES and (out / "batches.meta").is_file()


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
@pytest.mark.parametrize("action, status, line", [("SIGTERM", 143, "terminated\n"),
                                                  ("SIGINT", 130, "interrupted\n")])
def test_a_stop_signal_ends_the_run_in_one_line_and_a_rerun_finishes_it(photos, tmp_path,
                                                                        action, status, line):
    assert _stopped_run(photos, tmp_path / "out", action) == (status, line)
    _kept_and_finished(photos, tmp_path / "out")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_killed_worker_ends_the_run_in_one_line_naming_it(photos, tmp_path):
    code, err = _stopped_run(photos, tmp_path / "out", "kill-worker")
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("error: make-data's worker process ") and \
        "was killed by SIGKILL" in err and "rerun to go on" in err, err
    _kept_and_finished(photos, tmp_path / "out")
