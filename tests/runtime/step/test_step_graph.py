"""Captured training steps (``CONVNET_CUDA_GRAPH=1``), replayed on CPU devices.

A real capture needs a GPU; here a stand-in backend "captures" a step by running
its walk and undoing it (a capture only records), and "launches" by running the
captured walk again into the captured buffers, as a replay writes the memory the
capture recorded.  That checks what the executor does around the graph: the inputs
staged into the captured buffers, the results read back from the captured vector
with one wait, the weights those replays train bitwise those of eager steps, a new
capture where the arrays changed, the eager steps where one cannot replay, and
which nets cannot be captured and why.
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet.config import load_net
from convnet.errors import DivergedError
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.precision import StepBackup
from convnet.runtime.step.step_graph import StepGraph, capture_blockers

from tests.support import ROOT

EXAMPLES = ROOT / "examples"


class ReplayingCapture:
    """A capture backend for CPU devices (see the module docstring)."""

    def __init__(self, executor):
        self.executor = executor
        self.captures = 0

    def capture(self, walk):
        ex = self.executor
        backup = StepBackup(ex.store, ex.devices)
        backup.take()
        out = walk()
        backup.restore()  # captured, not run
        self.walk, self.packed = walk, out[1][0]
        self.captures += 1
        return object(), out, None

    def launch(self, graph):
        _, packed = self.walk()
        self.packed[...] = packed[0]

    def stage(self, static, host):
        static[...] = host


def _net():
    return load_net(EXAMPLES / "digits-single.cfg", EXAMPLES / "digits-params.cfg",
                    data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)


def _batches(count: int, cases: int = 32):
    rng = np.random.default_rng(0)
    return [[rng.standard_normal((cases, 1, 8, 8)).astype(np.float32),
             rng.integers(0, 10, (cases, 1)).astype(np.float32)] for _ in range(count)]


def _executor(net=None):
    net = net or _net()
    return Executor(net, make_plan(net, (0,), 32), make_devices((0,), "cpu"))


def test_replayed_steps_train_bitwise_as_eager_steps():
    batches = _batches(4)
    eager = _executor()
    graphed = _executor()
    backend = ReplayingCapture(graphed)
    graphed.step_graph = StepGraph(graphed, backend)
    try:
        for batch in batches:
            want, got = eager.step(batch), graphed.step(batch)
            assert got.costs == want.costs and got.host_waits == 1
        assert graphed.step_graph.replays == 4 and backend.captures == 1
        a, b = eager.state_arrays(), graphed.state_arrays()
        assert all(np.array_equal(a[k], b[k]) for k in a)
        short = [column[:20] for column in batches[0]]  # a short last minibatch: eager
        eager.step(short)
        graphed.step(short)
        assert graphed.step_graph.replays == 4
        graphed.load_state_arrays(eager.state_arrays())  # new arrays: captured again
        for batch in batches[:2]:
            assert graphed.step(batch).costs == eager.step(batch).costs
        assert backend.captures == 2
        a, b = eager.state_arrays(), graphed.state_arrays()
        assert all(np.array_equal(a[k], b[k]) for k in a)
    finally:
        eager.close()
        graphed.close()


def test_a_non_finite_replay_is_reported_as_an_eager_one():
    ex = _executor()
    ex.step_graph = StepGraph(ex, ReplayingCapture(ex))
    batches = _batches(2)
    try:
        ex.step(batches[0])
        ex.store.weights["fca"][0]["W0"][:] = np.inf
        with pytest.raises(DivergedError, match="output of layer 'fca' on device 0 at step 1"):
            ex.step(batches[1])
    finally:
        ex.close()


def test_what_cannot_be_captured_says_why(tmp_path):
    ex = _executor()
    try:
        assert capture_blockers(ex) == ["not a CUDA device"]  # all else would do
    finally:
        ex.close()
    params = (EXAMPLES / "digits-params.cfg").read_text()
    changed = tmp_path / "params.cfg"
    changed.write_text(params.replace("[fca]\n", "[fca]\nwball=1\n", 1)
                       .replace("epsW=0.05\n", "epsW=linear[0.05;0.005]\n", 1))
    net = load_net(EXAMPLES / "digits-single.cfg", changed,
                   data_dims={0: (1, 8, 8), 1: (1,)}, num_classes=10)
    ex = Executor(net, make_plan(net, (0,), 32), make_devices((0,), "cpu"), precision="fp16")
    try:
        reasons = capture_blockers(ex)
    finally:
        ex.close()
    assert "--precision fp16 changes its loss scale" in reasons
    assert "layer 'fca' rescales its weights into new arrays (wball)" in reasons
    assert any("learning rate follows a schedule" in r for r in reasons)
