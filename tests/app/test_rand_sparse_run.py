"""A cuda-convnet v1 style net with ``randSparse`` conv and local layers, run by the
real command: it loads, plans, shows its connectivity in ``--print-plan``, trains,
saves its tables in the checkpoint and keeps them on resume, gives one device's
weights when data-parallel on two, and a checkpoint whose table was tampered with is
refused with one line.
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest

from convnet.config import load_net
from convnet.layers.connectivity import connection_tables
from convnet.runtime.gradcheck import check_net_gradients
from tests.support.checkpoints import rebuild
from tests.support.cli import assert_clean_error, checkpoint_arrays, ok, run_cli
from tests.support.configs import DATA_LAYERS

DIMS = {0: (3, 8, 8), 1: (1,)}
RUN = ["--no-progress", "--data-provider", "dummy", "--data-dims", "3x8x8", "--num-classes",
       "10", "--train-range", "1-2", "--test-range", "9", "--mini", "64", "--seed", "4"]
#: conv2: 16 channels, 4 groups reading 8 each (two permutations); local3: 64 channels,
#: 4 groups reading 32 each; v1's own limits hold too (filterChannels % 4, 16 filters per
#: conv group).
LAYERS = DATA_LAYERS + """[conv1]
type=conv
inputs=data
channels=3
filters=16
filterSize=3
padding=1
initW=0.1
neuron=relu{gpu}

[conv2]
type=conv
inputs=conv1
channels=16
groups=4
filterChannels=8
randSparse=1
filters=16
filterSize=3
padding=1
initW=0.1
neuron=relu{gpu}

[pool2]
type=pool
pool=max
inputs=conv2
sizeX=2
stride=2
channels=64{gpu}

[local3]
type=local
inputs=pool2
channels=64
groups=4
filterChannels=32
randSparse=true
filters=4
filterSize=3
padding=1
initW=0.05
neuron=relu{gpu}

[fc10]
type=fc
outputs=10
inputs=local3
initW=0.01{gpu}

[probs]
type=softmax
inputs=fc10{gpu}

[logprob]
type=cost.logreg
inputs=labels,probs{gpu}
"""
WEIGHTS = "epsW=0.01\nepsB=0.02\nmomW=0.9\nmomB=0.9\nwc=0.0001\n"
PARAMS = "".join(f"[{name}]\n{WEIGHTS}\n" for name in ("conv1", "conv2", "local3", "fc10")) \
    + "[logprob]\ncoeff=1\n"
SPARSE = {("conv2", 0), ("local3", 0)}


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rand-sparse")
    (folder / "params.cfg").write_text(PARAMS)
    (folder / "single.cfg").write_text(LAYERS.format(gpu=""))
    (folder / "data.cfg").write_text(LAYERS.format(gpu="\ngpu=0,1"))
    return folder


@pytest.fixture(scope="module")
def single_run(configs):
    save = configs / "single"
    ok(run_cli("--layer-def", configs / "single.cfg", "--layer-params", configs / "params.cfg",
               "--gpu", "0", "--epochs", "1", "--save-path", save, *RUN))
    return save / "checkpoint.npz"


def _tables(arrays):
    return {(key.split("/")[1], int(key.split("/")[2][1:])): arrays[key]
            for key in arrays if re.fullmatch(r"weights/\w+/C\d+", key)}


def test_the_checkpoint_holds_the_tables_drawn_from_the_seed(configs, single_run):
    arrays, _ = checkpoint_arrays(single_run)
    tables = _tables(arrays)
    assert set(tables) == SPARSE
    net = load_net(configs / "single.cfg", configs / "params.cfg", data_dims=DIMS,
                   num_classes=10)
    for (name, i), table in tables.items():
        assert np.array_equal(table, connection_tables(net[name], seed=4)[i])
        assert not np.any(arrays[f"momentum/{name}/C{i}"])


def test_the_whole_net_passes_the_gradient_check(configs):
    """--check-grads' check (float64, every layer and the whole net's cost): the tables
    are not perturbed, the weights and inputs of the sparse layers are."""
    net = load_net(configs / "single.cfg", configs / "params.cfg", data_dims=DIMS,
                   num_classes=10)
    report = []
    assert check_net_gradients(net, report=report.append), "\n".join(report)
    sparse_lines = [line for line in report if line.split()[:1] in (["conv2"], ["local3"])]
    assert len(sparse_lines) == 2 and all("net:W0" in line and "in0" in line
                                          for line in sparse_lines)


def test_data_parallel_on_two_devices_gives_one_devices_weights(configs, single_run):
    save = configs / "data"
    ok(run_cli("--layer-def", configs / "data.cfg", "--layer-params", configs / "params.cfg",
               "--gpu", "0,1", "--epochs", "1", "--save-path", save, *RUN))
    single, _ = checkpoint_arrays(single_run)
    data, _ = checkpoint_arrays(save / "checkpoint.npz")
    assert single.keys() == data.keys()
    for key in (k for k in single if k.startswith("weights/")):
        np.testing.assert_allclose(data[key], single[key], rtol=1e-4, atol=1e-6, err_msg=key)
    assert _tables(data).keys() == SPARSE


def test_print_plan_shows_each_groups_channels(configs):
    out = ok(run_cli("--layer-def", configs / "single.cfg", "--layer-params",
                     configs / "params.cfg", "--gpu", "0", "--print-plan", *RUN)).stdout
    net = load_net(configs / "single.cfg", configs / "params.cfg", data_dims=DIMS,
                   num_classes=10)
    assert "drawn from --seed 4" in out
    table = connection_tables(net["conv2"], seed=4)[0]
    assert "    group 3: " + " ".join(map(str, table[24:32])) in out
    summary = json.loads(ok(run_cli("--layer-def", configs / "single.cfg", "--layer-params",
                                    configs / "params.cfg", "--gpu", "0", "--print-plan=json",
                                    *RUN)).stdout)["rand_sparse"]
    assert summary["tables"]["conv2"]["0"] == table.reshape(4, 8).tolist()
    assert sorted(summary["tables"]) == ["conv2", "local3"]


def test_a_resumed_run_keeps_its_checkpoints_tables(configs, single_run, tmp_path):
    """Another --seed would draw other tables: the checkpoint's win, in the plan and in
    the training that goes on."""
    saved = _tables(checkpoint_arrays(single_run)[0])
    out = ok(run_cli("--load-file", single_run, "--print-plan", "--seed", "9")).stdout
    assert "from the checkpoint" in out
    assert "    group 0: " + " ".join(map(str, saved[("conv2", 0)][:8].astype(int))) in out
    save = tmp_path / "resumed"
    ok(run_cli("--load-file", single_run, "--epochs", "2", "--seed", "9", "--save-path", save))
    resumed = _tables(checkpoint_arrays(save / "checkpoint.npz")[0])
    assert resumed.keys() == saved.keys()
    for key in saved:
        assert np.array_equal(resumed[key], saved[key]), key


def test_a_tampered_table_is_refused_with_one_line(single_run, tmp_path):
    every_group_reads_channel_0 = _npy(np.zeros(32, np.float32))
    damaged = rebuild(single_run, tmp_path / "checkpoint.npz",
                      {"weights/conv2/C0": every_group_reads_channel_0})
    assert_clean_error(run_cli("--load-file", damaged, "--test-only"), 1, "damaged checkpoint",
                       "'weights/conv2/C0'", "permutations")


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()
