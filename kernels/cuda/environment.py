"""What the CUDA backend will run on: ``python -m convnet.kernels.cuda.environment``.

Prints the GPU(s), driver, CUDA runtime, NVRTC, NCCL, CuPy, numpy and PyTorch
versions and the environment variables that change the backend's arithmetic, so a
benchmark or a failing test report carries the facts needed to reproduce it, then
the self-test of the fused kernels on every GPU (:mod:`convnet.kernels.cuda.self_test`).
A piece that cannot be queried (no driver, no GPU) is printed as unavailable with
the reason.  ``--json FILE`` also writes the report as JSON (``make gpu-check`` reads
it), before the self-test (``self_test`` null) and again after it.  Exits 2 when CuPy is missing or sees no GPU (the reason is printed), 1 when the
self-test fails on a GPU (the backend then runs the generic kernels for the failing
families), else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import warnings
from pathlib import Path

from .versions import compiler_text, cuda_version, driver_release, gpu_name, queried

#: environment variables that change what the CUDA backend computes or how
VARIABLES = ("CUPY_TF32", "CONVNET_CUDA_KERNELS", "CONVNET_ALLREDUCE", "CUDA_VISIBLE_DEVICES",
             "CUBLAS_WORKSPACE_CONFIG", "CUPY_CACHE_DIR")
def describe() -> list[str]:
    """The report's lines (raises ImportError without CuPy)."""
    import numpy
    import cupy

    rt = cupy.cuda.runtime
    cuda = queried(lambda: cuda_version(rt.driverGetVersion()))
    lines = [f"python {platform.python_version()} ({sys.executable}), numpy {numpy.__version__}",
             f"CuPy {cupy.__version__}, CUDA runtime {queried(rt.runtimeGetVersion)}, "
             f"driver {driver_release()} (CUDA {cuda}), "
             f"NVRTC {queried(lambda: '.'.join(map(str, cupy.cuda.nvrtc.getVersion())))}"]
    for index in range(_gpu_count(lines)):
        props = rt.getDeviceProperties(index)
        lines.append(f"GPU {index}: {gpu_name(props)}, compute capability "
                     f"{props['major']}.{props['minor']}, {props['multiProcessorCount']} SMs, "
                     f"{props['totalGlobalMem'] / 2 ** 30:.1f} GiB")

    def nccl():
        with warnings.catch_warnings(record=True) as caught:  # CuPy warns when libnccl is absent
            warnings.simplefilter("always")
            from cupy.cuda import nccl as module
        if module.available:
            return module.get_version()
        reasons = [line for w in caught for line in str(w.message).splitlines()
                   if line.startswith("Reason:")]
        return "unavailable to this CuPy" + (f" ({reasons[0]})" if reasons else "")

    lines.append(f"NCCL {queried(nccl)}")

    def torch_version():
        import torch
        return (f"{torch.__version__} (CUDA {torch.version.cuda}, "
                f"cuDNN {torch.backends.cudnn.version()}, sees GPU: {torch.cuda.is_available()})")

    lines.append(f"PyTorch {queried(torch_version)}")
    lines.append("environment: " + (", ".join(f"{v}={os.environ[v]}" for v in VARIABLES
                                              if v in os.environ) or "(none set)"))
    return lines


def _gpu_count(lines: list[str]) -> int:
    import cupy

    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # noqa: BLE001 - no driver or no device: reported
        lines.append(f"GPUs: unavailable ({type(error).__name__}: "
                     f"{' '.join(str(error).split())})")
        return 0


def self_tests() -> list[dict]:
    """The self-test of the fused kernels on every GPU (each run afresh)."""
    import cupy

    from convnet.kernels.cuda import self_test

    out = []
    for gpu in range(_gpu_count([])):
        with cupy.cuda.Device(gpu):
            result = self_test.run()
            out.append({"gpu": gpu, "compiler": compiler_text(gpu), "ok": not result.failed,
                        "seconds": result.seconds, "text": result.text(),
                        "families": [vars(r) for r in result.results]})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m convnet.kernels.cuda.environment",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    from convnet.kernels import cuda

    reason = cuda.unavailable_reason()
    try:
        lines = describe()
    except ImportError as error:
        print(f"no CuPy: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines), flush=True)
    report = {"lines": lines, "backend_unavailable": reason or None,
              "self_test": [] if reason else None}  # None: not finished

    def save():  # before the self-test too: a time limit may stop it (first compiles)
        if args.json is not None:
            args.json.write_text(json.dumps(report, indent=1) + "\n")

    save()
    if not reason:
        report["self_test"] = self_tests()
        for result in report["self_test"]:
            print(f"GPU {result['gpu']} {result['text']}")
        save()
    if reason:
        print(f"the CUDA backend cannot run here: {reason}", file=sys.stderr)
        return 2
    return 0 if all(r["ok"] for r in report["self_test"]) else 1


if __name__ == "__main__":
    sys.exit(main())
