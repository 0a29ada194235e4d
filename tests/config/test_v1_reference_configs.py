"""The five cuda-convnet (v1) CIFAR-10 example nets load, plan, train and pass --check-grads.

Their first conv layers start from initW=0.0001, so activations are tiny and
finite differences of the whole-net cost cross relu and max-pool kinks; the
gradient check must tell those apart from wrong gradients (it skips them),
at every input size and seed, and still fail on a planted wrong backward.
"""

from __future__ import annotations


import pytest

from convnet import kernels
from convnet.config import load_net
from convnet.plan.planner import make_plan
from convnet.runtime.gradcheck import check_net_gradients
from tests.support import ROOT
from tests.support.cli import ok, run_cli

V1 = ROOT / "examples" / "cuda-convnet-v1"
NAMES = ["18pct", "19pct", "80sec", "conv-local-11pct", "conv-local-13pct"]
# (input side, gradient-check seeds): several seeds at the cheapest size, a
# different seed at each larger one, to keep the suite fast.
SIZES_SEEDS = [(16, (0, 1, 2)), (24, (3,)), (32, (4,))]


def v1_net(name: str, size: int):
    return load_net(V1 / f"layers-{name}.cfg", V1 / f"layer-params-{name}.cfg",
                    {0: (3, size, size), 1: (1,)}, 10)


@pytest.mark.parametrize("size, seeds", SIZES_SEEDS)
@pytest.mark.parametrize("name", NAMES)
def test_v1_net_loads_plans_and_passes_the_gradient_check(name, size, seeds):
    net = v1_net(name, size)
    assert net["probs"].outputs == 10
    make_plan(net, [0], 32)
    for seed in seeds:
        lines: list[str] = []
        assert check_net_gradients(net, batch_size=2, seed=seed, report=lines.append), \
            "\n".join(lines)


@pytest.mark.parametrize("name", NAMES)
def test_v1_net_trains_on_dummy_data(name, tmp_path):
    proc = ok(run_cli("--no-progress", "--layer-def", V1 / f"layers-{name}.cfg",
                      "--layer-params", V1 / f"layer-params-{name}.cfg",
                      "--data-provider", "dummy", "--data-dims", "3x16x16", "--num-classes", "10",
                      "--train-range", "1", "--test-range", "9", "--mini", "128", "--epochs", "1",
                      "--save-path", tmp_path / "run", timeout=300))
    assert any(line.startswith("epoch") for line in proc.stdout.splitlines()), proc.stdout


def test_a_planted_wrong_backward_still_fails_on_a_v1_net():
    """A max-pool backward that sends each window's gradient to the wrong pixel:
    the forward's switches are unchanged, so no kink hides it."""
    real = kernels.pool.pool_backward.generic

    def shifted(gy, x, y, cache, **geometry):
        dx = real(gy, x, y, cache, **geometry)
        return dx[..., ::-1].copy()

    kernels.register_kernel("pool_backward", "numpy")(shifted)
    try:
        lines: list[str] = []
        assert not check_net_gradients(v1_net("19pct", 16), batch_size=2, seed=0,
                                       report=lines.append)
    finally:
        kernels._OVERRIDES.pop(("pool_backward", "numpy"))
    assert any(line.startswith("pool1 ") and " FAIL " in line for line in lines), "\n".join(lines)
