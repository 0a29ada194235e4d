"""The memory fit check against the process: its estimate against the measured peak,
the process's own limits, and an allocation that fails anyway.

* The host-RAM estimate (the devices' peaks with their kernels' temporaries, the
  worker threads, the data pipeline: convnet/app/run/memory_fit.py) is within 0.85-1.15
  of what a real run adds to its peak resident size, on two reference nets
  (bench/bench_memory.py measures all of them, docs/BENCHMARKS.md lists the ratios).
* ``ulimit -v`` is read: a net that needs more than the limit leaves is refused in one
  line naming it; cgroup v1 and v2 limits are read from their files.
* A ``MemoryError`` past the check, here numpy's from a worker thread, ends the run
  with one line and exit 1, no traceback.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from convnet.app.run.memory_limits import cgroup_limit
from tests.support import ROOT
from tests.support.cli import DUMMY, HYBRID_DEF, HYBRID_PARAMS, assert_clean_error, command
from tests.support.peak_memory import estimated_peak, measured_peak

REF = ROOT / "examples" / "cuda-convnet2"


def _reference(name: str, dims: str, classes: int, mini: int) -> list:
    return ["--layer-def", REF / f"layers-{name}.cfg", "--layer-params",
            REF / f"layer-params-{name}.cfg", "--data-provider", "dummy", "--data-dims", dims,
            "--num-classes", classes, "--gpu", "0", "--mini", mini, "--dummy-cases", mini,
            "--train-range", "1-3", "--test-range", "4", "--epochs", "1", "--no-progress"]


@pytest.mark.parametrize("args", [_reference("cifar10-11pct", "3x32x32", 10, 32),
                                  _reference("imagenet-1gpu", "3x64x64", 1000, 16)],
                         ids=["cifar10-mini32", "imagenet-1gpu-64px-mini16"])
def test_the_estimate_is_within_15_percent_of_the_measured_peak(args):
    measured, _ = measured_peak(args)
    estimate = estimated_peak(args)
    assert 0.85 <= measured / estimate <= 1.15, (measured / 2**20, estimate / 2**20)


def test_the_address_space_limit_is_read_and_named():
    args = _reference("imagenet-1gpu", "3x224x224", 1000, 64)
    line = " ".join(f"'{a}'" for a in command(*args))
    proc = subprocess.run(["bash", "-c", f"ulimit -v 1000000; exec {line}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert_clean_error(proc, 1, "not enough memory", "address-space limit (ulimit -v 1000000)",
                       "--mini")


@pytest.mark.parametrize("version, files", [
    ("v2", {"memory.max": "1073741824", "memory.current": "268435456"}),
    ("v1", {"memory.limit_in_bytes": "1073741824", "memory.usage_in_bytes": "268435456"}),
])
def test_the_cgroup_limit_less_its_usage_is_read(tmp_path, version, files):
    base = tmp_path / ("memory" if version == "v1" else "")
    own = base / "box" / "job"
    own.mkdir(parents=True)
    for name, value in files.items():
        (own / name).write_text(value + "\n")
    (base / "box" / next(iter(files))).write_text("max\n" if version == "v2" else
                                                  str(2**63 - 4096) + "\n")
    limit = cgroup_limit(tmp_path, (version, "/box/job"))
    assert limit.available == 768 << 20 and next(iter(files)) in limit.name
    assert cgroup_limit(tmp_path, (version, "/elsewhere")) is None


def test_a_memory_error_in_a_worker_thread_is_one_line(monkeypatch, capsys):
    from convnet import kernels
    from convnet.app.command_line.main import main

    def allocate_too_much(*args, **kwargs):
        return np.empty((1 << 42,), np.float32)  # 16 TiB: numpy's _ArrayMemoryError

    # the fc layers' backward runs on the devices' worker threads (--gpu 0,1)
    monkeypatch.setitem(kernels._OVERRIDES, ("fc_backward", "numpy"), allocate_too_much)
    code = main(["--layer-def", str(HYBRID_DEF), "--layer-params", str(HYBRID_PARAMS),
                 "--gpu", "0,1", *DUMMY])
    assert_clean_error((code, capsys.readouterr().err), 1, "out of memory",
                       "Unable to allocate 16.0 TiB", "--mini")
