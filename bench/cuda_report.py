"""What bench/bench_cuda.py records and prints: the versions it ran on, each net's table
of columns, and the headline figures under the flat keys bench/gpu_check_summary.py
reads."""

from __future__ import annotations

import platform

import numpy as np


def versions(backend: str, gpu: int, torch) -> dict:
    """What the figures were measured on."""
    out = {"python": platform.python_version(), "numpy": np.__version__,
           "torch": getattr(torch, "__version__", None), "backend": backend}
    if backend != "cuda":
        out["device"] = f"CPU ({platform.processor() or platform.machine()})"
        return out
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(gpu)
    name = props["name"]
    out.update(device=name.decode() if isinstance(name, bytes) else name,
               driver=cupy.cuda.runtime.driverGetVersion(),
               cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(), cupy=cupy.__version__)
    try:
        import cudnn

        out["cudnn_frontend"] = cudnn.__version__
        out["cudnn"] = cudnn.backend_version()
    except Exception as error:  # noqa: BLE001 - not installed, or no library
        out["cudnn_frontend"] = f"unavailable: {error}"
    if torch is not None and torch.cuda.is_available():
        out["torch_cuda"] = torch.version.cuda
        out["torch_cudnn"] = torch.backends.cudnn.version()
    return out


def cell(column: dict) -> str:
    if "error" in column:
        return "error"
    ips = column.get("images_per_s")
    return "-" if ips is None else f"{ips:,.0f}"


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2 ** 20:,.0f} MiB"


def flat_figures(results: dict) -> dict:
    """The headline figures under flat keys (``<net>_engine_images_per_s``, its
    ``<net>_torch_images_per_s``, ...), as bench/gpu_check_summary.py reads them."""
    out = {"gpu": results["versions"].get("device"), "torch_version":
           results["versions"].get("torch")}
    for name, table in results["nets"].items():
        engine, reference = table["engine"].get("default", {}), table["torch"].get("fp32", {})
        out[f"{name}_engine_images_per_s"] = engine.get("images_per_s")
        out[f"{name}_torch_images_per_s"] = reference.get("images_per_s")
        out[f"{name}_first_cost_engine"] = engine.get("first_cost")
        out[f"{name}_first_cost_torch"] = reference.get("first_cost")
    hybrid = results.get("hybrid", {}).get("four_logical_devices", {})
    out["alexnet_hybrid_4_logical_images_per_s"] = hybrid.get("images_per_s")
    return out


def print_net(name: str, config: str, dims, table: dict) -> None:
    print(f"\n{name} ({config}, {'x'.join(map(str, dims))}): images/s, memory")
    torch_fp32 = table["torch"].get("fp32", {}).get("images_per_s")
    for side in ("engine", "torch"):
        for column, figures in table[side].items():
            ratio = ""
            ips = figures.get("images_per_s")
            if side == "engine" and ips and torch_fp32:
                ratio = f"  ({ips / torch_fp32:.2f}x PyTorch fp32)"
            error = f"  {figures['error']}" if "error" in figures else ""
            print(f"  {side:6s} {column:14s} {cell(figures):>9s}  "
                  f"{_mib(figures.get('memory_bytes')):>10s}{ratio}{error}")
