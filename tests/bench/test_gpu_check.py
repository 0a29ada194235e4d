"""``make gpu-check`` (bench/gpu_check.sh) without a GPU.

With a stand-in for the machine's python that plays each stage (a training run
that fails with a CUDA error, tests with failures, a benchmark that hangs), the real
script runs every stage within its limit and the call's budget: a failing stage does
not stop the later ones, a hanging one is stopped and reported as out of time, the
stages left when the budget is spent are skipped, and the summary and summary.json
carry every figure the stages left.  With the real python on this machine the
stages that need a GPU are skipped with the reason, and the exit status says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

SCRIPT = ROOT / "bench" / "gpu_check.sh"

ENVIRONMENT = {"lines": ["python 3.12", "CuPy 14.2.0, CUDA runtime 13000, driver 580.65.06 "
                         "(CUDA 13.0), NVRTC 13.0", "GPU 0: NVIDIA H200"],
               "backend_unavailable": None,
               "self_test": [{"gpu": 0, "ok": False, "seconds": 0.04, "families": [],
                              "compiler": "GPU 0 (NVIDIA H200) with NVRTC 13.0",
                              "text": "self-test: FAILED for pool (the generic kernels run "
                                      "instead): cvn_pool_bwd: max pooling ..."}]}
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest"
tests="5" failures="1" errors="0" skipped="1"><testcase classname="tests.cuda.test_gpu"
name="test_a"/><testcase classname="tests.cuda.test_gpu" name="test_pool[max]"><failure
message="x"/></testcase><testcase classname="tests.cuda.test_gpu" name="test_c"/><testcase
classname="tests.cuda.test_gpu" name="test_d"><skipped/></testcase><testcase
classname="tests.cuda.test_gpu" name="test_e"/></testsuite></testsuites>"""

# The stand-in python: the package's own imports and the summary run for real; every
# stage is played from what the arguments ask for.
FAKE_PYTHON = f"""#!{sys.executable}
import json, os, sys, time
args = sys.argv[1:]
line = " ".join(args)

def value(flag):
    for i, a in enumerate(args):
        if a == flag:
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]

if "unavailable_reason" in line:
    print("")  # a GPU is usable
elif "gpu_check_summary.py" in line or line == "-c import convnet.kernels.cuda":
    os.execv({sys.executable!r}, [{sys.executable!r}] + args)
elif "convnet.kernels.cuda.environment" in line:
    open(value("--json"), "w").write({json.dumps(json.dumps(ENVIRONMENT))})
    print("GPU 0 self-test: FAILED")
    sys.exit(1)
elif "convnet.py" in line and "cifar10" not in line:
    print("cuda backend, logical device -> physical: 0 -> GPU 0, 1 -> GPU 0 (no --gpu: in "
          "turn on this machine's 1 GPU, as --gpu 0,0)")
    print("epoch   3 batch   5  train cost 0.4 error 9.0%  |  test cost 0.3 error 8.0%  |  "
          "  31234 img/s  lr 0.05")
    print("finished in 2.0 s: final test error 8.00%")
elif "convnet.py" in line:
    print("error: CUDA error on GPU 0 during the backward pass of layer pool1 on logical "
          "device 0: cudaErrorIllegalAddress: an illegal memory access was encountered",
          file=sys.stderr)
    sys.exit(1)
elif args[:2] == ["-m", "pytest"]:
    open(value("--junitxml"), "w").write({JUNIT!r})
    sys.exit(1)
elif "bench_cuda.py" in line:
    time.sleep(60)  # hangs: stopped at its limit
else:
    print("unexpected stage: " + line, file=sys.stderr)
    sys.exit(9)
"""


def _run(tmp_path: Path, env: dict, *stages: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(tmp_path / "logs"), *stages],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, **env})


def test_every_stage_is_bounded_and_reported_and_a_failure_hides_nothing(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    # 21 s: 6 s for the stages after the summary's reserve and the kill's grace
    proc = _run(tmp_path, {"PYTHON": str(fake), "GPU_CHECK_BUDGET": "21"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    logs = tmp_path / "logs"
    summary = json.loads((logs / "summary.json").read_text())
    status = {s["stage"]: s["status"] for s in summary["stages"]}
    assert status == {"environment": "failed", "example": "passed", "cifar10": "failed",
                      "tests": "failed", "bench": "timeout", "memory": "skipped",
                      "data": "skipped"}
    bench = next(s for s in summary["stages"] if s["stage"] == "bench")
    assert bench["exit"] == 124 and bench["limit"] <= 6
    assert all("budget" in s["note"] for s in summary["stages"] if s["status"] == "skipped")
    assert summary["tests"] == {"passed": 3, "failed": 1, "skipped": 1,
                                "failed_tests": ["test_gpu::test_pool[max]"]}
    assert summary["example"]["images_per_s"] == 31234
    assert summary["example"]["final_test_error_percent"] == 8.0
    assert "cudaErrorIllegalAddress" in summary["cifar10"]["error"]
    screen = proc.stdout[proc.stdout.index("gpu-check summary"):].splitlines()
    assert len(screen) <= 20
    for line in ("stages: environment failed (", "self-test: FAILED for pool",
                 "tests: 3 passed, 1 failed, 1 skipped; failed: test_gpu::test_pool[max]",
                 "example: 31,234 img/s, final test error 8.00%; 0 -> GPU 0, 1 -> GPU 0 (no "
                 "--gpu:", "cifar10: ? img/s, final test error ?%; ERROR: CUDA error on GPU 0",
                 "bench: no result", "memory: no result", "data: no result"):
        assert any(l.startswith(line) or line in l for l in screen), (line, screen)


def test_without_a_gpu_the_stages_that_need_one_say_why(tmp_path):
    proc = _run(tmp_path, {"PYTHON": sys.executable}, "environment", "example", "bench")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert [s["status"] for s in summary["stages"]] == ["failed", "skipped", "skipped"]
    assert summary["no_gpu"] and "no GPU: " + summary["no_gpu"] in proc.stdout
    assert "self-test: not run (no GPU)" in proc.stdout


def test_an_unknown_stage_is_refused(tmp_path):
    proc = _run(tmp_path, {"PYTHON": sys.executable}, "environment", "smoke")
    assert proc.returncode == 2 and "unknown stage 'smoke'" in proc.stderr


def test_the_summary_of_the_figures_stages_leave(tmp_path):
    """bench, memory and data as their scripts write them."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_check_summary

    (tmp_path / "bench.json").write_text(json.dumps({
        "gpu": "NVIDIA H200", "cifar10_engine_images_per_s": 9000.0,
        "cifar10_torch_images_per_s": 20000.0, "cifar10_engine_generic_images_per_s": 7000.0,
        "alexnet_hybrid_4_logical_images_per_s": 1200.0}))
    (tmp_path / "memory.json").write_text(json.dumps({"steps": 3, "configs": [
        {"config": "imagenet-1gpu", "mini": 128, "gpus": "0", "pool_bytes": 4637 << 20,
         "used_bytes_after_step": 0, "estimate_bytes": 4646 << 20}]}))
    (tmp_path / "data.json").write_text(json.dumps({
        "config": "layers-imagenet-2gpu-data.cfg", "gpus": "0,0", "images": 2048,
        "wait_seconds": 0.42, "wait_percent": 3.1, "train_seconds": 13.2,
        "images_per_s": 1150.0}))
    summary = gpu_check_summary.summarize(tmp_path)
    assert summary["bench"] == {
        "cifar10": {"engine": 9000.0, "torch": 20000.0, "ratio": 0.45},
        "alexnet_hybrid_4_logical": {"engine": 1200.0, "torch": None, "ratio": None}}
    lines = gpu_check_summary.text(summary)
    assert ("bench: cifar10 engine 9,000 img/s, PyTorch 20,000 img/s, engine/PyTorch 0.45; "
            "alexnet_hybrid_4_logical engine 1,200 img/s") in lines
    assert ("memory (CuPy pool, estimate): imagenet-1gpu mini 128 --gpu 0: 4,637 MiB held, "
            "4,646 MiB estimated (1.00)") in lines
    assert ("data (--data-provider image, layers-imagenet-2gpu-data.cfg, --gpu 0,0): waited "
            "0.42 s for data, 3.1% of 13.2 s of training; 1,150 img/s") in lines
    assert gpu_check_summary.exit_status(summary) == 0
