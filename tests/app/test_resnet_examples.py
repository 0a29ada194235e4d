"""The ResNet examples (examples/resnet*.cfg): each loads and plans data-parallel with its
batch statistics combined over the replicas, has the layers and parameters of the
published nets, passes --check-grads (ResNet-20, at a quarter of its filters; the full
nets' checks are in docs/BATCH-NORM.md) and trains: ResNet-20 and its digits variant
through the command line, the ImageNet nets one step at a minibatch of 4."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from convnet.app.command_line.main import main
from convnet.config import load_net
from convnet.plan.ops import BatchStats
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from tests.support import ROOT

EXAMPLES = ROOT / "examples"
#: name -> (data dims, classes, the devices of its gpu= line, output sides of its stages)
NETS = {"resnet20-cifar10": ((3, 32, 32), 10, (0, 1), (32, 16, 8)),
        "resnet20-digits": ((1, 8, 8), 10, (0, 1), (8, 4, 2)),
        "resnet18-imagenet": ((3, 224, 224), 1000, (0, 1, 2, 3), (56, 28, 14, 7)),
        "resnet50-imagenet": ((3, 224, 224), 1000, (0, 1, 2, 3), (56, 28, 14, 7))}
#: torchvision's parameter counts (convolutions without bias, batch norm's weight and bias)
TORCHVISION_PARAMETERS = {"resnet18-imagenet": 11_689_512, "resnet50-imagenet": 25_557_032}


def _paths(name):
    return EXAMPLES / f"{name}.cfg", EXAMPLES / f"{name}-params.cfg"


def _load(name, layer_def=None):
    dims, classes, _, _ = NETS[name]
    return load_net(layer_def or _paths(name)[0], _paths(name)[1],
                    data_dims={0: dims, 1: (1,)}, num_classes=classes)


@pytest.mark.parametrize("name", sorted(NETS))
def test_each_example_plans_data_parallel_with_combined_statistics(name):
    net = _load(name)
    _, _, gpus, sides = NETS[name]
    plan = make_plan(net, gpus, 4 * len(gpus))
    assert plan.scheme == "data" and plan.num_passes == 1
    bnorms = [ldef.name for ldef in net if ldef.type == "bnorm"]
    stats = [op for op in plan.ops if isinstance(op, BatchStats)]
    assert sorted(op.layer for op in stats) == sorted(bnorms * 2)  # before fwd and bwd
    # every stage's last block ends on the floor rule's side; the pool reads all of it
    stage_ends = [ldef for ldef in net if re.fullmatch(r"s\d+b\d+_sum", ldef.name)
                  and not net.layers.get(ldef.name.replace(
                      f"b{ldef.name[3]}_", f"b{int(ldef.name[3]) + 1}_"))]
    assert [ldef.output_shape[-1] for ldef in stage_ends] == list(sides)
    assert net["pool"].output_shape[1:] == (1, 1)
    if name in TORCHVISION_PARAMETERS:  # the conv biases are zero and never learn
        conv_biases = sum(ldef.attrs["filters"] for ldef in net if ldef.type == "conv")
        learned = sum(ldef.learned_count for ldef in net if ldef.has_weights)
        assert learned - conv_biases == TORCHVISION_PARAMETERS[name]


def test_resnet20_passes_the_gradient_check_at_a_quarter_of_its_filters(tmp_path, capsys):
    text = _paths("resnet20-cifar10")[0].read_text()
    text = re.sub(r"(?m)^((?:filters|channels)=)(\d+)$",
                  lambda m: m.group(1) + str(max(3, int(m.group(2)) // 4)), text)
    (tmp_path / "layers.cfg").write_text(text)
    code = main(["--check-grads", "--layer-def", str(tmp_path / "layers.cfg"),
                 "--layer-params", str(_paths("resnet20-cifar10")[1]),
                 "--data-dims", "3x32x32", "--num-classes", "10"])
    out = capsys.readouterr().out
    assert code == 0 and "gradient check passed" in out, out
    assert sum(" bnorm " in line and " OK " in line for line in out.splitlines()) == 21


def test_resnet20_trains_and_a_saved_run_tests_with_its_running_averages(tmp_path, capsys):
    """The digits variant, data-parallel, one epoch of one batch; --test-only of the
    checkpoint gives the run's last test cost (the running averages were saved)."""
    layer_def, layer_params = _paths("resnet20-digits")
    assert main(["--layer-def", str(layer_def), "--layer-params", str(layer_params),
                 "--data-provider", "digits", "--train-range", "1", "--test-range", "6",
                 "--gpu", "0,1", "--mini", "32", "--epochs", "1",
                 "--save-path", str(tmp_path / "run")]) == 0
    trained = capsys.readouterr().out
    final = re.findall(r"test cost ([0-9.]+) error\s+([0-9.]+)%", trained)
    assert final, trained
    assert main(["--load-file", str(tmp_path / "run"), "--test-only"]) == 0
    tested = capsys.readouterr().out
    cost = re.search(r"test cost ([0-9.]+)\s+error [0-9.]+ \(([0-9.]+)%\)", tested)
    assert cost is not None, tested
    assert float(cost.group(1)) == pytest.approx(float(final[-1][0]), abs=1e-4)
    assert cost.group(2) == final[-1][1]


@pytest.mark.parametrize("name", ["resnet18-imagenet",
                                  pytest.param("resnet50-imagenet", marks=pytest.mark.slow)])
def test_the_imagenet_resnets_take_a_training_step(name):
    net = _load(name)
    gpus = NETS[name][2]
    rng = np.random.default_rng(0)
    batch = [rng.standard_normal((4, 3, 224, 224), dtype=np.float32),
             rng.integers(0, 1000, (4, 1)).astype(np.float32)]
    executor = Executor(net, make_plan(net, gpus, 4), make_devices(gpus, "cpu"), seed=0)
    try:
        before = executor.state_arrays()
        cost = executor.step(batch).costs["logprob"]["cost"]
        after = executor.state_arrays()
    finally:
        executor.close()
    assert math.isfinite(cost) and cost > 0
    assert not np.array_equal(after["weights/s4b2_bn_b/W0"], before["weights/s4b2_bn_b/W0"])
    assert not np.array_equal(after["weights/bn1/mean"], before["weights/bn1/mean"])
