"""Ranks started differently, stopped or lost: every such run ends promptly, on every
rank, with one line that names the rank and what it was waited on for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.mpi import env, mpiexec, needs_mpi, rank_pid, rank_pids

pytestmark = [needs_mpi, pytest.mark.skipif(not Path("/proc/self/environ").exists(),
                                             reason="needs /proc")]

CLI = str(ROOT / "convnet.py")
EXAMPLES = ROOT / "examples"
#: Seconds the tests give a wait on a stopped rank (the default is minutes).
BOUND = 2


def _two_ranks(args0: list[str], args1: list[str], cwd, timeout: float = 60):
    """``mpiexec -n 1 python convnet.py ARGS0 : -n 1 python convnet.py ARGS1``."""
    started = time.monotonic()
    done = subprocess.run([mpiexec(), "-n", "1", sys.executable, CLI, *args0, ":",
                           "-n", "1", sys.executable, CLI, *args1], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - started


def _error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize("rank0, rank1, named", [
    (["--epochs", "2"], ["--epochs", "4"], "--epochs: rank 0 has 2, rank 1 has 4"),
    # before: a 40-line traceback ("Message truncated") from the first transfer
    (["--mini", "128"], ["--mini", "64"], "--mini: rank 0 has 128, rank 1 has 64"),
    # before: trained silently to another result
    ([], ["--layer-params", str(EXAMPLES / "digits-params-b.cfg")],
     "the contents of --layer-params: rank 0 has "),
], ids=["epochs", "mini", "params-contents"])
def test_ranks_started_differently_end_at_once_naming_what_differs(tmp_path, rank0, rank1,
                                                                   named):
    params = EXAMPLES / "digits-hybrid-params.cfg"
    other = tmp_path / "other-params.cfg"  # the same file, one learning rate changed
    other.write_text(params.read_text().replace("epsW=", "epsW=0.5*", 1))
    rank1 = [str(other) if a.endswith("digits-params-b.cfg") else a for a in rank1]
    common = ["--gpu", "0", "--no-progress", "--save-path", "run"]
    done, seconds = _two_ranks(common + rank0, common + rank1, tmp_path)
    assert done.returncode == 2, done.stderr
    lines = _error_lines(done.stderr)
    assert lines and all("the ranks were started differently: ranks disagree on " + named
                         in line for line in lines), done.stderr
    assert seconds < 30 and not (tmp_path / "run").exists()  # nothing trained or written


def _start(args: list[str], cwd, marker: str) -> subprocess.Popen:
    return subprocess.Popen([mpiexec(), "-n", "2", sys.executable, CLI, "--gpu", "0",
                             "--no-progress", "--rank-timeout", str(BOUND), *args],
                            cwd=cwd, env=env(CONVNET_TEST_RUN=marker),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _ends_after_stop(job: subprocess.Popen, pid: int, marker: str,
                     launcher_ends_it: bool = True) -> str:
    """SIGSTOP rank ``pid``: the run must end within the bound and a margin; its stderr.

    ``launcher_ends_it=False`` is for a stop before MPI has started: the rank that gives
    up can then only exit, not abort, and it is ``mpiexec`` that ends the stopped rank.
    MPICH's launcher does, but left it stopped (and itself waiting) once in dozens of
    runs; then, once every other rank is gone, this ends it as its user would."""
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        try:
            _, err = job.communicate(timeout=BOUND + 30)
        except subprocess.TimeoutExpired:
            if launcher_ends_it:
                raise
            assert rank_pids(marker) == {1: pid}  # the other rank gave up and is gone
            os.kill(pid, signal.SIGKILL)
            _, err = job.communicate(timeout=30)
        gone = time.monotonic() + 5  # the launcher's abort ends the stopped rank too
        while Path(f"/proc/{pid}").exists() and time.monotonic() < gone:
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists()
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
        try:
            os.kill(pid, signal.SIGKILL)  # the stopped rank, if the launcher left it
        except ProcessLookupError:
            pass
    assert time.monotonic() - stopped >= BOUND
    assert job.returncode != 0
    return err


@pytest.mark.parametrize("training", [[], ["--layer-def", str(EXAMPLES / "digits-data.cfg"),
                                           "--layer-params", str(EXAMPLES / "digits-params.cfg"),
                                           "--sync", "async:2"]],
                         ids=["hybrid-sync", "data-async"])
def test_a_stopped_rank_ends_the_run_after_the_bound_naming_it(tmp_path, training):
    marker = uuid.uuid4().hex
    job = _start([*training, "--epochs", "1000", "--test-freq", "1", "--save-path", "K"],
                 tmp_path, marker)
    deadline = time.monotonic() + 60
    while not (tmp_path / "K" / "checkpoint.npz").exists():  # training, past start-up
        assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()
        time.sleep(0.05)
    err = _ends_after_stop(job, rank_pid(marker, 1), marker)
    lines = _error_lines(err)
    assert len(lines) == 1 and lines[0].startswith(f"error: rank 0: waited {BOUND} s for "
                                                   f"rank 1 ("), err
    assert "stopped, hung or far slower than this rank (--rank-timeout" in lines[0]


def test_a_rank_stopped_before_mpi_starts_ends_the_run_after_the_bound(tmp_path):
    marker = uuid.uuid4().hex
    job = _start(["--epochs", "1"], tmp_path, marker)
    deadline = time.monotonic() + 30
    while (pid := rank_pid(marker, 1)) is None:  # stopped as soon as it exists
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.001)
    err = _ends_after_stop(job, pid, marker, launcher_ends_it=False)
    assert _error_lines(err) == [f"error: rank 0: waited {BOUND} s for the other processes to "
                                 f"start MPI (MPI_Init) without an answer: one is stopped, hung "
                                 f"or far slower (--rank-timeout SECONDS sets the bound)"], err


def test_closing_gives_up_only_the_receives_still_pending():
    """A courier's receive that a test completed, or raised on when its peer was killed
    mid-transfer, is MPI_REQUEST_NULL: closing the courier leaves it alone (``MPI_Cancel``
    on it, "Invalid MPI_Request", replaced the run's one line naming the lost rank with
    two chained tracebacks), and gives up a pending one."""
    code = ("import numpy as np\n"
            "from convnet.runtime.processes.mpi_comm import MpiCommunicator\n"
            "comm = MpiCommunicator()\n"
            "done = comm.irecv_bytes(np.zeros(4, np.uint8), 0, 7)\n"
            "sent = comm.isend_bytes(np.ones(4, np.uint8), 0, 7)\n"
            "while not (comm.test(done) and comm.test(sent)):\n"
            "    pass\n"
            "pending = comm.irecv_bytes(np.zeros(4, np.uint8), 0, 8)\n"
            "comm.cancel(done)\n"
            "comm.cancel(pending)\n"
            "print(bool(done), bool(pending))\n")
    done = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "False False\n", "")


def test_an_mpi_error_from_a_lost_peer_names_the_rank():
    """MPICH's error when a peer dies mid-transfer (``process_vm_readv failed``) becomes
    one line naming the peer, not a traceback (the launcher usually ends the survivors
    first, so this is checked on the error itself)."""
    code = ("from mpi4py import MPI\n"
            "from convnet.runtime.processes.mpi_comm import peer_failures\n"
            "with peer_failures([1], \"receiving layer fc's activation\"):\n"
            "    raise MPI.Exception(MPI.ERR_OTHER)\n")
    done = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True,
                          text=True, timeout=60)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("convnet.errors.RankError: lost rank 1 (receiving layer fc's "
                           "activation): the process died or was killed (MPI: "), done.stderr
