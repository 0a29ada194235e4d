"""What CuPy's memory pool holds after a few training steps, against the estimate
that ``--print-plan`` shows and the fit check uses on the CUDA backend
(:mod:`convnet.runtime.devices.cuda_pool`).

    python bench/cuda_memory.py [--gpu N] [--steps 3] [--json FILE]

For each reference config (CIFAR-10; AlexNet on one logical device, and data-parallel
on two logical devices of the GPU), minibatch 128 on dummy data: the pool is emptied,
an executor trains ``--steps`` steps, and what the pool then holds on the GPU
(``MemoryPool.total_bytes``) is set beside the estimate.  Without CuPy or a GPU the
script says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "examples" / "cuda-convnet2"
#: (config, image dims, classes, minibatch, logical devices on the GPU)
CONFIGS = (("cifar10-11pct", (3, 32, 32), 10, 128, 1),
           ("imagenet-1gpu", (3, 224, 224), 1000, 128, 1),
           ("imagenet-2gpu-data", (3, 224, 224), 1000, 128, 2))


def measure(cupy, name, dims, classes, mini, devices, gpu, steps) -> dict:
    from convnet.config import load_net
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.devices.cuda_pool import pool_bytes
    from convnet.runtime.step.executor import Executor

    net = load_net(REF / f"layers-{name}.cfg", REF / f"layer-params-{name}.cfg",
                   data_dims={0: dims, 1: (1,)}, num_classes=classes)
    gpus = (gpu,) * devices
    plan = make_plan(net, gpus, mini)
    estimate = sum(pool_bytes(plan, net))
    rng = np.random.default_rng(0)
    batch = [rng.standard_normal((mini,) + dims, dtype=np.float32),
             rng.integers(0, classes, (mini, 1)).astype(np.float32)]
    pool = cupy.get_default_memory_pool()
    gc.collect()
    with cupy.cuda.Device(gpu):
        pool.free_all_blocks()
        before = pool.total_bytes()
    executor = Executor(net, plan, make_devices(gpus, "cuda"), seed=0, parallel=True)
    try:
        for _ in range(steps):
            executor.step(batch)
        with cupy.cuda.Device(gpu):
            held, used = pool.total_bytes() - before, pool.used_bytes()
    finally:
        executor.close()
    del executor
    gc.collect()
    with cupy.cuda.Device(gpu):
        pool.free_all_blocks()
    return {"config": name, "mini": mini, "gpus": ",".join(map(str, gpus)),
            "pool_bytes": held, "used_bytes_after_step": used, "estimate_bytes": estimate}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from convnet import kernels

    if not kernels.cupy_available():
        print("cuda_memory: no CUDA GPU to measure on", file=sys.stderr)
        return 2
    import cupy

    results = []
    for config in CONFIGS:
        result = measure(cupy, *config, args.gpu, args.steps)
        results.append(result)
        print(f"{result['config']}, minibatch {result['mini']}, --gpu {result['gpus']}: the "
              f"pool holds {result['pool_bytes'] / 2**20:,.0f} MiB, estimated "
              f"{result['estimate_bytes'] / 2**20:,.0f} MiB "
              f"({result['pool_bytes'] / result['estimate_bytes']:.2f})", flush=True)
        if args.json is not None:  # after each config: a later one may run out of time
            args.json.write_text(json.dumps({"steps": args.steps, "configs": results},
                                            indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
