"""bench/bench_imagenet.py: bad sizes end with a clear message and exit 2, and the
PyTorch process it shares between 1gpu and 2gpu-data times the same work."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
import bench_imagenet  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["--size", "32"], "--size 32 does not fit the nets"),
    (["--mini", "3"], "--mini must be an even number"),
])
def test_bad_sizes_say_what_is_wrong_and_exit_2(argv, message):
    proc = subprocess.run([sys.executable, str(BENCH / "bench_imagenet.py"), *argv],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_1gpu_and_2gpu_data_are_the_same_work_and_2gpu_model_is_not():
    one, data, model = (bench_imagenet.signature(bench_imagenet.load(name, 64))
                        for name in ("1gpu", "2gpu-data", "2gpu-model"))
    assert one == data
    assert one != model
    net = bench_imagenet.load("1gpu", 64)
    net["conv2"].params["momW"] = [0.5]  # only learning rates are left out
    assert bench_imagenet.signature(net) != one
