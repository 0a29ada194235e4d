"""``make gpu-check`` (bench/gpu_check.sh) without a GPU.

With a stand-in for the machine's python that plays each stage (a training run
that fails with a CUDA error, tests with failures, a benchmark that hangs after
writing its first columns), the real script runs every stage within its limit and
the call's budget: a failing stage does not stop the later ones, the benchmark takes
the time the last stage does not need, is stopped at its limit and reported as out
of time with what it measured, the last stage still runs, a stage left when the
budget is spent is skipped, a rerun of one stage keeps the others' results, and the
summary and summary.json carry every figure the stages left.  With the real python
on this machine the stages that need a GPU are skipped with the reason, and the exit
status says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

SCRIPT = ROOT / "bench" / "gpu_check.sh"
sys.path.insert(0, str(ROOT / "bench"))
import gpu_check_summary  # noqa: E402

ENVIRONMENT = {"lines": ["python 3.12", "CuPy 14.2.0, CUDA runtime 13000, driver 580.65.06 "
                         "(CUDA 13.0), NVRTC 13.0", "GPU 0: NVIDIA H200"],
               "backend_unavailable": None,
               "self_test": [{"gpu": 0, "ok": False, "seconds": 0.04, "families": [],
                              "compiler": "GPU 0 (NVIDIA H200) with NVRTC 13.0",
                              "text": "self-test: FAILED for pool (the generic kernels run "
                                      "instead): cvn_pool_bwd: max pooling ..."}]}


def _junit(passed: int, failed: list[str], skipped: int) -> str:
    cases = ([f'<testcase classname="tests.cuda.test_gpu" name="test_{i}"/>'
              for i in range(passed)]
             + [f'<testcase classname="tests.cuda.test_gpu" name="{name}"><failure '
                f'message="x"/></testcase>' for name in failed]
             + [f'<testcase classname="tests.cuda.test_gpu" name="skip_{i}"><skipped/>'
                f'</testcase>' for i in range(skipped)])
    return (f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
            f'tests="{len(cases)}" failures="{len(failed)}" errors="0" skipped="{skipped}">'
            + "".join(cases) + "</testsuite></testsuites>")


MIB = 1 << 20
#: what bench_cuda.py has written when its stage's limit stops it
BENCH = {"mini": 128, "nets": {
    "cifar10": {"engine": {"default": {"images_per_s": 9000.0, "memory_bytes": 700 * MIB},
                           "cuda graph": {"images_per_s": 18000.0, "memory_bytes": 800 * MIB}},
                "torch": {"fp32": {"images_per_s": 20000.0, "memory_bytes": 350 * MIB}}},
    "alexnet": {"engine": {"default": {"images_per_s": 3000.0, "memory_bytes": 3200 * MIB},
                           "cuda graph": {"images_per_s": 3000.0, "eager_because": "dropout"}},
                "torch": {"fp32": {"error": "RuntimeError: CUDA out of memory"}}}},
    "hybrid": {"four_logical_devices": {"images_per_s": 2400.0}, "ratio_to_1gpu": 0.8,
               "gpus": "0,0,0,0"},
    "skipped": [{"net": "cifar10", "side": "engine", "column": "fp16",
                 "reason": "the 2 s budget: 0 s left"},
                {"net": "cifar10", "side": "torch", "column": "fp16 autocast",
                 "reason": "the 2 s budget: 0 s left"}]}
MEMORY = {"steps": 3, "configs": [
    {"config": "imagenet-1gpu", "mini": 128, "gpus": "0", "pool_bytes": 4637 * MIB,
     "used_bytes_after_step": 0, "estimate_bytes": 4646 * MIB}]}
DATA = {"config": "layers-imagenet-2gpu-data.cfg", "gpus": "0,0", "images": 2048,
        "wait_seconds": 0.42, "wait_percent": 3.1, "train_seconds": 13.2,
        "images_per_s": 1150.0}

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

def write(flag, text):
    with open(value(flag), "w") as out:
        out.write(text)

if "unavailable_reason" in line:
    print("")  # a GPU is usable
elif "gpu_check_summary.py" in line or line == "-c import convnet.kernels.cuda":
    os.execv({sys.executable!r}, [{sys.executable!r}] + args)
elif "convnet.kernels.cuda.environment" in line:
    write("--json", {json.dumps(json.dumps(ENVIRONMENT))})
    print("GPU 0 self-test: FAILED")
    sys.exit(1)
elif args[:2] == ["-m", "pytest"] and "test_gpu_speed.py" in line:
    write("--junitxml", {_junit(13, [], 1)!r})
elif args[:2] == ["-m", "pytest"]:
    write("--junitxml", {_junit(3, ["test_pool[max]"], 1)!r})
    sys.exit(1)
elif "convnet.py" in line and ("cifar10" not in line or os.environ.get("FAKE_CIFAR10_OK")):
    if "cifar10" not in line:
        print("cuda backend, logical device -> physical: 0 -> GPU 0, 1 -> GPU 0 (no --gpu: "
              "in turn on this machine's 1 GPU, as --gpu 0,0)")
    print("epoch   3 batch   5  train cost 0.4 error 9.0%  |  test cost 0.3 error 8.0%  |  "
          "  31234 img/s  lr 0.05")
    print("finished in 2.0 s: final test error 8.00%")
elif "convnet.py" in line:
    print("error: CUDA error on GPU 0 during the backward pass of layer pool1 on logical "
          "device 0: cudaErrorIllegalAddress: an illegal memory access was encountered",
          file=sys.stderr)
    sys.exit(1)
elif "cuda_memory.py" in line:
    write("--json", {json.dumps(MEMORY)!r})
elif "bench_cuda.py" in line:
    write("--json", {json.dumps(BENCH)!r})
    print("bench_cuda " + line, flush=True)
    time.sleep(60)  # hangs: stopped at its limit
elif "cuda_data_wait.py" in line:
    write("--json", {json.dumps(DATA)!r})
else:
    print("unexpected stage: " + line, file=sys.stderr)
    sys.exit(9)
"""


def _run(log: Path, env: dict, *stages: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(log), *stages], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env={**os.environ, **env})


def _fake(tmp_path: Path) -> str:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return str(fake)


def _statuses(log: Path) -> dict:
    summary = json.loads((log / "summary.json").read_text())
    return {s["stage"]: s["status"] for s in summary["stages"]}


def test_every_stage_is_bounded_and_reported_and_a_failure_hides_nothing(tmp_path):
    log, fake = tmp_path / "logs", _fake(tmp_path)
    # 28 s: 13 s after the summary's reserve and the kill's grace, of which the data
    # stage's 3 s and grace are kept from the benchmark (its own limit: 2 s)
    env = {"PYTHON": fake, "GPU_CHECK_BUDGET": "28", "LIMIT_bench": "2", "LIMIT_data": "3"}
    proc = _run(log, env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _statuses(log) == {"environment": "failed", "tests": "failed", "proofs": "passed",
                              "example": "passed", "cifar10": "failed", "memory": "passed",
                              "bench": "timeout", "data": "passed"}
    summary = json.loads((log / "summary.json").read_text())
    bench = next(s for s in summary["stages"] if s["stage"] == "bench")
    assert bench["exit"] == 124 and 2 <= bench["limit"] <= 5
    asked = (log / "bench.log").read_text().split()
    assert asked[asked.index("--budget") + 1] == str(bench["limit"] // 2)
    assert "--switches" in asked
    assert summary["tests"] == {"passed": 3, "failed": 1, "skipped": 1,
                                "failed_tests": ["test_gpu::test_pool[max]"]}
    assert summary["proofs"]["passed"] == 13 and summary["proofs"]["failed"] == 0
    assert summary["example"]["images_per_s"] == 31234
    assert "cudaErrorIllegalAddress" in summary["cifar10"]["error"]
    assert summary["bench"]["nets"]["cifar10"]["against_torch"]["default"] == {
        "torch_mode": "fp32", "speed": 0.45, "memory": 2.0}
    assert summary["memory"] == MEMORY and summary["data"] == DATA
    screen = proc.stdout[proc.stdout.index("gpu-check summary"):].splitlines()
    assert len(screen) <= 30
    for line in ("gpu-check summary (", "stages: environment failed (", "proofs passed (",
                 "self-test: FAILED for pool",
                 "tests: 3 passed, 1 failed, 1 skipped; failed: test_gpu::test_pool[max]",
                 "proofs: 13 passed, 0 failed, 1 skipped",
                 "example: 31,234 img/s, final test error 8.00%; 0 -> GPU 0, 1 -> GPU 0 (no "
                 "--gpu:", "cifar10: ? img/s, final test error ?%; ERROR: CUDA error on GPU 0",
                 "memory (CuPy pool, estimate): imagenet-1gpu mini 128 --gpu 0: 4,637 MiB "
                 "held, 4,646 MiB estimated (1.00)",
                 "data (--data-provider image, layers-imagenet-2gpu-data.cfg, --gpu 0,0): "
                 "waited 0.42 s for data, 3.1% of 13.2 s of training; 1,150 img/s"):
        assert any(line in l for l in screen), (line, screen)


def test_the_benchmark_table_on_the_screen():
    """Every engine column against PyTorch in the same mode, a CUDA graph that ran eager
    marked, PyTorch's own figures, memory, the hybrid and what the budget left out."""
    summary = {"seconds": 400, "budget": 540, "no_gpu": None, "stages": [],
               "environment": None, "self_test": None, "tests": None, "proofs": None,
               "example": None, "cifar10": None, "memory": None, "data": None,
               "bench": json.loads(json.dumps(BENCH))}
    for table in summary["bench"]["nets"].values():
        table["against_torch"] = gpu_check_summary.against_torch(table)
    screen = [" ".join(line.split()) for line in gpu_check_summary.text(summary)]
    start = screen.index("cifar10 alexnet")
    assert screen[start - 1].startswith("bench, img/s (x: engine / PyTorch in the same mode")
    assert screen[start + 1:start + 7] == [
        "default 9,000 0.45x 3,000", "cuda graph 18,000 0.90x 3,000 eager",
        "PyTorch fp32 20,000 error", "MiB: pool/PyTorch fp32 700/350 2.00x 3,200/?",
        "hybrid 4gpu-data-model on --gpu 0,0,0,0: 2,400 img/s = 0.80x the 1gpu config",
        "left out (the 2 s budget): cifar10 fp16, cifar10 PyTorch fp16 autocast"]
    assert screen[0] == "gpu-check summary (400 s of 540)"


def test_a_rerun_of_some_stages_keeps_the_others_results(tmp_path):
    log, fake = tmp_path / "logs", _fake(tmp_path)
    (log).mkdir()
    (log / "stages.tsv").write_text("".join(
        f"{stage}\t{status}\t{code}\t1\t60\t\n" for stage, status, code in (
            ("tests", "failed", 1), ("cifar10", "failed", 1), ("data", "passed", 0))))
    (log / "tests.xml").write_text(_junit(3, ["test_pool[max]"], 1))
    (log / "cifar10.log").write_text("error: cudaErrorIllegalAddress\n")
    proc = _run(log, {"PYTHON": fake, "FAKE_CIFAR10_OK": "1"}, "cifar10", "environment")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # failed stages, now and before
    assert list(_statuses(log).items()) == [("environment", "failed"), ("tests", "failed"),
                                            ("cifar10", "passed"), ("data", "passed")]
    summary = json.loads((log / "summary.json").read_text())
    assert summary["cifar10"] == {"images_per_s": 31234, "final_test_error_percent": 8.0}
    assert summary["tests"]["failed_tests"] == ["test_gpu::test_pool[max]"]


def test_a_spent_budget_skips_what_is_left(tmp_path):
    log = tmp_path / "logs"
    proc = _run(log, {"PYTHON": _fake(tmp_path), "GPU_CHECK_BUDGET": "15"}, "example", "data")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((log / "summary.json").read_text())
    assert [(s["stage"], s["status"], s["note"]) for s in summary["stages"]] == [
        ("example", "skipped", "the 15 s budget was spent"),
        ("data", "skipped", "the 15 s budget was spent")]
    assert "stages: example skipped (budget spent), data skipped (budget spent)" in proc.stdout


INSTALLING_PYTHON = f"""#!{sys.executable}
import os, sys
args, marker = sys.argv[1:], os.path.join(os.path.dirname(sys.argv[0]), "installed")
if args[:3] == ["-m", "pip", "install"]:
    print("pip " + " ".join(args[3:]))
    if os.environ.get("FAKE_PIP_FAILS"):
        sys.exit("ERROR: Could not find a version that satisfies the requirement setuptools")
    open(marker, "w").close()
elif args == ["-c", "import convnet.kernels.cuda"] and not os.path.exists(marker):
    sys.exit("ModuleNotFoundError: No module named 'convnet'")
else:
    os.execv({sys.executable!r}, [{sys.executable!r}] + args)
"""


def test_a_python_without_the_package_gets_it_installed_alone(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(INSTALLING_PYTHON)
    fake.chmod(0o755)
    log = tmp_path / "logs"
    env = {"PYTHON": str(fake), "GPU_CHECK_BUDGET": "15", "FAKE_PIP_FAILS": "1"}
    failed = _run(log, env, "example")
    assert failed.returncode == 3
    assert failed.stderr.startswith(f"gpu_check: {fake} cannot import the package, and ")
    assert "No module named 'convnet'" in failed.stderr
    proc = _run(log, {**env, "FAKE_PIP_FAILS": ""}, "example")
    assert (log / "install.log").read_text() == (
        "pip --no-deps --no-build-isolation --no-index -e .\n")
    assert "=== install: " in proc.stdout and "gpu-check summary" in proc.stdout


def test_without_a_gpu_the_stages_that_need_one_say_why(tmp_path):
    proc = _run(tmp_path / "logs", {"PYTHON": sys.executable}, "environment", "example",
                "bench")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "logs" / "summary.json").read_text())
    assert [s["status"] for s in summary["stages"]] == ["failed", "skipped", "skipped"]
    assert summary["no_gpu"] and "no GPU: " + summary["no_gpu"] in proc.stdout
    assert "self-test: not run (no GPU)" in proc.stdout


def test_an_unknown_stage_is_refused(tmp_path):
    proc = _run(tmp_path / "logs", {"PYTHON": sys.executable}, "environment", "smoke")
    assert proc.returncode == 2 and "unknown stage 'smoke'" in proc.stderr
