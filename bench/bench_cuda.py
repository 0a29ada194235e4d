"""Training throughput on a CUDA GPU: this engine (CuPy) against PyTorch, in one run.

    python bench/bench_cuda.py [--gpu N] [--mini 128] [--steps 20] [--warmup 3]
                               [--skip-torch] [--skip-alexnet] [--generic]
                               [--no-check-finite] [--json FILE]

1. The CIFAR-10 reference net (cuda-convnet2's layers-cifar10-11pct.cfg and
   its params) on dummy 3x32x32 images, minibatch 128, one logical device:
   images/s of a full training step (host-to-GPU copy of the minibatch,
   forward, backward, momentum update) for this engine's CUDA backend, and
   for the same computation written with PyTorch on the same GPU
   (``bench/torch_net.py``, the builder every benchmark uses: conv2d on
   the ceiling rule's padding, unfold + batched matmul for the locally-
   connected layers, max-pool, local_response_norm, linear, cross_entropy,
   SGD with each layer's epsW/momW/wc).  Both
   start from the same weights; their first costs are printed as a check
   that they compute the same net.  TF32 is off in PyTorch (CuPy does not
   use it), cuDNN autotuning is on.
2. The hybrid data/model-parallel ImageNet net
   (layers-imagenet-4gpu-data-model.cfg) on dummy 3x224x224 images with 1000
   classes, minibatch 128, with four logical devices on one GPU
   (``--gpu N,N,N,N``): images/s of the engine only.

``--generic`` also times the engine with the fused CUDA kernels switched off
(the generic kernels running on CuPy).  Times are steps after ``--warmup``
untimed ones; every step ends with the GPU idle (the executor synchronises
its devices), so a step's time is wall-clock.  Without CuPy or a CUDA GPU
the script says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch_net  # noqa: E402  (bench/, next to this script)

REF = ROOT / "examples" / "cuda-convnet2"
CIFAR = (REF / "layers-cifar10-11pct.cfg", REF / "layer-params-cifar10-11pct.cfg")
ALEXNET = (REF / "layers-imagenet-4gpu-data-model.cfg",
           REF / "layer-params-imagenet-4gpu-data-model.cfg")


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


# --------------------------------------------------------------------- engine

def engine_run(layer_def, params, gpus, mini, dims, classes, steps, warmup, check_finite=True,
               backend="cuda"):
    """Time training steps of the engine; returns (images/s, the first minibatch's cost
    before training, the initial weights {layer: {key: host array}}, the net)."""
    from convnet.config import load_net
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor
    from convnet.plan.planner import make_plan

    net = load_net(layer_def, params, data_dims={0: tuple(dims), 1: (1,)}, num_classes=classes)
    plan = make_plan(net, tuple(gpus), mini)
    ex = Executor(net, plan, make_devices(tuple(gpus), backend), seed=0, parallel=True,
                  check_finite=check_finite)
    batch = _dummy_batch(mini, dims, classes)
    try:
        weights: dict = {}
        for key, value in ex.state_arrays().items():
            group, layer, k = key.split("/")
            if group == "weights":
                weights.setdefault(layer, {})[k] = value
        first = ex.evaluate(batch).costs
        for _ in range(warmup):
            ex.step(batch)
        start = time.perf_counter()
        for _ in range(steps):
            ex.step(batch)
        elapsed = time.perf_counter() - start
        ips = mini * steps / elapsed if steps else float("nan")
        return ips, first, weights, net
    finally:
        ex.close()


# -------------------------------------------------------------------- PyTorch

def torch_run(torch, net, weights, mini, dims, classes, steps, warmup):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    tnet = torch_net.build(torch, net, weights, device="cuda")
    loss_fn, opt = tnet.loss, tnet.optimizer(torch)
    images, labels = _dummy_batch(mini, dims, classes)
    with torch.no_grad():
        first = float(loss_fn(torch.from_numpy(images).cuda(), torch.from_numpy(labels).cuda()))

    def step():
        x = torch.from_numpy(images).cuda()
        y = torch.from_numpy(labels).cuda()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(x, y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return mini * steps / (time.perf_counter() - start), first


# ----------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0, help="physical GPU (default 0)")
    ap.add_argument("--mini", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-alexnet", action="store_true")
    ap.add_argument("--generic", action="store_true",
                    help="also time the engine with the fused CUDA kernels switched off")
    ap.add_argument("--no-check-finite", action="store_true",
                    help="skip the executor's per-update NaN checks (each is a GPU sync)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)

    reason = _no_gpu_reason()
    if reason is not None:
        print(f"bench_cuda: no CUDA GPU to benchmark on: {reason}", file=sys.stderr)
        return 2

    import cupy

    from convnet import kernels
    import convnet.kernels.cuda  # noqa: F401 (kernels.cuda below)

    cupy.cuda.Device(args.gpu).use()
    props = cupy.cuda.runtime.getDeviceProperties(args.gpu)
    gpu_name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"GPU {args.gpu}: {gpu_name}; CuPy {cupy.__version__}, CUDA runtime "
          f"{cupy.cuda.runtime.runtimeGetVersion()}; minibatch {args.mini}, "
          f"{args.steps} timed steps after {args.warmup}")
    check = not args.no_check_finite
    results = {"gpu": gpu_name, "mini": args.mini, "steps": args.steps}

    def save():  # after each part: a run stopped at a time limit keeps what it measured
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=2) + "\n")

    # 1. CIFAR-10, engine vs PyTorch
    dims, classes = (3, 32, 32), 10
    ips, first, start_weights, net = engine_run(*CIFAR, (args.gpu,), args.mini, dims, classes,
                                                args.steps, args.warmup, check)
    engine_cost = first["logprob"]["cost"]
    print(f"CIFAR-10 (layers-cifar10-11pct.cfg, 3x32x32, 1 device):  engine (CuPy) "
          f"{ips:9.1f} images/s")
    results["cifar10_engine_images_per_s"] = ips
    if args.generic:
        kernels.cuda.uninstall()
        try:
            gips = engine_run(*CIFAR, (args.gpu,), args.mini, dims, classes, args.steps,
                              args.warmup, check)[0]
        finally:
            kernels.cuda.install(force=True)
        print(f"{'':57s}generic kernels {gips:9.1f} images/s")
        results["cifar10_engine_generic_images_per_s"] = gips
    if not args.skip_torch:
        try:
            import torch
        except ImportError:
            torch = None
            print("PyTorch is not installed (pip install -e '.[bench]'): no PyTorch column")
        if torch is not None and not torch.cuda.is_available():
            print(f"PyTorch {torch.__version__} has no CUDA support here: no PyTorch column")
            torch = None
        if torch is not None:
            torch.cuda.set_device(args.gpu)
            tips, tfirst = torch_run(torch, net, start_weights, args.mini, dims, classes,
                                     args.steps, args.warmup)
            print(f"{'':57s}PyTorch {torch.__version__:8s}{tips:9.1f} images/s  "
                  f"(engine / PyTorch = {ips / tips:.2f})")
            print(f"{'':57s}first cost: engine {engine_cost:.6f}, PyTorch {tfirst:.6f}")
            results.update(cifar10_torch_images_per_s=tips, torch_version=torch.__version__,
                           cifar10_first_cost_engine=engine_cost, cifar10_first_cost_torch=tfirst)

    save()
    # 2. the hybrid ImageNet net, four logical devices on one GPU
    if not args.skip_alexnet:
        gpus = (args.gpu,) * 4
        ips4 = engine_run(*ALEXNET, gpus, args.mini, (3, 224, 224), 1000, args.steps,
                          args.warmup, check)[0]
        print(f"ImageNet hybrid (layers-imagenet-4gpu-data-model.cfg, 3x224x224, "
              f"--gpu {','.join(map(str, gpus))}): engine (CuPy) {ips4:9.1f} images/s")
        results["alexnet_hybrid_4_logical_images_per_s"] = ips4
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
