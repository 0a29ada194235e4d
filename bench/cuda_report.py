"""What bench/bench_cuda.py records and prints: the versions it ran on, each column as
it ends, each net's table with every engine column against PyTorch in the same mode
(:func:`against_torch`, which bench/gpu_check_summary.py shows too), the hybrid and
the columns the budget left out."""

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


#: the PyTorch mode each engine column is compared with (fp32 where not named)
SAME_MODE = {"tf32": "tf32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}


def against_torch(table: dict) -> dict:
    """Each engine column of a net's table against PyTorch in the same mode:
    {column: {"torch_mode", "speed" (engine / PyTorch img/s), "memory" (pool / PyTorch's
    max_memory_allocated)}}, a ratio None where either side has no figure."""
    out = {}
    for column, figures in table["engine"].items():
        mode = SAME_MODE.get(column, "fp32")
        reference = table["torch"].get(mode, {})
        out[column] = {"torch_mode": mode,
                       "speed": _ratio(figures.get("images_per_s"),
                                       reference.get("images_per_s")),
                       "memory": _ratio(figures.get("memory_bytes"),
                                        reference.get("memory_bytes"))}
    return out


def _ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def print_column(net: str, side: str, column: str, figures: dict) -> None:
    """One line as a column ends (the log of a run cut short shows how far it got)."""
    took = f"({figures.get('seconds', 0):.1f} s)"
    if "error" in figures:
        print(f"  {net:8s} {side:6s} {column:20s} {took}  {figures['error']}", flush=True)
        return
    print(f"  {net:8s} {side:6s} {column:20s} {cell(figures):>9s} img/s "
          f"{_mib(figures.get('memory_bytes')):>10s}  {took}", flush=True)


def print_net(name: str, config: str, dims, table: dict) -> None:
    print(f"\n{name} ({config}, {'x'.join(map(str, dims))}): images/s, memory")
    compared = against_torch(table)
    for side in ("engine", "torch"):
        for column, figures in table[side].items():
            ratio = ""
            if side == "engine" and compared[column]["speed"] is not None:
                ratio = (f"  ({compared[column]['speed']:.2f}x PyTorch "
                         f"{compared[column]['torch_mode']})")
            error = f"  {figures['error']}" if "error" in figures else ""
            print(f"  {side:6s} {column:16s} {cell(figures):>9s}  "
                  f"{_mib(figures.get('memory_bytes')):>10s}{ratio}{error}")


def print_rest(results: dict, gpus) -> None:
    """The hybrid against the 1gpu config, and what the budget left out."""
    if "hybrid" in results:
        hybrid = results["hybrid"]
        figures, ratio = hybrid["four_logical_devices"], hybrid["ratio_to_1gpu"]
        print(f"\nhybrid layers-imagenet-4gpu-data-model.cfg on --gpu {hybrid['gpus']}: "
              f"{cell(figures)} img/s"
              + (f" = {ratio:.2f}x the 1gpu config on --gpu {gpus[0]}" if ratio else
                 f" ({figures.get('error', 'no 1gpu figure to compare with')})"))
    if results["skipped"]:
        print(f"\nleft out ({results['skipped'][0]['reason'].split(':')[0]}): "
              + ", ".join(f"{s['net']} {s['side']} {s['column']}" for s in results["skipped"]))
