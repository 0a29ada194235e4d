"""Bad input to the real command: one clear line on stderr, no traceback, a non-zero
exit, and nothing an earlier run saved is damaged.

Every failing run below writes to the save path of one good earlier run (a
fresh run with --overwrite, as a user starting over would), and the module checks at
the end that the earlier checkpoint and log are byte for byte unchanged and
that the checkpoint still loads.
"""

from __future__ import annotations

import os
import pickle
import zipfile

import numpy as np
import pytest

from tests.support.cli import (DUMMY, EXAMPLES, HYBRID_DEF, HYBRID_PARAMS, assert_clean_error,
                               ok, parse_test_line, run_cli, write_batch_folder)

BATCHES = ["--no-progress", "--data-provider", "convnet-batches", "--mini", "64",
           "--epochs", "1"]


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """A good run's save path, and the bytes of what it saved."""
    folder = tmp_path_factory.mktemp("earlier") / "run"
    ok(run_cli(*DUMMY, "--epochs", "1", "--save-path", folder))
    saved = {name: (folder / name).read_bytes()
             for name in ("checkpoint.npz", "log.csv", "log.png")}
    yield folder, saved


def unchanged(earlier) -> None:
    folder, saved = earlier
    for name, data in saved.items():
        assert (folder / name).read_bytes() == data, f"{name} of the earlier run was changed"
    assert sorted(p.name for p in folder.iterdir()) == sorted(saved), \
        "leftover files in the save path"


@pytest.fixture()
def batches(tmp_path):
    """A good cuda-convnet batch folder of 1x8x8 images (batches 1-2 train, 3 test)."""
    return write_batch_folder(tmp_path / "batches", batches=3, cases=96)


def test_a_python_without_the_package_installed_gets_one_line(tmp_path):
    """``python convnet.py`` by a Python whose site-packages lack the installed package
    (here: this one without its site directory) says how to set up, not a traceback."""
    import subprocess
    import sys

    from tests.support.cli import CONVNET

    done = subprocess.run([sys.executable, "-S", str(CONVNET)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert_clean_error(done, 2, "cannot import", "make run", ".venv/bin/python convnet.py")


def test_the_batch_folder_itself_trains(batches, tmp_path):
    ok(run_cli(*BATCHES, "--data-path", batches, "--save-path", tmp_path / "ok"))


def test_missing_data_path(earlier, tmp_path):
    proc = run_cli(*BATCHES, "--data-path", tmp_path / "nowhere", "--save-path", earlier[0], "--overwrite")
    assert_clean_error(proc, 1, "nowhere", "does not exist")
    unchanged(earlier)


def test_unreadable_data_files(earlier, batches):
    (batches / "batches.meta").unlink()
    (batches / "batches.meta").mkdir()  # a folder where a file should be: cannot be read
    proc = run_cli(*BATCHES, "--data-path", batches, "--save-path", earlier[0], "--overwrite")
    assert_clean_error(proc, 1, "batches.meta", "cannot read")
    unchanged(earlier)


def test_data_dims_that_do_not_match_the_config(earlier, tmp_path):
    rgb = write_batch_folder(tmp_path / "rgb", channels=3)
    proc = run_cli(*BATCHES, "--data-path", rgb, "--save-path", earlier[0], "--overwrite")
    assert_clean_error(proc, 2, "[conv1]", "channels", "3x8x8")
    proc = run_cli(*DUMMY, "--data-dims", "3x8x8", "--save-path", earlier[0], "--overwrite")
    assert_clean_error(proc, 2, "[conv1]", "channels")
    unchanged(earlier)


def test_check_grads_refuses_a_placement_that_training_refuses(earlier, tmp_path):
    """--check-grads plans the net before checking its math: a placement the planner
    refuses fails both commands with the same line, not a passed check and then a
    failed training run."""
    layers = tmp_path / "layers.cfg"
    hybrid = HYBRID_DEF.read_text()
    layers.write_text(hybrid.replace("neuron=relu\n\n[pool1]",
                                     "neuron=relu\ngpu=0,0\n\n[pool1]"))
    assert layers.read_text() != hybrid
    net = ["--layer-def", layers, "--layer-params", HYBRID_PARAMS, "--gpu", "0,1"]
    training = run_cli(*DUMMY, *net, "--epochs", "1", "--save-path", earlier[0], "--overwrite")
    line = assert_clean_error(training, 2, "[conv2]", "distinct devices")
    check = run_cli("--check-grads", *net, "--data-dims", "1x8x8", "--num-classes", "10")
    assert assert_clean_error(check, 2) == line
    assert "gradient check" not in check.stdout
    unchanged(earlier)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "code", "wrong_shape", "nan"])
def test_damaged_batch_files(earlier, batches, tmp_path, damage):
    target = batches / "data_batch_2"
    marker = tmp_path / "code-ran"
    if damage == "truncated":
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2])
        expected = "truncated"
    elif damage == "garbage":
        target.write_bytes(b"\x80\x02not a pickle at all" + bytes(range(256)))
        expected = "not a readable pickle"
    elif damage == "code":
        class Exploit:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        target.write_bytes(pickle.dumps({"data": Exploit(), "labels": [0]}, protocol=2))
        expected = "refuses to load code"
    elif damage == "wrong_shape":
        with open(target, "wb") as f:
            pickle.dump({"data": np.zeros((10, 96), np.uint8), "labels": [0] * 96}, f)
        expected = "pixels x cases"
    else:
        data = np.full((64, 96), 100.0, np.float32)
        data[5, 7] = np.nan
        with open(target, "wb") as f:
            pickle.dump({"data": data, "labels": [0] * 96}, f)
        expected = "NaN"
    proc = run_cli(*BATCHES, "--data-path", batches, "--save-path", earlier[0], "--overwrite")
    line = assert_clean_error(proc, 1, expected)
    assert "data_batch_2" in line or "bad data in epoch 1, batch 2" in line
    assert not marker.exists()
    unchanged(earlier)


def test_unwritable_save_path(earlier, tmp_path):
    afile = tmp_path / "a-file"
    afile.write_text("not a folder")
    proc = run_cli(*DUMMY, "--epochs", "1", "--save-path", afile / "sub")
    assert_clean_error(proc, 1, "cannot write to the save path")
    proc = run_cli(*DUMMY, "--epochs", "1", "--save-path", afile)
    assert_clean_error(proc, 1, "a file, not a folder")
    assert afile.read_text() == "not a folder"
    unchanged(earlier)


def test_load_file_that_is_not_a_checkpoint(earlier, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert_clean_error(run_cli("--load-file", text), 1, "not a checkpoint")
    plain = tmp_path / "plain.npz"
    np.savez(plain, w=np.zeros(3))
    assert_clean_error(run_cli("--load-file", plain, "--test-only"), 1, "not a checkpoint")
    cut = tmp_path / "cut.npz"
    data = earlier[1]["checkpoint.npz"]
    cut.write_bytes(data[: len(data) // 2])
    assert_clean_error(run_cli("--load-file", cut), 1, "truncated or corrupt")
    assert_clean_error(run_cli("--load-file", tmp_path / "missing.npz"), 1, "does not exist")
    assert_clean_error(run_cli("--load-file", tmp_path), 1, "without a checkpoint.npz")
    unchanged(earlier)


def test_tampered_checkpoint_options(earlier, tmp_path):
    """A checkpoint whose saved options were edited into nonsense is refused clearly."""
    from convnet.app.checkpoint import load_checkpoint, save_checkpoint

    arrays, meta = load_checkpoint(earlier[0] / "checkpoint.npz")
    meta["options"]["mini"] = "lots"
    bad = tmp_path / "bad.npz"
    save_checkpoint(bad, arrays, meta)
    assert_clean_error(run_cli("--load-file", bad, "--test-only"), 1, "'mini'", "damaged")
    meta["options"]["mini"] = 128
    meta["counters"] = {"step": "x"}
    save_checkpoint(bad, arrays, meta)
    assert_clean_error(run_cli("--load-file", bad, "--test-only"), 1, "counters", "damaged")
    # an archive member replaced by garbage
    with zipfile.ZipFile(earlier[0] / "checkpoint.npz") as src, \
            zipfile.ZipFile(tmp_path / "zip.npz", "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, data if "conv1" not in item.filename else b"\x93NUMPY junk")
    assert_clean_error(run_cli("--load-file", tmp_path / "zip.npz", "--test-only"), 1,
                       "zip.npz")
    unchanged(earlier)


def test_checkpoint_of_another_net(earlier):
    proc = run_cli("--load-file", earlier[0], "--test-only",
                   "--layer-def", EXAMPLES / "all-layers.cfg",
                   "--layer-params", EXAMPLES / "all-layers-params.cfg",
                   "--data-dims", "3x8x8", "--num-classes", "4")
    assert_clean_error(proc, 1, "does not fit this net")
    unchanged(earlier)


@pytest.mark.parametrize("how", ["params", "dummy"])
def test_nan_cost_stops_training(earlier, tmp_path, how):
    params = tmp_path / "params.cfg"
    params.write_text(HYBRID_PARAMS.read_text().replace("epsW=0.05", "epsW=1e30"))
    if how == "params":  # a params file with a huge learning rate, on the bundled data
        args = ["--no-progress", "--mini", "64", "--epochs", "1", "--layer-params", params]
    else:  # the synthetic data
        args = [*DUMMY, "--epochs", "1", "--layer-params", params]
    proc = run_cli(*args, "--save-path", earlier[0], "--overwrite")
    line = assert_clean_error(proc, 1, "diverged", "NaN", "epsW")
    assert "epoch 1" in line
    unchanged(earlier)


def test_the_earlier_checkpoint_still_loads(earlier):
    """After all the failing runs above, the earlier run's checkpoint is as it was."""
    unchanged(earlier)
    proc = ok(run_cli("--load-file", earlier[0], "--test-only"))
    assert parse_test_line(proc.stdout)[2] == 512
