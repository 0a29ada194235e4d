"""The scaled-down hybrid AlexNet learns as a single-device run of the same net does."""

from __future__ import annotations

import re

import numpy as np

from convnet.config import load_net
from convnet.data import DataOptions, make_provider
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.plan.planner import make_plan
from tests.support.reference_model import ReferenceTrainer
from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

STEPS = 120
MINI = 16
GPUS = (0, 1, 2, 3)


def _larger_init(text: str) -> str:
    """AlexNet's initW/initB suit 0..255 pixels and wide layers; scaled down to unit-variance
    data and a few filters its signal vanishes, so start 10x larger and with zero biases."""
    text = re.sub(r"initW=([0-9.]+)", lambda m: f"initW={float(m.group(1)) * 10:g}", text)
    return re.sub(r"initB=1\b", "initB=0", text)


def _smaller_steps(text: str) -> str:
    return re.sub(r"base=([0-9.]+)", lambda m: f"base={float(m.group(1)) * 0.3:g}", text)


def test_hybrid_training_lowers_the_cost_like_one_device(tmp_path):
    layer_def, params = scaled_config("imagenet-4gpu-data-model", tmp_path, _smaller_steps,
                                      _larger_init)
    net = load_net(layer_def, params, data_dims={0: IMAGE_DIMS, 1: (1,)},
                   num_classes=NUM_CLASSES)
    provider = make_provider("dummy", options=DataOptions(
        data_dims={0: IMAGE_DIMS, 1: (1,)}, num_classes=NUM_CLASSES, cases_per_batch=256))
    images, labels = provider.get_batch(1, train=True, epoch=1)
    executor = Executor(net, make_plan(net, GPUS, MINI), make_devices(GPUS, "cpu"), seed=1)
    single = ReferenceTrainer(net, seed=1)
    hybrid_costs, single_costs = [], []
    try:
        for step in range(STEPS):
            lo = (step * MINI) % len(images)
            batch = [images[lo:lo + MINI], labels[lo:lo + MINI]]
            hybrid_costs.append(executor.step(batch, step / STEPS).costs["logprob"]["cost"])
            single_costs.append(single.step(batch, step / STEPS)["logprob"])
    finally:
        executor.close()
    first_h, last_h = np.mean(hybrid_costs[:20]), np.mean(hybrid_costs[-20:])
    first_s, last_s = np.mean(single_costs[:20]), np.mean(single_costs[-20:])
    assert last_s < 0.85 * first_s, (first_s, last_s)
    assert last_h < 0.85 * first_h, (first_h, last_h)
    assert last_h < 1.25 * last_s, (last_h, last_s)
