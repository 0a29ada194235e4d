"""bnorm with stats=global across processes: each replica's statistics cross to the other
ranks (float64 sends), every replica combines them in replica order, so two processes
train bitwise what one process over the same devices trains (weights, momentum, running
averages, costs, an evaluation and a layer's features)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.configs import residual_pair
from tests.support.mpi import needs_mpi, run_mpi
from tests.support.mpi_programs import train_steps

pytestmark = needs_mpi
NAME = "resnet-tiny"


@pytest.mark.parametrize("gpus", [(0,), (0, 1)])  # one device per process, and two
def test_processes_combine_the_statistics_as_one_process(tmp_path, gpus):
    replicas = ",".join(str(d) for d in range(2 * len(gpus)))
    layers, params = residual_pair(replicas)
    (tmp_path / f"layers-{NAME}.cfg").write_text(layers)
    (tmp_path / f"layer-params-{NAME}.cfg").write_text(params)
    out = tmp_path / "mpi.npz"
    done = run_mpi(2, [train_steps.__file__, NAME, ",".join(map(str, gpus)), str(tmp_path),
                       str(out)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = dict(np.load(out))
    want = train_steps.run_alone(NAME, tmp_path, gpus * 2)
    assert json.loads(bytes(got.pop("__costs__"))) == json.loads(bytes(want.pop("__costs__")))
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert np.array_equal(got[key], value), key
    assert np.any(want["weights/bn1/mean"])  # the running averages moved
