"""What the CUDA backend will run on: ``python -m convnet.kernels.cuda.environment``.

Prints the GPU(s), driver, CUDA runtime, NVRTC, NCCL, CuPy, numpy and PyTorch
versions and the environment variables that change the backend's arithmetic, so a
benchmark or a failing test report carries the facts needed to reproduce it.
A piece that cannot be queried (no driver, no GPU) is printed as unavailable with
the reason.  Exits 2 when CuPy is missing or sees no GPU (the reason is printed).
"""

from __future__ import annotations

import os
import platform
import sys
import warnings

#: environment variables that change what the CUDA backend computes or how
VARIABLES = ("CUPY_TF32", "CONVNET_CUDA_KERNELS", "CONVNET_ALLREDUCE", "CUDA_VISIBLE_DEVICES",
             "CUBLAS_WORKSPACE_CONFIG", "CUPY_CACHE_DIR")


def _version(call) -> str:
    try:
        return str(call())
    except Exception as error:  # noqa: BLE001 - a missing piece is reported, not fatal
        return f"unavailable ({type(error).__name__}: {error})"


def describe() -> list[str]:
    """The report's lines (raises ImportError without CuPy)."""
    import numpy
    import cupy

    rt = cupy.cuda.runtime
    lines = [f"python {platform.python_version()} ({sys.executable}), numpy {numpy.__version__}",
             f"CuPy {cupy.__version__}, CUDA runtime {_version(rt.runtimeGetVersion)}, "
             f"driver {_version(rt.driverGetVersion)}, "
             f"NVRTC {_version(lambda: cupy.cuda.nvrtc.getVersion())}"]
    try:
        gpus = rt.getDeviceCount()
    except Exception as error:  # noqa: BLE001 - no driver or no device: reported
        gpus = 0
        lines.append(f"GPUs: unavailable ({type(error).__name__}: {error})")
    for index in range(gpus):
        props = rt.getDeviceProperties(index)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        lines.append(f"GPU {index}: {name}, compute capability {props['major']}.{props['minor']}, "
                     f"{props['multiProcessorCount']} SMs, "
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

    lines.append(f"NCCL {_version(nccl)}")

    def torch_version():
        import torch
        return (f"{torch.__version__} (CUDA {torch.version.cuda}, "
                f"cuDNN {torch.backends.cudnn.version()}, sees GPU: {torch.cuda.is_available()})")

    lines.append(f"PyTorch {_version(torch_version)}")
    lines.append("environment: " + (", ".join(f"{v}={os.environ[v]}" for v in VARIABLES
                                              if v in os.environ) or "(none set)"))
    return lines


def main() -> int:
    from convnet.kernels import cuda

    reason = cuda.unavailable_reason()
    try:
        lines = describe()
    except ImportError as error:
        print(f"no CuPy: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    if reason:
        print(f"the CUDA backend cannot run here: {reason}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
