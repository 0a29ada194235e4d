"""The benchmarks' PyTorch side (bench/torch_net.py) and their one-step agreement check
(bench/agreement.py): the builder computes the engine's training step on the
reference nets (towers, grouped and multi-input convs, rnorm, dropout with the
engine's masks), and the check fails when the two compute different things."""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest

from convnet.config import load_net
from tests.support import ROOT

torch = pytest.importorskip("torch", reason="PyTorch (the 'bench' extra) is not installed")

BENCH = ROOT / "bench"
REF = ROOT / "examples" / "cuda-convnet2"
sys.path.insert(0, str(BENCH))
import agreement  # noqa: E402
import torch_net  # noqa: E402


def _net(name, size):
    classes = 10 if name.startswith("cifar") else 1000
    return load_net(REF / f"layers-{name}.cfg", REF / f"layer-params-{name}.cfg",
                    data_dims={0: (3, size, size), 1: (1,)}, num_classes=classes), classes


def _batch(mini, size, classes, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((mini, 3, size, size), dtype=np.float32),
            rng.integers(0, classes, (mini, 1)).astype(np.float32)]


@pytest.mark.parametrize("name, gpus, size", [("cifar10-11pct", (0,), 32),
                                              ("imagenet-2gpu-model", (0, 1), 64),
                                              ("imagenet-2gpu-data", (0, 1), 64)])
def test_the_pytorch_net_takes_the_engines_training_step(name, gpus, size):
    net, classes = _net(name, size)
    result = agreement.one_step(torch, net, gpus, _batch(8, size, classes))
    assert result.passed, result.text()
    assert result.cost_rel < 1e-5
    assert result.size == sum(ldef.param_count for ldef in net if ldef.has_weights)
    assert result.total("engine_off") <= 1e-4 * result.size
    assert "same computation" in result.text()


def test_the_check_fails_when_pytorch_drops_other_units(monkeypatch):
    net, classes = _net("imagenet-2gpu-model", 64)
    monkeypatch.setattr(agreement, "engine_masks",  # PyTorch keeps every unit
                        lambda net: lambda name, shape: np.ones(shape, bool))
    result = agreement.one_step(torch, net, (0, 1), _batch(8, 64, classes))
    assert not result.passed
    assert "WARNING: the two nets do not compute the same thing" in result.text()
    assert not all(t.passed for t in result.tensors)  # not only the cost


def test_the_check_fails_when_a_norm_constant_differs(monkeypatch):
    net, classes = _net("imagenet-2gpu-model", 64)
    build = torch_net.build

    def changed(torch, net, weights, **kwargs):
        other = copy.deepcopy(net)
        other["rnorm1a"].params["minDiv"] = 1.0  # the config says 2
        return build(torch, other, weights, **kwargs)

    monkeypatch.setattr(torch_net, "build", changed)
    result = agreement.one_step(torch, net, (0, 1), _batch(8, 64, classes))
    assert not result.passed
    worst = max(result.tensors, key=lambda t: t.engine_off / t.size)
    assert worst.engine_off > 0.5 * worst.size


def test_the_engine_may_be_off_the_exact_step_as_much_as_pytorch_float32_is():
    exact = np.linspace(-1, 1, 10_000).reshape(100, 100)
    torch32 = exact.copy()
    torch32[:3, :10] += 0.01  # 30 elements off, as rounding and tie switches do
    engine = exact.copy()
    engine[50:52, :30] -= 0.02  # 60 elements off: twice PyTorch's
    diff = agreement.compare("layer/W0", engine, torch32, exact)
    assert (diff.engine_off, diff.torch_off, diff.between) == (60, 30, 90)
    assert diff.worst_rel == pytest.approx(0.02)
    assert diff.passed
    engine[60, :17] += 0.5  # 17 more: beyond twice PyTorch's plus the slack
    assert not agreement.compare("layer/W0", engine, torch32, exact).passed
    alone = agreement.compare("other/b", exact[0, :16] + 1.0, exact[0, :16], exact[0, :16])
    assert alone.engine_off == 16 and alone.passed  # the slack, for PyTorch's zero
    result = agreement.Agreement(2.0, 2.0, 2.0, [diff, alone])
    assert result.passed and "same computation" in result.text()
    assert not agreement.Agreement(2.001, 2.0, 2.0, [diff, alone]).passed
