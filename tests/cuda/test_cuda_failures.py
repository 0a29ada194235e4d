"""A CUDA failure during a run, without a GPU: the error types CuPy raises
(:mod:`tests.support.fake_cupy`), raised from a kernel in the middle of a real run on
CPU devices, end it with one line naming the error, the operation running and what to
do, exit 1, and the checkpoint saved before stays loadable; an out-of-memory error
names the GPU, the plan's estimate and what was free; and the process ends without
the finalisers that would fail on a broken GPU context."""

from __future__ import annotations

import subprocess
import sys

import pytest

from convnet import kernels
from convnet.app.checkpoint import CHECKPOINT_NAME
from convnet.kernels import nn as knn
from convnet.runtime.devices import backends, cuda_failures
from convnet.runtime.processes import cluster
from tests.support import ROOT
from tests.support.cli import DUMMY, HYBRID_DEF, HYBRID_PARAMS, assert_clean_error, run_main
from tests.support.fake_cupy import (CUDARuntimeError, cuda_runtime_error, cupy_out_of_memory,
                                     pretend_gpus)


@pytest.fixture(autouse=True)
def fresh_failure_state(monkeypatch):
    """A failure silences finaliser reports for the process: give the hook back, and
    forget the failure and the estimates, after each test."""
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    yield
    cuda_failures._failed.clear()
    cuda_failures._estimates.clear()


def _fail_in(monkeypatch, kernel: str, error, when=lambda: True):
    """Make the numpy kernel ``kernel`` raise ``error`` once ``when()`` is true."""
    generic = getattr(knn, kernel).generic

    def failing(*args, **kwargs):
        if when():
            raise error
        return generic(*args, **kwargs)

    monkeypatch.setitem(kernels._OVERRIDES, (kernel, "numpy"), failing)


def test_cuda_errors_are_told_from_others_through_the_chain():
    error = cuda_runtime_error()
    assert cuda_failures.cuda_error(error) is error
    assert cuda_failures.cuda_error(RuntimeError("cudaErrorIllegalAddress")) is None
    try:
        try:
            raise error
        except CUDARuntimeError:
            raise ValueError("closing the executor failed too")
    except ValueError as later:
        assert cuda_failures.cuda_error(later) is error
        assert cuda_failures.as_device_error(later).exit_code == 1
    assert cuda_failures.is_out_of_memory(cupy_out_of_memory(10, 20))
    assert not cuda_failures.is_out_of_memory(MemoryError("numpy's"))


def test_a_cuda_error_mid_run_is_one_line_and_the_checkpoint_stays(monkeypatch, capsys,
                                                                   tmp_path):
    save = tmp_path / "run"
    checkpoint = save / CHECKPOINT_NAME
    # epoch 1 trains and saves; the first fc backward pass after that fails
    _fail_in(monkeypatch, "fc_backward", cuda_runtime_error(), when=checkpoint.exists)
    args = ["--layer-def", HYBRID_DEF, "--layer-params", HYBRID_PARAMS, "--gpu", "0,1",
            *DUMMY, "--epochs", "2"]
    code, out, err = run_main(capsys, *args, "--save-path", save)
    line = assert_clean_error((code, err), 1, "error: CUDA error on GPU ",
                              "during the backward pass of layer ", "on logical device ",
                              "cudaErrorIllegalAddress: an illegal memory access was "
                              "encountered", "make gpu-check", "--backend cpu")
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "epoch   1" in out and "epoch   2" not in out
    assert cuda_failures.failed()
    saved = checkpoint.read_bytes()
    monkeypatch.setitem(kernels._OVERRIDES, ("fc_backward", "numpy"),
                        knn.fc_backward.generic)
    code, out, err = run_main(capsys, "--load-file", checkpoint, "--test-only", "--no-progress")
    assert code == 0, err
    assert checkpoint.read_bytes() == saved
    assert line.count("error:") == 1


def test_out_of_gpu_memory_names_the_gpu_the_estimate_and_what_was_free(monkeypatch, capsys):
    """On the CUDA backend (pretended: one GPU with 40 GiB free, CPU workers for
    devices), the fit check's figures come back in the line."""
    pretend_gpus(monkeypatch, 1, free=40 << 30)
    monkeypatch.setattr(cluster, "make_devices",
                        lambda gpus, backend, first_index=0:
                        backends.make_devices(gpus, "cpu", first_index))
    _fail_in(monkeypatch, "fc_forward", cupy_out_of_memory(3 << 30, 37 << 30))
    code, out, err = run_main(capsys, "--layer-def", HYBRID_DEF, "--layer-params",
                              HYBRID_PARAMS, *DUMMY, "--backend", "cuda")
    line = assert_clean_error((code, err), 1, "error: out of memory on GPU 0 during the "
                              "forward pass of layer ", "CuPy could not allocate 3.0 GiB "
                              "more with 37.0 GiB allocated", "free when the run started",
                              "which had 40.0 GiB free", "a smaller --mini")
    needed, free = cuda_failures._estimates[0]
    assert free == 40 << 30 and "the plan estimated " in line and needed > 0


_SUBPROCESS = """
import sys
import atexit
from convnet.app.command_line import commands, launcher
from tests.support.fake_cupy import cuda_runtime_error

class OnBrokenContext:
    '''A CuPy object whose finaliser fails once the GPU context is broken.'''
    def __del__(self):
        raise RuntimeError("cudaErrorIllegalAddress while unloading a module")

kept = [OnBrokenContext()]  # freed at interpreter shutdown
atexit.register(lambda: print("interpreter shutdown ran", file=sys.stderr))

def failing(args):
    local = OnBrokenContext()  # freed while the error unwinds
    raise cuda_runtime_error()

commands.run_command = failing
sys.argv = ["convnet.py", "--no-progress"]
sys.exit(launcher.main())
"""


def test_after_a_cuda_failure_the_process_ends_without_finalisers():
    proc = subprocess.run([sys.executable, "-c", _SUBPROCESS], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        "error: CUDA error on the GPU: cudaErrorIllegalAddress: an illegal memory access was "
        "encountered; CUDA may report an error at a later call than the one that caused it, "
        "and this process cannot use the GPU any more; make gpu-check tests the GPU and the "
        "CUDA kernels, --backend cpu trains without them; checkpoints saved so far are as "
        "they were"], proc.stderr
