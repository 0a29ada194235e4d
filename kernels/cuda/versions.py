"""Which compiler, driver and GPU the CUDA kernels meet: for the self-test's warning
(:func:`convnet.kernels.cuda.self_test_result`) and the environment report."""

from __future__ import annotations

from pathlib import Path

#: where the NVIDIA kernel module says its version (the driver's release, e.g. 580.65.06)
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")


def queried(call) -> str:
    """``call()`` as text, or why it failed (a missing piece is reported, not fatal)."""
    try:
        return str(call())
    except Exception as error:  # noqa: BLE001 - a missing piece is reported, not fatal
        return f"unavailable ({type(error).__name__}: {' '.join(str(error).split())})"


def driver_release() -> str:
    """The NVIDIA driver's release ('580.65.06'), or 'unknown'."""
    try:
        text = DRIVER_VERSION_FILE.read_text()
    except OSError:
        return "unknown"
    words = text.split()
    for i, word in enumerate(words):
        if word == "Module" and i + 1 < len(words):
            return words[i + 1]
    return "unknown"


def cuda_version(number: int) -> str:
    """CUDA's version number (13000) as text ('13.0'); 0 is no driver."""
    return f"{number // 1000}.{number % 1000 // 10}" if number else "none"


def compiler_text(gpu: int | None = None) -> str:
    """'GPU 0 (NVIDIA H200) with NVRTC 13.0, driver 580.65.06 (CUDA 13.0)': what
    compiled and runs the kernels, for a warning about them."""
    import cupy

    rt = cupy.cuda.runtime
    gpu = cupy.cuda.Device().id if gpu is None else gpu
    name = queried(lambda: gpu_name(rt.getDeviceProperties(gpu)))
    nvrtc = queried(lambda: ".".join(map(str, cupy.cuda.nvrtc.getVersion())))
    cuda = queried(lambda: cuda_version(rt.driverGetVersion()))
    return f"GPU {gpu} ({name}) with NVRTC {nvrtc}, driver {driver_release()} (CUDA {cuda})"


def gpu_name(props) -> str:
    return props["name"].decode() if isinstance(props["name"], bytes) else props["name"]


__all__ = ["compiler_text", "cuda_version", "driver_release", "gpu_name", "queried"]
