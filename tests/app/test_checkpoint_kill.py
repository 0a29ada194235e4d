"""A checkpoint writer killed with SIGKILL at random moments never leaves a bad checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from convnet.app.checkpoint import load_checkpoint, save_checkpoint
from tests.support import ROOT

HELPER = ROOT / "tests" / "support" / "checkpoint_writer.py"
KILLS = 30


def check_consistent(path):
    arrays, meta = load_checkpoint(path)
    weights = arrays["weights/conv1/W0"]
    assert len(weights) == meta["size"] and float(weights.sum()) == meta["total"]
    np.testing.assert_array_equal(arrays["momentum/conv1/W0"], -weights[: meta["size"] // 2])
    assert int(arrays["step"][0]) == meta["step"]
    return meta["step"]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_killed_writer_leaves_a_loadable_checkpoint(tmp_path):
    target = tmp_path / "ckpt.npz"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    rng = random.Random(1234)
    steps_seen, left_temp = set(), 0
    for round_ in range(KILLS):
        start = round_ * 100_000
        writer = subprocess.Popen([sys.executable, str(HELPER), str(target), str(start)],
                                  stdout=subprocess.PIPE, env=env, text=True)
        try:
            assert writer.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.03))
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
            writer.stdout.close()
        step = check_consistent(target)
        assert start <= step < start + 100_000, "the checkpoint is not this round's"
        steps_seen.add(step - start)
        left_temp += any(name.endswith(".tmp") for name in os.listdir(tmp_path))
    # The kills landed at different points of the writer's loop, some of them
    # in the middle of a write (a temp file was left behind) ...
    assert len(steps_seen) > 3 and left_temp > 0
    # ... and every save starts by removing what a killed writer left.
    save_checkpoint(target, {"step": np.array([0])}, {"done": True})
    assert os.listdir(tmp_path) == ["ckpt.npz"]
    assert load_checkpoint(target)[1] == {"done": True}
