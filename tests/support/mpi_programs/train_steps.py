"""A few training steps of a scaled reference config, as one process of an MPI run.

``mpiexec -n N python train_steps.py NAME GPUS FOLDER OUT [K]`` trains the scaled copy
of ``layers-NAME.cfg`` (written into FOLDER by the test) on every rank's
share of the devices (``GPUS`` per rank, rank-major), and rank 0 writes the
final weights and momentum, the costs of every step and of an evaluation,
and one layer's features to ``OUT`` (.npz); with K, by local SGD averaging
every K steps.  The test runs :func:`run` in one process over all devices and
compares.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from convnet.config import load_net
from convnet.plan.planner import make_plan
from convnet.runtime.processes.cluster import Cluster, cluster_devices, connect, single_process
from convnet.runtime.step.executor import Executor
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES

MINI = 8
STEPS = 2


def batches(count: int = STEPS + 1, seed: int = 7):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((MINI,) + IMAGE_DIMS).astype(np.float32),
             rng.integers(0, NUM_CLASSES, (MINI, 1)).astype(np.float32)] for _ in range(count)]


def run(name: str, folder: Path, gpus: tuple[int, ...], cluster: Cluster,
        local_sgd: int | None = None) -> dict | None:
    """Train, evaluate and take features; the results on rank 0, None elsewhere."""
    net = load_net(folder / f"layers-{name}.cfg", folder / f"layer-params-{name}.cfg",
                   data_dims={0: IMAGE_DIMS, 1: (1,)}, num_classes=NUM_CLASSES)
    plan = make_plan(net, gpus * cluster.size, MINI)
    executor = Executor(net, plan, cluster_devices(cluster, gpus, "cpu"), seed=3,
                        cluster=cluster, local_sgd=local_sgd)
    try:
        data = batches()
        costs = [executor.step(b, progress=i / 10).costs for i, b in enumerate(data[:STEPS])]
        costs.append(executor.evaluate(data[-1]).costs)
        features = executor.features(data[-1], "probs")
        state = executor.state_arrays()
    finally:
        executor.close()
    if cluster.rank != 0:
        return None
    return dict(state, __costs__=np.frombuffer(json.dumps(costs).encode(), np.uint8),
                __features__=features)


def run_alone(name: str, folder: Path, gpus: tuple[int, ...],
              local_sgd: int | None = None) -> dict:
    return run(name, folder, gpus, single_process(len(gpus)), local_sgd)


if __name__ == "__main__":
    name, gpu_list, folder, out = sys.argv[1:5]
    period = int(sys.argv[5]) if len(sys.argv) > 5 else None
    gpus = tuple(int(g) for g in gpu_list.split(","))
    comm, hosts = connect()
    result = run(name, Path(folder), gpus, Cluster(comm, len(gpus), hosts), period)
    if result is not None:
        np.savez(out, **result)
