"""What a net's CPU workers cost each other side by side: measured only in the rounds
whose workers ran so, kept from profile to profile on the machine, and said in the
prediction's text."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from tests.support.cli import EXAMPLES, run_cli
from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.prediction.side_by_side import (KEPT, SideBySideStore, combined, net_key,
                                                 store_path)
from convnet.app.prediction.simulation import data_parallel, first_minibatch, profiled_plan
from convnet.app.run import assembly
from convnet.config.model import on_one_device
from convnet.simulate.costs import ComputeProfile
from convnet.simulate.hardware import HostFigures
from convnet.simulate.profiler import SIDE_BY_SIDE_CORES, Profiler
from convnet.simulate.report import side_by_side_line

PARAMS = EXAMPLES / "digits-params.cfg"
HOST = HostFigures(cores=2, gemm_flops=1e11, copy_bandwidth=1e10)


def _measured(contention: float, wake: float = 1e-4, rounds: int = 1) -> ComputeProfile:
    return ComputeProfile(64, host=HOST, contention={("forward", "fc"): contention},
                          start_wake=2 * wake, wake=wake, parallel_rounds=rounds,
                          side_by_side_rounds=rounds)


def test_rounds_whose_workers_took_turns_measure_no_contention(monkeypatch):
    """A data-parallel block whose workers kept under SIDE_BY_SIDE_CORES cores busy ran
    them one after the other: its steps give neither contention nor wake-ups."""
    opts = resolve_options(build_parser().parse_args(
        ["--layer-def", str(EXAMPLES / "digits-data.cfg"), "--layer-params", str(PARAMS),
         "--gpu", "0,1", "--mini", "64"]))
    net = on_one_device(assembly.load_net_for(opts))
    _, plan, gpus = profiled_plan(opts, net, 64)
    busy = iter([None, None, SIDE_BY_SIDE_CORES + 0.2,   # round 1: side by side
                 None, None, SIDE_BY_SIDE_CORES - 0.15,  # round 2: taking turns
                 None, None, SIDE_BY_SIDE_CORES - 0.15])  # round 3: taking turns

    class Counted:  # the run-queue counts of a block: as measured, the cores given
        def __init__(self, ids):
            self.shares = [1.0] * len(ids)
            self.cores_busy = next(busy)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr("convnet.simulate.profiler.Shares", Counted)
    alone = assembly.make_executor(replace(opts, sequential=True, gpu=gpus), net, plan)
    together = data_parallel(opts, net, 64, 2)
    try:
        profiler = Profiler(alone, first_minibatch(opts), HOST, plan,
                            data_parallel=together, contention_steps=(1, 2))
        for _ in range(3):
            profiler.round()
        profile = profiler.profile()
        rounds = profiler.round_profiles()
    finally:
        alone.close()
        together[0].close()
    assert (profile.rounds, profile.parallel_rounds, profile.side_by_side_rounds) == (3, 3, 1)
    assert profile.contention and profile.contention == rounds[0].contention
    assert rounds[0].side_by_side_rounds == 1
    assert [(r.contention, r.start_wake, r.wake, r.side_by_side_rounds) for r in rounds[1:]] \
        == [({}, 0.0, 0.0, 0)] * 2


def test_each_figure_is_the_median_over_this_profile_and_the_earlier_ones(tmp_path):
    store = SideBySideStore("net", tmp_path / "store.json")
    for contention in (1.2, 1.6):
        store.keep(_measured(contention))
        store = SideBySideStore("net", tmp_path / "store.json")
    assert len(store.earlier) == 2
    mine = combined(_measured(1.3, wake=4e-4), store.earlier)
    assert mine.contention == {("forward", "fc"): pytest.approx(1.3)}
    assert mine.wake == pytest.approx(1e-4) and mine.earlier_profiles == 2
    # A profile whose workers never ran side by side takes the earlier ones alone.
    apart = ComputeProfile(64, host=HOST, parallel_rounds=3)
    taken = combined(apart, store.earlier)
    assert taken.contention == {("forward", "fc"): pytest.approx(1.4)}
    assert taken.side_by_side_rounds == 0 and taken.earlier_profiles == 2
    assert combined(apart, []) == apart  # nothing measured anywhere: as it was


def test_the_store_keeps_the_latest_profiles_of_each_net_and_survives_bad_files(tmp_path):
    path = tmp_path / "store.json"
    for i in range(KEPT + 2):
        SideBySideStore("a", path).keep(_measured(1.0 + i / 10))
    SideBySideStore("b", path).keep(_measured(3.0))
    SideBySideStore("a", path).keep(ComputeProfile(64, host=HOST, parallel_rounds=2))
    data = json.loads(path.read_text())
    assert [e["contention"][0][2] for e in data["a"]] == \
        [pytest.approx(1.0 + i / 10) for i in range(2, KEPT + 2)]  # the latest KEPT
    assert len(data["b"]) == 1  # another net's figures stay apart
    assert len(SideBySideStore("a", path).earlier) == KEPT - 1

    path.write_text("{not json")
    assert SideBySideStore("a", path).earlier == []  # unreadable: taken as empty
    path.write_text(json.dumps({"a": [{"contention": [["forward", "fc", 0.5]],
                                       "start_wake": 0, "wake": 0}, "junk"]}))
    assert SideBySideStore("a", path).earlier == []  # entries that make no sense: dropped
    SideBySideStore("a", path).keep(_measured(1.2))
    assert len(json.loads(path.read_text())["a"]) == 1

    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    SideBySideStore("a", blocked / "store.json").keep(_measured(1.2))  # cannot write: fine


def test_the_store_is_this_machines_cache_unless_told_otherwise(monkeypatch, tmp_path):
    monkeypatch.setenv("CONVNET_CACHE_DIR", str(tmp_path / "mine"))
    assert store_path() == tmp_path / "mine" / "side-by-side.json"
    monkeypatch.delenv("CONVNET_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert store_path() == tmp_path / "xdg" / "convnet" / "side-by-side.json"


def test_the_key_tells_nets_shards_and_cores_apart():
    def key(config, params, mini, cores):
        opts = resolve_options(build_parser().parse_args(
            ["--layer-def", str(EXAMPLES / config), "--layer-params", str(EXAMPLES / params),
             "--gpu", "0,1", "--mini", str(mini)]))
        executor, plan = data_parallel(opts, on_one_device(assembly.load_net_for(opts)),
                                       mini, 2)
        executor.close()
        return net_key(plan, cores)

    digits = ("digits-data.cfg", "digits-params.cfg")
    keys = [key(*digits, 128, 2), key(*digits, 64, 2), key(*digits, 128, 4),
            key("resnet20-digits.cfg", "resnet20-digits-params.cfg", 128, 2)]
    assert len(set(keys)) == len(keys)
    # The same layers placed otherwise are the same net on one device: the same key.
    assert key("digits-model.cfg", "digits-params.cfg", 128, 2) == keys[0]


def test_the_text_says_where_the_figures_are_from():
    assert "in 1 of 1 round(s)]" in side_by_side_line(_measured(1.3))
    with_earlier = side_by_side_line(combined(_measured(1.3), [{
        "contention": [["forward", "fc", 1.5]], "start_wake": 0, "wake": 0}]))
    assert "1.40x" in with_earlier and "the median with 1 earlier profile(s)" in with_earlier
    apart = ComputeProfile(64, host=HOST, parallel_rounds=3)
    earlier = side_by_side_line(combined(apart, [{
        "contention": [["forward", "fc", 1.5]], "start_wake": 0, "wake": 0}]))
    assert "1.50x" in earlier and "never ran side by side" in earlier \
        and "[measured earlier" in earlier
    assert "no earlier profile" in side_by_side_line(apart)
    assert "profiled as placed or on one core" in side_by_side_line(ComputeProfile(64))


def test_a_second_prediction_takes_the_first_ones_figures(tmp_path):
    """Two runs of the command in a row: the second's median takes in the first's
    figures where the first saw its workers side by side (a loaded machine may not let
    it)."""
    args = ["--layer-def", EXAMPLES / "digits-data.cfg", "--layer-params", PARAMS,
            "--gpu", "0,1", "--mini", "64", "--profile-mini", "64", "--print-plan=json",
            "--simulate"]
    env = {"CONVNET_CACHE_DIR": str(tmp_path)}
    first = json.loads(run_cli(*args, env=env).stdout)["simulation"]
    second = json.loads(run_cli(*args, env=env).stdout)["simulation"]
    assert first["earlier_side_by_side_profiles"] == 0
    assert second["earlier_side_by_side_profiles"] == (1 if first["side_by_side_rounds"] else 0)
    assert os.path.exists(tmp_path / "side-by-side.json") == \
        bool(first["side_by_side_rounds"] or second["side_by_side_rounds"])
