"""Training throughput and memory on a CUDA GPU: this engine (CuPy) against PyTorch, in one run.

    python bench/bench_cuda.py [--gpu N] [--mini 128] [--steps 20] [--warmup 3]
                               [--nets cifar10,alexnet,resnet50] [--skip-torch] [--skip-hybrid]
                               [--switches] [--generic] [--json FILE] [--dry-run]

For each net, the CIFAR-10 reference net (cuda-convnet2's layers-cifar10-11pct.cfg,
3x32x32, 10 classes) and AlexNet (layers-imagenet-1gpu.cfg, 3x224x224, 1000 classes)
(and with ``--nets ...,resnet50`` ResNet-50 with batch normalisation,
examples/resnet50-imagenet.cfg, 3x224x224, its gpu= line put on the one device),
on dummy images at minibatch 128 on one logical device, the images/s of a full
training step (host-to-GPU copy of the minibatch, forward, backward, update), with
both sides starting from the same weights:

* the engine: ``default`` (float32 with the finite checks that guard training),
  ``checks off``, and ``--precision`` ``tf32``, ``bf16`` and ``fp16``; with
  ``--switches`` also the switches a GPU run has to prove before they become the
  default: ``cudnn`` (``CONVNET_CUDNN=1``), ``cuda graph`` (``CONVNET_CUDA_GRAPH=1``)
  and both; with ``--generic`` the fused CUDA kernels switched off;
* PyTorch (``bench/torch_net.py``, the builder every benchmark uses): ``fp32``
  (TF32 off), ``tf32``, ``bf16 autocast`` and ``fp16 autocast`` (with a GradScaler),
  cuDNN autotuning on;
* memory: the CuPy pool's peak (what it holds after the steps; it never gives memory
  back during them), a captured step's own pool included, against PyTorch's
  ``max_memory_allocated`` (and ``max_memory_reserved``);

and then the hybrid data/model-parallel ImageNet net (layers-imagenet-4gpu-data-
model.cfg) with its four logical devices on the one GPU (``--gpu N,N,N,N``) against
AlexNet's 1gpu config on ``--gpu N``.  Every figure is a ratio within this run;
the GPU, driver, CUDA, CuPy, cuDNN and PyTorch versions are printed and, with
``--json``, written with every column.  A column that fails records its error and
the run goes on; the JSON is written after each column, so a run stopped at a time
limit keeps what it measured, and its flat keys (``cifar10_engine_images_per_s``, ...)
are what bench/gpu_check_summary.py reads.  With the defaults the run takes two to four
minutes on an H100 (estimated: not yet run on one).

``--dry-run`` runs all of it on the CPU backend and PyTorch's CPU, at minibatch 4,
one step, AlexNet at 67x67 (what the suite checks, tests/bench/test_bench_cuda.py);
its figures mean nothing.  Without CuPy or a CUDA GPU (and no ``--dry-run``) the
script says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch_net  # noqa: E402  (bench/, next to this script)
from cuda_report import cell, flat_figures, print_net, versions  # noqa: E402

REF = ROOT / "examples" / "cuda-convnet2"
NETS = {  # name -> (layer-def, layer-params, image side, classes)
    "cifar10": (REF / "layers-cifar10-11pct.cfg", REF / "layer-params-cifar10-11pct.cfg",
                32, 10),
    "alexnet": (REF / "layers-imagenet-1gpu.cfg", REF / "layer-params-imagenet-1gpu.cfg",
                224, 1000),
    # not in the default --nets: ResNet-50 with batch normalisation, on one device here
    "resnet50": (ROOT / "examples" / "resnet50-imagenet.cfg",
                 ROOT / "examples" / "resnet50-imagenet-params.cfg", 224, 1000),
}
HYBRID = (REF / "layers-imagenet-4gpu-data-model.cfg",
          REF / "layer-params-imagenet-4gpu-data-model.cfg")
DRY_SIDE = {"alexnet": 67}  # the smallest AlexNet input its pooling takes, for --dry-run

#: engine column -> (Executor keywords, environment switches)
ENGINE = {
    "default": ({}, {}),
    "checks off": ({"check_finite": False}, {}),
    "tf32": ({"precision": "tf32"}, {}),
    "bf16": ({"precision": "bf16"}, {}),
    "fp16": ({"precision": "fp16"}, {}),
}
SWITCHES = {
    "cudnn": ({}, {"CONVNET_CUDNN": "1"}),
    "cuda graph": ({}, {"CONVNET_CUDA_GRAPH": "1"}),
    "cudnn + graph": ({}, {"CONVNET_CUDNN": "1", "CONVNET_CUDA_GRAPH": "1"}),
}
TORCH = ("fp32", "tf32", "bf16 autocast", "fp16 autocast")


def _no_gpu_reason() -> str | None:
    from convnet import kernels
    import convnet.kernels.cuda

    if kernels.cupy_available():
        return None
    return kernels.cuda.unavailable_reason() or "CuPy finds no CUDA GPU"


def _dummy_batch(mini: int, dims, classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((mini,) + tuple(dims)).astype(np.float32),
            rng.integers(0, classes, (mini, 1)).astype(np.float32)]


@contextmanager
def _environment(switches: dict):
    saved = {k: os.environ.get(k) for k in switches}
    os.environ.update(switches)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --------------------------------------------------------------------- engine

def _pool_bytes(backend: str, executor) -> int | None:
    if backend != "cuda":
        return None
    import cupy

    held = cupy.get_default_memory_pool().total_bytes()
    graph = getattr(executor, "step_graph", None)
    captured = getattr(graph, "_captured", None)
    if captured is not None and captured.keep[0] is not None:
        held += captured.keep[0].total_bytes()
    return int(held)


def engine_column(files, dims, classes, gpus, mini, steps, warmup, backend="cuda",
                  switches=None, **executor_args) -> dict:
    """Time ``steps`` training steps of the engine after ``warmup``: {images_per_s,
    first_cost, memory_bytes, ...} and the initial weights and net (for PyTorch)."""
    from convnet.config import load_net
    from convnet.config.model import on_one_device
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    if backend == "cuda":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
    with _environment(switches or {}):
        net = load_net(*files, data_dims={0: tuple(dims), 1: (1,)}, num_classes=classes)
        if len(gpus) == 1:  # a config's data-parallel gpu= line on the one device
            net = on_one_device(net)
        plan = make_plan(net, tuple(gpus), mini)
        ex = Executor(net, plan, make_devices(tuple(gpus), backend), seed=0, parallel=True,
                      **executor_args)
    batch = _dummy_batch(mini, dims, classes)
    try:
        weights: dict = {}
        for key, value in ex.state_arrays().items():
            group, layer, k = key.split("/")
            if group == "weights":
                weights.setdefault(layer, {})[k] = value
        cost_layer = next(l.name for l in net if l.is_cost)
        first = ex.evaluate(batch).costs[cost_layer]["cost"]
        skipped = 0
        for _ in range(warmup):
            ex.step(batch)
        start = time.perf_counter()
        for _ in range(steps):
            skipped += ex.step(batch).skipped
        elapsed = time.perf_counter() - start
        graph = getattr(ex, "step_graph", None)
        return {"images_per_s": mini * steps / elapsed if steps else None,
                "first_cost": first, "memory_bytes": _pool_bytes(backend, ex),
                "skipped_steps": skipped, "host_waits": ex.step(batch).host_waits,
                "replayed_steps": graph.replays if graph is not None else 0,
                "_weights": weights, "_net": net}
    finally:
        ex.close()


# -------------------------------------------------------------------- PyTorch

def torch_column(torch, net, weights, mini, dims, classes, steps, warmup, mode,
                 device="cuda") -> dict:
    """PyTorch's images/s and memory in ``mode`` (one of :data:`TORCH`)."""
    cuda = device == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.benchmark = True
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    tnet = torch_net.build(torch, net, weights, device=device)
    loss_fn, opt = tnet.loss, tnet.optimizer(torch)
    dtype = {"bf16 autocast": torch.bfloat16, "fp16 autocast": torch.float16}.get(mode)
    scaler = torch.amp.GradScaler(device, enabled=mode == "fp16 autocast")
    images, labels = _dummy_batch(mini, dims, classes)

    def autocast():
        return torch.autocast(device, dtype=dtype, enabled=dtype is not None)

    with torch.no_grad(), autocast():
        first = float(loss_fn(torch.from_numpy(images).to(device),
                              torch.from_numpy(labels).to(device)))

    def step():
        x = torch.from_numpy(images).to(device)
        y = torch.from_numpy(labels).to(device)
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for _ in range(warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    elapsed = time.perf_counter() - start
    return {"images_per_s": mini * steps / elapsed if steps else None, "first_cost": first,
            "memory_bytes": torch.cuda.max_memory_allocated() if cuda else None,
            "reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None}


# ----------------------------------------------------------------------- main

def _guarded(fn, *args, **kwargs) -> dict:
    """A column's figures, or its error (the run goes on)."""
    try:
        return fn(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - recorded in the table and the JSON
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}


def run(args, save=lambda results: None) -> dict:
    """Every part of the benchmark; ``save(results)`` after each column, so that a run
    stopped at a time limit keeps what it measured."""
    backend = "cpu" if args.dry_run else "cuda"
    torch = None
    if not args.skip_torch:
        try:
            import torch
        except ImportError:
            print("PyTorch is not installed (pip install -e '.[bench]'): no PyTorch columns")
        if torch is not None and backend == "cuda" and not torch.cuda.is_available():
            print(f"PyTorch {torch.__version__} has no CUDA support here: no PyTorch columns")
            torch = None
    if backend == "cuda":
        import cupy

        cupy.cuda.Device(args.gpu).use()
        if torch is not None:
            torch.cuda.set_device(args.gpu)
    gpus = (args.gpu,) if backend == "cuda" else (0,)
    results = {"versions": versions(backend, args.gpu, torch), "mini": args.mini,
               "steps": args.steps, "warmup": args.warmup, "nets": {}}
    print(" | ".join(f"{k} {v}" for k, v in results["versions"].items()))
    print(f"minibatch {args.mini}, {args.steps} timed steps after {args.warmup}")
    engine = dict(ENGINE, **(SWITCHES if args.switches else {}))
    for name in args.nets:
        layer_def, params, side, classes = NETS[name]
        side = DRY_SIDE.get(name, side) if args.dry_run else side
        dims = (3, side, side)
        table = results["nets"][name] = {"engine": {}, "torch": {}}
        common = (dims, classes, gpus, args.mini, args.steps, args.warmup)
        start = {}  # the initial weights and the net, for PyTorch
        for column, (executor_args, switches) in engine.items():
            figures = table["engine"][column] = _guarded(
                engine_column, (layer_def, params), *common, backend=backend,
                switches=switches, **executor_args)
            start = start or {k: figures.pop(k) for k in ("_weights", "_net") if k in figures}
            for k in ("_weights", "_net"):
                figures.pop(k, None)
            save(results)
        if args.generic and backend == "cuda":
            from convnet.kernels import cuda as cuda_kernels

            cuda_kernels.uninstall()
            try:
                table["engine"]["generic kernels"] = _guarded(
                    engine_column, (layer_def, params), *common, backend=backend)
            finally:
                cuda_kernels.install(force=True)
        if torch is not None and start:
            for mode in TORCH:
                table["torch"][mode] = _guarded(torch_column, torch, start["_net"],
                                                start["_weights"], args.mini, dims, classes,
                                                args.steps, args.warmup, mode,
                                                device="cuda" if backend == "cuda" else "cpu")
                save(results)
        print_net(name, layer_def.name, dims, table)
    if not args.skip_hybrid and "alexnet" in results["nets"]:
        side = DRY_SIDE["alexnet"] if args.dry_run else NETS["alexnet"][2]
        hybrid = _guarded(engine_column, HYBRID, (3, side, side), 1000, gpus * 4, args.mini,
                          args.steps, args.warmup, backend=backend)
        hybrid.pop("_weights", None)
        hybrid.pop("_net", None)
        single = results["nets"]["alexnet"]["engine"]["default"]
        ratio = (hybrid["images_per_s"] / single["images_per_s"]
                 if "error" not in hybrid and single.get("images_per_s") else None)
        results["hybrid"] = {"four_logical_devices": hybrid, "ratio_to_1gpu": ratio}
        print(f"\nhybrid layers-imagenet-4gpu-data-model.cfg on --gpu "
              f"{','.join(map(str, gpus * 4))}: {cell(hybrid)} img/s"
              + (f" = {ratio:.2f}x the 1gpu config on --gpu {gpus[0]}" if ratio else
                 f" ({hybrid.get('error', '')})"))
    save(results)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0, help="physical GPU (default 0)")
    ap.add_argument("--mini", type=int, default=None, help="minibatch (default 128; 4 dry)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 20; 1 dry)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (3; 0 dry)")
    ap.add_argument("--nets", default="cifar10,alexnet",
                    type=lambda s: [n for n in s.split(",") if n],
                    help="which nets, of cifar10, alexnet and resnet50 (default: "
                         "cifar10,alexnet)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-hybrid", action="store_true")
    ap.add_argument("--switches", action="store_true",
                    help="also the engine with CONVNET_CUDNN=1 and CONVNET_CUDA_GRAPH=1")
    ap.add_argument("--generic", action="store_true",
                    help="also the engine with the fused CUDA kernels switched off")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--dry-run", action="store_true",
                    help="everything on the CPU at tiny sizes: that the script runs")
    args = ap.parse_args(argv)
    unknown = [n for n in args.nets if n not in NETS]
    if unknown:
        ap.error(f"--nets: unknown {', '.join(unknown)} ({', '.join(NETS)})")
    dry = args.dry_run
    args.mini = args.mini or (4 if dry else 128)
    args.steps = args.steps if args.steps is not None else (1 if dry else 20)
    args.warmup = args.warmup if args.warmup is not None else (0 if dry else 3)
    if not dry:
        reason = _no_gpu_reason()
        if reason is not None:
            print(f"bench_cuda: no CUDA GPU to benchmark on: {reason}", file=sys.stderr)
            return 2
    def save(results: dict) -> None:
        if args.json is not None:
            args.json.write_text(json.dumps({**flat_figures(results), **results}, indent=2,
                                            default=str) + "\n")

    run(args, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
