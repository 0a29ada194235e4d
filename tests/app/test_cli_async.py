"""``--sync`` through the real command line: async, several modes under --compare, and
``--slow-device``."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.support.cli import DUMMY, EXAMPLES, assert_clean_error, checkpoint_arrays, ok, run_cli
from tests.app.comparison.test_compare import parse_tables

DATA_NET = ["--layer-def", EXAMPLES / "digits-data.cfg", "--layer-params",
            EXAMPLES / "digits-params.cfg", "--gpu", "0,1"]


def test_async_trains_saves_and_resumes(tmp_path):
    folder = tmp_path / "async"
    proc = ok(run_cli(*DUMMY, *DATA_NET, "--epochs", "1", "--sync", "async:2",
                      "--slow-device", "1:2", "--save-path", folder, timeout=60))
    assert "final test error" in proc.stdout
    _, meta = checkpoint_arrays(folder / "checkpoint.npz")
    assert meta["options"]["sync"] == "async:2"
    assert "slow_device" not in meta["options"]  # test-only, never resumed
    proc = ok(run_cli("--load-file", folder, "--epochs", "2", timeout=60))
    weights, meta = checkpoint_arrays(folder / "checkpoint.npz")
    assert meta["options"]["sync"] == "async:2" and meta["counters"]["epoch"] == 2
    assert all(np.isfinite(v).all() for v in weights.values())


def test_async_trains_a_hybrid_net_and_print_plan_says_how():
    proc = ok(run_cli(*DUMMY, "--epochs", "1", "--sync", "async:1", timeout=60))
    assert "final test error" in proc.stdout
    proc = ok(run_cli(*DUMMY, "--sync", "async:1", "--print-plan", timeout=60))
    assert "Sync: async:1 in a hybrid plan: the steps stay lockstep" in proc.stdout
    assert "NOT bitwise reproducible" in proc.stdout


@pytest.mark.parametrize("mode", ["async:1", "local:4"])  # replicas apart, each way
def test_a_diverging_run_of_replicas_apart_ends_with_the_training_error(tmp_path, mode):
    params = (EXAMPLES / "digits-params.cfg").read_text()
    wild = tmp_path / "wild-params.cfg"
    wild.write_text(re.sub(r"^epsW=.*$", "epsW=1e6", params, flags=re.M))
    net = [a if a != EXAMPLES / "digits-params.cfg" else wild for a in DATA_NET]
    proc = run_cli(*DUMMY, *net, "--epochs", "3", "--sync", mode, timeout=60)
    assert_clean_error(proc, 1, "training diverged in epoch", "lower the learning rates")


def test_compare_trains_a_config_once_per_sync_mode(tmp_path):
    """--compare with several --sync modes: one run (and one log) per mode, named after
    it, side by side in the table; local SGD differs from sync in what it learned."""
    save = tmp_path / "cmp"
    proc = ok(run_cli("--compare", EXAMPLES / "digits-data.cfg", "--layer-params",
                      EXAMPLES / "digits-params.cfg", "--gpu", "0,1", "--epochs", "1",
                      "--no-progress", "--sync", "sync", "local:2", "--save-path", save,
                      timeout=120))
    assert "\n[1/2] digits-data-sync: data," in "\n" + proc.stdout
    assert "\n[2/2] digits-data-local2: data," in proc.stdout
    table = (save / "compare.txt").read_text()
    assert "digits-data-sync" in table and "digits-data-local2" in table
    _, synced = checkpoint_arrays(save / "digits-data-sync" / "checkpoint.npz")
    _, local = checkpoint_arrays(save / "digits-data-local2" / "checkpoint.npz")
    assert synced["options"]["sync"] == "sync" and local["options"]["sync"] == "local:2"
    reduced = {row["config"]: row["all-reduced"].split() for row in parse_tables(table)[0]}
    assert reduced["digits-data-local2"][1] == reduced["digits-data-sync"][1]  # the unit
    assert float(reduced["digits-data-local2"][0]) == pytest.approx(
        float(reduced["digits-data-sync"][0]) / 2, rel=0.01)  # the average every 2nd step


def test_several_sync_modes_only_go_with_compare():
    proc = run_cli(*DUMMY, "--sync", "sync", "local:2", timeout=60)
    assert_clean_error(proc, 2, "--sync takes one mode, not 2", "only with --compare")
