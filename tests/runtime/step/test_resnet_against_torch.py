"""One training step of the ResNet-20 example (data-parallel on its two devices, bnorm
with stats=global) against the same net in PyTorch (``batch_norm`` in training mode, as
``nn.BatchNorm2d`` computes it, from the same weights; ``bench/torch_net.py``).

Every weight's momentum increment, the running averages and the cost agree to 1e-9 in
float64 (the engine's executor on float64 arrays) and to 1e-5 in float32 (of each
tensor's largest element; the engine with direct convolutions, as the benchmarks'
same-net check: Winograd's float32 rounding puts relu ties on the other side).  The
PyTorch side is the benchmarks' (``bench/agreement.py``, ``bench/torch_net.py``).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from convnet.config import load_net
from tests.support import ROOT

torch = pytest.importorskip("torch", reason="PyTorch (in the 'test' extra) is not installed")
sys.path.insert(0, str(ROOT / "bench"))
import agreement  # noqa: E402

MINI, GPUS = 8, (0, 1)


def _net():
    return load_net(ROOT / "examples" / "resnet20-cifar10.cfg",
                    ROOT / "examples" / "resnet20-cifar10-params.cfg",
                    data_dims={0: (3, 32, 32), 1: (1,)}, num_classes=10)


def _batch():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((MINI, 3, 32, 32)), rng.integers(0, 10, (MINI, 1)).astype(float)]


def _engine_step(net, dtype):
    """(initial state, cost, state after one step) of the engine computing in ``dtype``,
    with direct convolutions."""
    return agreement.engine_step(net, GPUS, _batch(), dtype, winograd=False)


def _torch_step(net, initial: dict, dtype):
    """(cost, {state key: array}) of one PyTorch step (``bench/agreement.py``): the momentum
    increments as the engine keeps them and the running averages after the step."""
    weights: dict = {}
    for key, value in initial.items():
        group, layer, name = key.split("/")
        if group == "weights":
            weights.setdefault(layer, {})[name] = value
    cost, updates, running = agreement.torch_step(torch, net, weights, _batch(), dtype)
    return cost, ({f"momentum/{k}": v for k, v in updates.items()}
                  | {f"weights/{k}": v for k, v in running.items()})


def _worst(engine: dict, reference: dict) -> float:
    return max(float(np.abs(engine[k] - v).max() / max(np.abs(v).max(), 1e-30))
               for k, v in reference.items())


def test_a_resnet20_step_is_pytorchs_in_float64_and_float32():
    net = _net()
    initial, cost64, after64 = _engine_step(net, np.float64)
    torch_cost64, exact = _torch_step(net, initial, np.float64)
    assert sum(k.endswith("/mean") for k in exact) == 21  # every bnorm's running mean
    assert cost64 == pytest.approx(torch_cost64, rel=1e-9)
    assert _worst(after64, exact) < 1e-9

    _, cost32, after32 = _engine_step(net, np.float32)
    torch_cost32, torch32 = _torch_step(net, initial, np.float32)
    assert cost32 == pytest.approx(torch_cost64, rel=1e-5)
    assert _worst(after32, exact) < 1e-5
    assert _worst(after32, torch32) < 1e-5
