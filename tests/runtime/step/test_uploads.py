"""A minibatch's stored images made float on the devices that train on them.

What is compared: training steps whose image column is
:class:`~convnet.kernels.images.StoredImages` (uint8 windows, uploaded as stored and
made float by each CPU device's worker in its load task) against the same steps on
that column made float on the host first (what ``get_batch`` serves): the same costs
and weights, bitwise, on a data-parallel plan whose two devices each convert their
shard; and with the next minibatch staged before each step, whose load tasks then
take the staged uploads instead of making their own.
"""

from __future__ import annotations

import numpy as np

from convnet.config import load_net
from convnet.kernels.images import StoredImages
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.devices.cpu import CpuDevice
from convnet.runtime.step.executor import Executor

from tests.support import ROOT

EXAMPLES = ROOT / "examples"


def stored_batches(count: int, cases: int = 16) -> list[list]:
    """Minibatches of 8x8 windows of 10x10 uint8 images, mirrored and shifted."""
    rng = np.random.default_rng(1)
    mean = (rng.random((1, 10, 10)) * 255).astype(np.float32)
    batches = []
    for _ in range(count):
        images = StoredImages(rng.integers(0, 256, (cases, 8, 8, 1), dtype=np.uint8), mean,
                              rng.integers(0, 3, (cases, 2)).astype(np.int32),
                              rng.integers(0, 2, cases).astype(bool),
                              rng.standard_normal((cases, 1)).astype(np.float32),
                              np.float32(1 / 256), channels_last=True)
        batches.append([images, rng.integers(0, 10, (cases, 1)).astype(np.float32)])
    return batches


class CountingCpuDevice(CpuDevice):
    """A CPU device that counts the arrays uploaded to it."""

    def __init__(self, index, physical):
        super().__init__(index, physical)
        self.uploads = 0

    def upload(self, host_array):
        self.uploads += 1
        return super().upload(host_array)


def executor(devices=None):
    net = load_net(EXAMPLES / "digits-data.cfg", EXAMPLES / "digits-params.cfg",
                   data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)
    return Executor(net, make_plan(net, (0, 1), 16), devices or make_devices((0, 1), "cpu"),
                    seed=2, parallel=True)


def test_stored_images_train_bitwise_as_their_float_columns_staged_or_not():
    batches = stored_batches(3)
    floats = executor()
    stored = executor()
    counting = [CountingCpuDevice(0, 0), CountingCpuDevice(1, 1)]
    staged = executor(counting)
    try:
        staged.stage(batches[0])
        for k, batch in enumerate(batches):
            want = floats.step([np.asarray(batch[0]), batch[1]])
            assert stored.step(batch).costs == want.costs
            if k + 1 < len(batches):
                staged.stage(batches[k + 1])  # as the training loop does, before the step
            before = [d.uploads for d in counting]
            assert staged.step(batch).costs == want.costs
            # the step takes its shard's staged upload: only the mean is sent, once
            assert [d.uploads - b for d, b in zip(counting, before)] == [int(k == 0)] * 2
        # each staged shard sent its pixels, windows, mirrors and shifts; and the mean
        assert [d.uploads for d in counting] == [4 * len(batches) + 1] * 2
        a, b, c = floats.state_arrays(), stored.state_arrays(), staged.state_arrays()
        assert all(np.array_equal(a[key], b[key]) and np.array_equal(a[key], c[key])
                   for key in a)
    finally:
        floats.close(), stored.close(), staged.close()


def test_a_replayed_step_graph_makes_stored_images_float_before_staging_them():
    from convnet.runtime.step.step_graph import StepGraph
    from tests.runtime.step.test_step_graph import ReplayingCapture

    net = load_net(EXAMPLES / "digits-single.cfg", EXAMPLES / "digits-params.cfg",
                   data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)
    eager, graphed = (Executor(net, make_plan(net, (0,), 16), make_devices((0,), "cpu"))
                      for _ in range(2))
    graphed.step_graph = StepGraph(graphed, ReplayingCapture(graphed))
    try:
        for batch in stored_batches(3):
            assert graphed.step(batch).costs == eager.step([np.asarray(batch[0]), batch[1]]).costs
        assert graphed.step_graph.replays == 3
        a, b = eager.state_arrays(), graphed.state_arrays()
        assert all(np.array_equal(a[k], b[k]) for k in a)
    finally:
        eager.close(), graphed.close()
