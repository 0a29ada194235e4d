"""bench/bench_cuda.py without a GPU: it exits with a clear message, its dry run (the
CPU backend and PyTorch's CPU at tiny sizes) goes through every part of the run, so
that a short run on a GPU machine is not lost to a crash, and ``--budget`` leaves out
the columns it cannot cover, in the order of bench/cuda_columns.py, and records them.
Its PyTorch model (bench/torch_net.py) is checked against the engine on the CPU in
tests/bench/test_agreement.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from convnet import kernels
from tests.support import ROOT

BENCH = ROOT / "bench" / "bench_cuda.py"


def _bench_module(name: str = "bench_cuda"):
    spec = importlib.util.spec_from_file_location(name, BENCH.parent / f"{name}.py")
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
    assert engine["cuda graph"]["eager_because"] == "not a CUDA device"
    assert set(reference) == {"fp32", "bf16 autocast"}
    assert all(column["seconds"] >= 0 for column in [*engine.values(), *reference.values()])
    assert results["skipped"] == [] and results["budget_seconds"] is None
    # the same weights on both sides (and no dropout in this net): the same first cost
    assert reference["fp32"]["first_cost"] == pytest.approx(engine["default"]["first_cost"],
                                                           rel=1e-4)
    assert "cifar10 (layers-cifar10-11pct.cfg, 3x32x32)" in printed
    assert "engine bf16" in printed and "PyTorch bf16 autocast)" in printed


def test_every_column_has_its_place_in_the_order():
    columns = _bench_module("cuda_columns")
    ordered = [(side, column) for group in columns.ORDER for side, column in group]
    engine = {*columns.ENGINE, *columns.SWITCHES, columns.GENERIC}
    assert len(ordered) == len(set(ordered))
    assert set(ordered) == ({("engine", c) for c in engine} | {("torch", m) for m in columns.TORCH}
                            | {("hybrid", columns.HYBRID)})


def test_the_budget_leaves_out_what_it_cannot_cover_and_records_it(monkeypatch, capsys):
    """Columns that take 2 s (CIFAR-10) and 10 s (AlexNet, the hybrid) of a stand-in
    clock, within 51 s: each net's default and fp32 first, then tf32, then bf16 while
    the time left covers the longest column of that net so far."""
    bench = _bench_module()
    now = [0.0]
    cost = {"cifar10": 2.0, "alexnet": 10.0}

    def engine_column(files, dims, classes, gpus, *rest, **kwargs):
        now[0] += cost["cifar10" if dims[1] == 32 else "alexnet"]
        return {"images_per_s": 100.0 * len(gpus), "memory_bytes": 1 << 20, "_weights": {},
                "_net": None}

    def torch_column(torch, net, weights, mini, dims, *rest, **kwargs):
        now[0] += cost["cifar10" if dims[1] == 32 else "alexnet"]
        return {"images_per_s": 200.0, "memory_bytes": 1 << 19}

    monkeypatch.setattr(bench, "engine_column", engine_column)
    monkeypatch.setattr(bench, "torch_column", torch_column)
    monkeypatch.setattr(bench, "_torch", lambda args, backend: SimpleNamespace())
    args = bench.parse(["--dry-run", "--switches", "--budget", "51"])
    results = bench.run(args, budget=bench.Budget(51, clock=lambda: now[0]))
    ran = {net: {side: list(table[side]) for side in ("engine", "torch")}
           for net, table in results["nets"].items()}
    assert ran == {"cifar10": {"engine": ["default", "tf32", "bf16"], "torch": ["fp32", "tf32"]},
                   "alexnet": {"engine": ["default", "tf32"], "torch": ["fp32", "tf32"]}}
    skipped = [(s["net"], s["side"], s["column"]) for s in results["skipped"]]
    assert skipped[:4] == [("cifar10", "torch", "bf16 autocast"), ("alexnet", "engine", "bf16"),
                           ("alexnet", "torch", "bf16 autocast"),
                           ("alexnet", "hybrid", "four logical devices")]
    assert len(skipped) == 16 and "hybrid" not in results
    assert results["skipped"][1]["reason"] == ("the 51 s budget: 1 s left, a column of "
                                               "alexnet took 10 s")
    assert results["nets"]["alexnet"]["engine"]["tf32"]["seconds"] == 10.0
    assert "left out (the 51 s budget): cifar10 torch bf16 autocast, alexnet engine bf16" \
        in capsys.readouterr().out


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
