"""bench/bench_cuda.py without a GPU: it exits with a clear message, and its dry run (the
CPU backend and PyTorch's CPU at tiny sizes) goes through every part of the run, so
that a short run on a GPU machine is not lost to a crash.  Its PyTorch model
(bench/torch_net.py) is checked against the engine on the CPU in
tests/bench/test_agreement.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from convnet import kernels
from tests.support import ROOT

BENCH = ROOT / "bench" / "bench_cuda.py"


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_cuda", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH.parent))
    return module


@pytest.mark.skipif(kernels.cupy_available(), reason="a CUDA GPU is present")
def test_without_a_gpu_the_benchmark_says_so_and_exits_2():
    proc = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "no CUDA GPU to benchmark on" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_dry_run_of_cifar10_goes_through_its_columns(tmp_path, monkeypatch, capsys):
    """CIFAR-10 with its columns (one engine precision and one autocast mode standing
    for the others: float16 on numpy and on PyTorch's CPU is slow), a switch and the
    JSON."""
    torch = pytest.importorskip("torch")
    bench = _bench_module()
    monkeypatch.setattr(bench, "ENGINE", {k: bench.ENGINE[k] for k in ("default", "tf32",
                                                                      "bf16")})
    monkeypatch.setattr(bench, "SWITCHES", {"cuda graph": bench.SWITCHES["cuda graph"]})
    monkeypatch.setattr(bench, "TORCH", ("fp32", "bf16 autocast"))
    out = tmp_path / "bench.json"
    assert bench.main(["--dry-run", "--switches", "--mini", "2", "--nets", "cifar10",
                       "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    results = json.loads(out.read_text())
    assert results["versions"]["backend"] == "cpu"
    assert results["versions"]["torch"] == torch.__version__
    table = results["nets"]["cifar10"]
    engine, reference = table["engine"], table["torch"]
    assert set(engine) == {"default", "tf32", "bf16", "cuda graph"}
    assert "tf32 computes on GPU tensor cores" in engine["tf32"]["error"]  # CPU: refused
    for column in ("default", "bf16", "cuda graph"):
        assert engine[column]["images_per_s"] > 0 and engine[column]["host_waits"] == 1
    assert set(reference) == {"fp32", "bf16 autocast"}
    # the same weights on both sides (and no dropout in this net): the same first cost
    assert reference["fp32"]["first_cost"] == pytest.approx(engine["default"]["first_cost"],
                                                           rel=1e-4)
    assert "cifar10 (layers-cifar10-11pct.cfg, 3x32x32)" in printed
    # the flat keys bench/gpu_check_summary.py reads
    assert results["cifar10_engine_images_per_s"] == engine["default"]["images_per_s"]
    assert results["cifar10_torch_images_per_s"] == reference["fp32"]["images_per_s"]


@pytest.mark.slow
def test_the_dry_run_of_alexnet_and_the_hybrid_comparison(tmp_path, monkeypatch, capsys):
    """AlexNet (at 67x67, its smallest input) and the hybrid config on four logical
    devices: five seconds of the suite's time, so only with -m slow (the code it adds to
    the CIFAR-10 run above is the hybrid's ratio)."""
    bench = _bench_module()
    out = tmp_path / "bench.json"
    monkeypatch.setattr(bench, "ENGINE", {"default": bench.ENGINE["default"]})
    assert bench.main(["--dry-run", "--mini", "4", "--nets", "alexnet", "--skip-torch",
                       "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["nets"]["alexnet"]["engine"]["default"]["images_per_s"] > 0
    assert results["hybrid"]["ratio_to_1gpu"] > 0
    assert "4gpu-data-model.cfg on --gpu 0,0,0,0" in capsys.readouterr().out
