"""bench/bench_cuda.py without a GPU: it exits with a clear message.  Its PyTorch
model (bench/torch_net.py) is checked against the engine on the CPU in
tests/bench/test_agreement.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from convnet import kernels
from tests.support import ROOT

BENCH = ROOT / "bench" / "bench_cuda.py"


@pytest.mark.skipif(kernels.cupy_available(), reason="a CUDA GPU is present")
def test_without_a_gpu_the_benchmark_says_so_and_exits_2():
    proc = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "no CUDA GPU to benchmark on" in proc.stderr
    assert "Traceback" not in proc.stderr
