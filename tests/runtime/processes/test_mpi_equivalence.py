"""Several processes train what one process trains, bitwise.

Each case runs a scaled reference config for a few steps under ``mpiexec``
(``tests/support/mpi_programs/train_steps.py``) and in this process over the same
logical devices, and compares the final weights and momentum, the step and
evaluation costs and a layer's features.  The sums of the sharded
all-reduce run in replica order in both, so every array must be bitwise equal.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.support.mpi import needs_mpi, run_mpi
from tests.support.mpi_programs import train_steps
from tests.support.scaled_configs import scaled_config

PROGRAM = train_steps.__file__

pytestmark = needs_mpi


def _assert_processes_train_as_one(tmp_path, name, ranks, gpus, local_sgd=None,
                                   params_edit=None) -> dict:
    """Train ``name`` (its layer-params text rewritten by ``params_edit``) on ``ranks``
    processes of ``gpus`` each and in one process on all of them: the same costs and
    bitwise the same arrays.  Returns the one-process arrays."""
    scaled_config(name, tmp_path, params_edit)
    out = tmp_path / "mpi.npz"
    extra = [] if local_sgd is None else [str(local_sgd)]
    done = run_mpi(ranks, [str(PROGRAM), name, ",".join(map(str, gpus)), str(tmp_path),
                           str(out), *extra], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = dict(np.load(out))
    want = train_steps.run_alone(name, tmp_path, gpus * ranks, local_sgd=local_sgd)
    assert sorted(got) == sorted(want)
    assert json.loads(bytes(got.pop("__costs__"))) == \
        json.loads(bytes(want.pop("__costs__")))
    for key, value in want.items():
        assert np.array_equal(got[key], value), key
    return want


@pytest.mark.parametrize("name, ranks, gpus", [
    ("imagenet-2gpu-data", 2, (0,)),          # data-parallel: the all-reduce crosses processes
    ("imagenet-2gpu-model", 2, (0,)),         # model-parallel: activations and gradients cross
    ("imagenet-4gpu-data-model", 4, (0,)),    # hybrid, one device per process
    ("imagenet-4gpu-data-model", 2, (0, 1)),  # hybrid, two devices per process
])
def test_processes_train_what_one_process_trains(tmp_path, name, ranks, gpus):
    want = _assert_processes_train_as_one(tmp_path, name, ranks, gpus)
    assert any(k.startswith("momentum/") and np.any(v) for k, v in want.items())


@pytest.mark.parametrize("name, ranks, gpus", [
    ("imagenet-2gpu-data", 2, (0,)),          # every weight layer averaged across processes
    ("imagenet-4gpu-data-model", 2, (0, 1)),  # hybrid: replicas on both sides of the cut
])
def test_local_sgd_across_processes_is_local_sgd_in_one(tmp_path, name, ranks, gpus):
    """Two steps of local:2, a local step and an averaging one: the weight slices of the
    average cross processes and are summed in replica order, so bitwise as in one."""
    want = _assert_processes_train_as_one(tmp_path, name, ranks, gpus, local_sgd=2)
    synced = train_steps.run_alone(name, tmp_path, gpus * ranks)
    assert any(not np.array_equal(want[k], synced[k]) for k in want
               if k.startswith("weights/"))  # local SGD did train otherwise


def test_a_mixed_net_across_processes_is_the_mixed_net_in_one(tmp_path):
    """Convolutions synchronous, fc layers local:2 by their sync= keys: the gradient
    slices of the ones and the weight slices of the others' average cross processes."""
    def fc_local(text):
        return re.sub(r"^(\[fc\w+\])$", r"\1\nsync=local:2", text, flags=re.M)
    want = _assert_processes_train_as_one(tmp_path, "imagenet-2gpu-data", 2, (0,),
                                          params_edit=fc_local)
    scaled_config("imagenet-2gpu-data", tmp_path)  # the same net without the keys
    for local_sgd in (None, 2):  # the keys made it train otherwise than either mode
        other = train_steps.run_alone("imagenet-2gpu-data", tmp_path, (0, 1), local_sgd)
        assert any(not np.array_equal(want[k], other[k]) for k in want
                   if k.startswith("weights/")), local_sgd
