"""A pipeline with a stage per process trains what one process trains, bitwise.

The digits net in two stages (convolutions, then the fc layers), each on its own
rank under ``mpiexec -n 2``, with 3 micro-batches per minibatch: every piece's
activation and gradient crosses the processes as a send/receive pair while the
stages overlap, and the saved weights and momentum are bitwise those of one
process running both stages.
"""

from __future__ import annotations

from tests.support import ROOT
from tests.support.cli import DUMMY, SINGLE_DEF, SINGLE_PARAMS, assert_same_arrays, \
    checkpoint_arrays
from tests.support.mpi import needs_mpi, run_alone, run_mpi
from tests.support.pipeline import split_layer_def

pytestmark = needs_mpi


def test_a_stage_per_process_trains_what_one_process_trains(tmp_path):
    layer_def = split_layer_def(SINGLE_DEF, ["fca"], tmp_path / "split.cfg")
    args = [str(ROOT / "convnet.py"), *DUMMY, "--layer-def", str(layer_def), "--layer-params",
            str(SINGLE_PARAMS), "--micro-batches", "3", "--epochs", "1"]
    done = run_mpi(2, args + ["--gpu", "0", "--save-path", "A"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    alone = run_alone(args + ["--gpu", "0,1", "--save-path", "B"], cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    arrays, meta = checkpoint_arrays(tmp_path / "A" / "checkpoint.npz")
    assert meta["options"]["micro_batches"] == 3
    assert_same_arrays(arrays, checkpoint_arrays(tmp_path / "B" / "checkpoint.npz")[0])
