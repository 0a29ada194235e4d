"""Training throughput and memory on a CUDA GPU: this engine (CuPy) against PyTorch, in one run.

    python bench/bench_cuda.py [--gpu N] [--mini 128] [--steps 20] [--warmup 3]
                               [--nets cifar10,alexnet,resnet50] [--skip-torch] [--skip-hybrid]
                               [--switches] [--generic] [--budget SECONDS] [--json FILE]
                               [--dry-run]

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
``--json``, written with every column and the seconds each took.

The columns run in the order of what they decide (bench/cuda_columns.py: each net's
default against PyTorch fp32 first), and ``--budget SECONDS`` starts no column that
the time left would not cover (judged by the longest column of the same net so far):
the columns it leaves out are listed under ``skipped`` with the reason.  A column that
fails records its error and the run goes on; the JSON is written after each column,
so a run stopped at a time limit keeps what it measured (``make gpu-check``'s bench
stage reads it).  Every column takes a few seconds, most of them building the net;
all of them, both nets and ``--switches``, two to four minutes on an H100 (estimated:
not yet run on one).

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
from cuda_columns import ENGINE, GENERIC, SWITCHES, TORCH, Budget, columns  # noqa: E402
from cuda_report import print_column, print_net, print_rest, versions  # noqa: E402

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
HYBRID_FILES = (REF / "layers-imagenet-4gpu-data-model.cfg",
                REF / "layer-params-imagenet-4gpu-data-model.cfg")
DRY_SIDE = {"alexnet": 67}  # the smallest AlexNet input its pooling takes, for --dry-run

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
    from convnet.runtime.step import step_graph
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
        figures = {"images_per_s": mini * steps / elapsed if steps else None,
                   "first_cost": first, "memory_bytes": _pool_bytes(backend, ex),
                   "skipped_steps": skipped, "host_waits": ex.step(batch).host_waits,
                   "replayed_steps": graph.replays if graph is not None else 0,
                   "_weights": weights, "_net": net}
        if step_graph.ENV in (switches or {}) and graph is None:  # asked for, not captured
            figures["eager_because"] = "; ".join(step_graph.capture_blockers(ex))
        return figures
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


def _torch(args, backend):
    """PyTorch, or None (said why) when it is missing or has no CUDA here."""
    if args.skip_torch:
        return None
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed (pip install -e '.[bench]'): no PyTorch columns")
        return None
    if backend == "cuda" and not torch.cuda.is_available():
        print(f"PyTorch {torch.__version__} has no CUDA support here: no PyTorch columns")
        return None
    return torch


def run(args, save=lambda results: None, budget: Budget | None = None) -> dict:
    """Every column of :func:`columns` that the budget leaves time for; ``save(results)``
    after each, so that a run stopped at a time limit keeps what it measured."""
    budget = budget or Budget(None)
    backend = "cpu" if args.dry_run else "cuda"
    torch = _torch(args, backend)
    if backend == "cuda":
        import cupy

        cupy.cuda.Device(args.gpu).use()
        if torch is not None:
            torch.cuda.set_device(args.gpu)
    gpus = (args.gpu,) if backend == "cuda" else (0,)
    results = {"versions": versions(backend, args.gpu, torch), "mini": args.mini,
               "steps": args.steps, "warmup": args.warmup, "budget_seconds": budget.seconds,
               "nets": {}, "skipped": []}
    print(" | ".join(f"{k} {v}" for k, v in results["versions"].items()))
    print(f"minibatch {args.mini}, {args.steps} timed steps after {args.warmup}"
          + (f", within {budget.seconds:g} s" if budget.seconds is not None else ""))
    engine = dict(ENGINE, **(SWITCHES if args.switches else {}))
    if args.generic and backend == "cuda":
        engine[GENERIC] = ({}, {})
    dims, start = {}, {}  # per net: image dims; the initial weights and net, for PyTorch
    for name in args.nets:
        side = DRY_SIDE.get(name, NETS[name][2]) if args.dry_run else NETS[name][2]
        dims[name] = (3, side, side)
        results["nets"][name] = {"engine": {}, "torch": {}}
    hybrid = "alexnet" in args.nets and not args.skip_hybrid
    for net, side, column in columns(args.nets, engine, TORCH if torch else (), hybrid):
        refused = budget.refuses(net)
        if refused:
            results["skipped"].append({"net": net, "side": side, "column": column,
                                       "reason": refused})
            continue
        layer_def, params, _, classes = NETS[net]
        common = (dims[net], classes, gpus, args.mini, args.steps, args.warmup)
        began = budget.clock()
        if side == "engine":
            executor_args, switches = engine[column]
            figures = _engine_figures(column, (layer_def, params), *common, backend=backend,
                                      switches=switches, **executor_args)
            kept = {k: figures.pop(k) for k in ("_weights", "_net") if k in figures}
            if kept and net not in start:
                start[net] = kept
        elif side == "torch":
            figures = ({"error": "no engine column of this net ran to give the initial "
                                 "weights"} if not start.get(net) else
                       _guarded(torch_column, torch, start[net]["_net"],
                                start[net]["_weights"], args.mini, dims[net], classes,
                                args.steps, args.warmup, column, device=backend))
        else:  # the hybrid: four logical devices on the GPU
            figures = _engine_figures("default", HYBRID_FILES, dims[net], classes, gpus * 4,
                                      *common[3:], backend=backend)
            for key in ("_weights", "_net"):
                figures.pop(key, None)
        figures["seconds"] = round(budget.clock() - began, 1)
        budget.took(net, figures["seconds"])
        if side == "hybrid":
            results["hybrid"] = _hybrid(figures, results["nets"]["alexnet"], gpus)
        else:
            results["nets"][net][side][column] = figures
        print_column(net, side, column, figures)
        save(results)
    for name in args.nets:
        print_net(name, NETS[name][0].name, dims[name], results["nets"][name])
    print_rest(results, gpus)
    save(results)
    return results


def _engine_figures(column, files, *common, **kwargs) -> dict:
    """An engine column; ``generic kernels`` with the fused CUDA kernels switched off."""
    if column != GENERIC:
        return _guarded(engine_column, files, *common, **kwargs)
    from convnet.kernels import cuda as cuda_kernels

    cuda_kernels.uninstall()
    try:
        return _guarded(engine_column, files, *common, **kwargs)
    finally:
        cuda_kernels.install(force=True)


def _hybrid(figures: dict, alexnet: dict, gpus) -> dict:
    """The hybrid's figures and its ratio to AlexNet's 1gpu config (its default column)."""
    single = alexnet["engine"].get("default", {}).get("images_per_s")
    ratio = (figures["images_per_s"] / single
             if "error" not in figures and figures.get("images_per_s") and single else None)
    return {"four_logical_devices": figures, "ratio_to_1gpu": ratio,
            "gpus": ",".join(map(str, gpus * 4))}


def parse(argv=None) -> argparse.Namespace:
    """The command line, with the defaults of a real or a dry run filled in."""
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
    ap.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                    help="start no column once it would not end within SECONDS of the "
                         "start (the columns left out are recorded); default: no limit")
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
    return args


def main(argv=None) -> int:
    budget_start = time.monotonic()  # the budget counts the import of PyTorch and CuPy
    args = parse(argv)
    if not args.dry_run:
        reason = _no_gpu_reason()
        if reason is not None:
            print(f"bench_cuda: no CUDA GPU to benchmark on: {reason}", file=sys.stderr)
            return 2

    def save(results: dict) -> None:  # whole or not at all: a time limit may stop the run
        if args.json is not None:
            partial = args.json.with_name(args.json.name + ".partial")
            partial.write_text(json.dumps(results, indent=2, default=str) + "\n")
            os.replace(partial, args.json)

    run(args, save, Budget(args.budget, start=budget_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
