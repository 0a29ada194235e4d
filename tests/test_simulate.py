"""--simulate: the schedule's arithmetic, the link formulas, the command line, and a
loose check of predicted against measured step time on the digits configs."""

from __future__ import annotations

import json
import statistics

import pytest

from cli_helpers import EXAMPLES, run_cli
from convnet.app import training
from convnet.app.cli import build_parser
from convnet.app.options import resolve_options
from convnet.app.simulation import first_minibatch, measure_costs
from convnet.plan.ops import AllReduce, Copy
from convnet.simulate.costs import ComputeProfile, CostModel
from convnet.simulate.hardware import DEVICE_KINDS, LINKS
from convnet.simulate.schedule import simulate

PARAMS = EXAMPLES / "digits-params.cfg"


def _plan(config: str, gpu: str):
    opts = resolve_options(build_parser().parse_args(
        ["--layer-def", str(EXAMPLES / config), "--layer-params", str(PARAMS), "--gpu", gpu,
         "--mini", "128", "--print-plan", "--simulate"]))
    net, plan = training.build_net_and_plan(opts)
    return opts, net, plan


def test_one_device_step_is_the_sum_of_its_ops():
    _, _, plan = _plan("digits-single.cfg", "0")
    sim = simulate(plan, lambda op, plan: 0.001)
    assert sim.step_seconds == pytest.approx(0.001 * len(plan.ops))
    assert sim.devices[0].idle == pytest.approx(0.0)
    assert sim.images_per_second == pytest.approx(128 / sim.step_seconds)


def test_two_devices_overlap_unless_they_share_a_resource():
    _, _, plan = _plan("digits-data.cfg", "0,1")
    apart = simulate(plan, lambda op, plan: 0.001)
    shared = simulate(plan, lambda op, plan: 0.001, resources=[0, 0])
    assert apart.step_seconds < shared.step_seconds
    for split in apart.devices + shared.devices:
        busy = split.compute + split.copy + split.allreduce
        assert busy + split.idle == pytest.approx(
            apart.step_seconds if split in apart.devices else shared.step_seconds)


def test_transfers_follow_the_link_figures():
    link = LINKS["pcie3-x16"]
    costs = CostModel(ComputeProfile(64), DEVICE_KINDS["gpu-pcie3"])
    _, _, plan = _plan("digits-data.cfg", "0,1")
    copy = Copy(0, 0, "x", (), shard=0, src=0, dst=1, nbytes=10 ** 6)
    reduce = AllReduce(1, 0, "x", (), replica_devices=(0, 1, 2, 3), nbytes=10 ** 6)
    assert costs.seconds(copy, plan) == pytest.approx(link.latency + 1e6 / link.bandwidth)
    assert costs.seconds(reduce, plan) == pytest.approx(
        6 * link.latency + 1.5 * 1e6 / link.bandwidth)


def test_compute_scales_with_shard_size():
    _, _, plan = _plan("digits-data.cfg", "0,1")  # shards of 64
    forward = next(op for op in plan.ops if op.kind == "forward")
    update = next(op for op in plan.ops if op.kind == "update")
    profile = ComputeProfile(128, {("forward", forward.layer): 0.02,
                                   ("update", update.layer): 0.01})
    costs = CostModel(profile, DEVICE_KINDS["measured"])
    assert costs.seconds(forward, plan) == pytest.approx(0.01)
    assert costs.seconds(update, plan) == pytest.approx(0.01)
    assert costs.on(DEVICE_KINDS["gpu-nvlink"]).seconds(forward, plan) == pytest.approx(
        0.01 / DEVICE_KINDS["gpu-nvlink"].speed)


def _measured_step(opts, net, plan, steps=5) -> float:
    executor = training.make_executor(opts, net, plan)
    try:
        batch = first_minibatch(opts)
        times = [executor.step(batch, progress=1.0).seconds for _ in range(steps + 1)]
    finally:
        executor.close()
    return statistics.median(times[1:])


@pytest.mark.parametrize("config,gpu", [("digits-single.cfg", "0"), ("digits-data.cfg", "0,1")])
def test_prediction_is_within_a_loose_factor_of_the_measured_step(config, gpu):
    opts, net, plan = _plan(config, gpu)
    costs = measure_costs(opts, net, plan)
    predicted = simulate(plan, costs.seconds, costs.resources(plan)).step_seconds
    measured = _measured_step(opts, net, plan)
    assert measured / 2.5 < predicted < measured * 2.5, (predicted, measured)


def test_print_plan_json_has_the_simulation():
    done = run_cli("--layer-def", EXAMPLES / "digits-data.cfg", "--layer-params", PARAMS,
                   "--gpu", "0,1", "--print-plan=json", "--simulate")
    assert done.returncode == 0, done.stderr
    sim = json.loads(done.stdout)["simulation"]
    assert sim["device_kind"] == "measured" and not sim["assumed"]
    assert sim["step_seconds"] > 0 and sim["images_per_second"] > 0
    assert [d["device"] for d in sim["devices"]] == [0, 1]
    assert all(d["peak_memory_bytes"] > 0 for d in sim["devices"])


def test_text_report_says_when_figures_are_assumed():
    done = run_cli("--layer-def", EXAMPLES / "digits-single.cfg", "--layer-params", PARAMS,
                   "--print-plan", "--simulate", "--simulate-devices", "gpu-pcie4")
    assert done.returncode == 0, done.stderr
    assert "ASSUMED device kind 'gpu-pcie4'" in done.stdout
    assert "predicted step" in done.stdout


@pytest.mark.parametrize("args,words", [
    (["--simulate"], "give --print-plan"),
    (["--print-plan", "--simulate-devices", "gpu-pcie4"], "give --simulate"),
    (["--print-plan", "--simulate", "--simulate-devices", "tpu"], "unknown device kind 'tpu'"),
])
def test_bad_option_combinations_are_one_line_usage_errors(args, words):
    done = run_cli(*args)
    assert done.returncode == 2
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
