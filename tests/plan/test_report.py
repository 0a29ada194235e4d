"""The plan report: readable text (``--print-plan``) and JSON (``--print-plan=json``)."""

from __future__ import annotations

import json
from collections import defaultdict

from hypothesis import given, settings

from convnet.plan.ops import FLOAT_BYTES, AllReduce, Copy, GradCopy, Load
from convnet.plan.report import (PARAM_COPIES, device_totals, human_bytes, plan_json,
                                 plan_summary, plan_text, schedule_rows)
from convnet.plan.planner import make_plan
from tests.support.plans import fc_net
from tests.plan.test_planner_properties import _plan, valid_nets

HYBRID = [("conv", "fc", ["data"], [0, 1, 2, 3], 0),
          ("fa", "fc", ["conv"], [0], 1),
          ("fb", "fc", ["conv"], [1], 1),
          ("pa", "pass", ["fa", "fb"], [0], 0),
          ("out", "fc", ["pa"], None, 1),
          ("probs", "softmax", ["out"], None, 0),
          ("cost", "cost.logreg", ["labels", "probs"], [0], 0)]


def hybrid_plan(gpus=(7, 5, 3, 1), minibatch=8):
    net = fc_net(HYBRID)
    return net, make_plan(net, gpus, minibatch)


def expected_traffic(plan):
    """(sent, received) per device recomputed from the ops."""
    sent, received = defaultdict(int), defaultdict(int)
    for op in plan.ops:
        if isinstance(op, (Copy, GradCopy)):
            sent[op.src] += op.nbytes
            received[op.dst] += op.nbytes
        elif isinstance(op, AllReduce):
            r = len(op.replica_devices)
            for d in op.replica_devices:
                sent[d] += 2 * (r - 1) * op.nbytes // r
                received[d] += 2 * (r - 1) * op.nbytes // r
    return sent, received


# ------------------------------------------------------------------------------- text

def test_plan_text_lists_every_layer_pass_and_device():
    net, plan = hybrid_plan()
    text = plan_text(plan, net)
    assert text.startswith("Scheme: hybrid.  Devices: logical 0..3 -> physical 7,5,3,1.")
    assert "Minibatch 8 -> 4 shard(s) of 2 cases, 4 pass(es) per minibatch." in text
    layers_table = text.split("\nLayers\n")[1].split("\n\n")[0].splitlines()[2:]
    assert [row.split()[0] for row in layers_table] == list(net.layers)
    for p in range(plan.num_passes):
        assert f"\npass {p}\n" in text
    schedule = text.split("Schedule")[1].split("Totals")[0]
    header = "  op  layer  " + "  ".join(f"device {d}" for d in range(plan.num_devices))
    assert [" ".join(l.split()) for l in schedule.splitlines()].count(" ".join(header.split())
                                                                        + " moved (B)") \
        == plan.num_passes
    totals = text.split("Totals per device (per minibatch)\n")[1].splitlines()
    assert totals[0].split()[:2] == ["device", "physical"]
    rows = [line.split() for line in totals[2:2 + plan.num_devices]]
    assert [(int(r[0]), int(r[1])) for r in rows] == [(0, 7), (1, 5), (2, 3), (3, 1)]


def test_plan_text_shows_replicas_periods_updates_and_copies():
    net, plan = hybrid_plan()
    text = plan_text(plan, net)
    row = next(line for line in text.splitlines() if line.startswith("conv "))
    assert "0,1,2,3" in row and "every 4" in row and " data " in row
    assert "every 4 pass(es), 8 cases" in row
    row = next(line for line in text.splitlines() if line.startswith("fa "))
    assert "every 1 pass(es), 2 cases" in row and " model " in row
    assert "inherited from 'pa'" in next(l for l in text.splitlines() if l.startswith("out "))
    rows = [row for p in range(plan.num_passes) for row in schedule_rows(plan, p)]
    assert ["copy", "conv", [[], ["s0 from 0"], [], []], 32] in rows
    assert ["gradcopy", "fb", [[], ["s0 d(pa) from 0"], [], []], 32] in rows
    assert ["allreduce", "conv", [["*"], ["*"], ["*"], ["*"]], 80] in rows
    idle = [p for p in range(plan.num_passes)
            if not any(cells[2] for _, _, cells, _ in schedule_rows(plan, p))]
    assert idle, "device 2 works in every pass"
    assert "  copy       conv  " in text and " s0 from 0 " in text


def test_schedule_of_the_4gpu_hybrid_config_is_a_table_of_readable_width():
    """Thousands of characters per line before; now a row per step, a column per device,
    every line short enough for a terminal, and one byte unit per column."""
    from convnet.config import infer_shapes, parse_net
    from tests.support.cli import EXAMPLES

    cfg = EXAMPLES / "cuda-convnet2"
    net = infer_shapes(parse_net(cfg / "layers-imagenet-4gpu-data-model.cfg",
                                 cfg / "layer-params-imagenet-4gpu-data-model.cfg"),
                       {0: (3, 224, 224), 1: (1,)}, 1000)
    text = plan_text(make_plan(net, (0, 1, 2, 3), 512), net)
    schedule = text.split("\nSchedule")[1].split("\nTotals")[0]
    assert max(map(len, schedule.splitlines())) <= 120
    totals = text.split("Totals per device (per minibatch)\n")[1].splitlines()
    assert "param memory (MiB)" in totals[0] and "sent (MiB)" in totals[0]
    assert all(" MiB" not in line and " KiB" not in line for line in totals[2:])


def test_plan_text_notes_and_unplaced_layers():
    net = fc_net([("a", "fc", ["data"], None, 0), ("b", "softmax", ["a"], None, 0)])
    plan = make_plan(net, (0, 0), 4)
    text = plan_text(plan, net)
    assert "\nNotes\n" in text
    assert "'a' has no gpu= and is placed on device 0" in text
    assert "logical devices 0, 1 share physical device 0" in text
    labels = next(line for line in text.splitlines() if line.startswith("labels "))
    assert " - " in labels and "unused" in labels


def test_human_bytes():
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1024) == "1.0 KiB"
    assert human_bytes(1.5 * 1024 ** 2) == "1.5 MiB"
    assert human_bytes(3 * 1024 ** 3) == "3.0 GiB"
    assert human_bytes(5000 * 1024 ** 3) == "5000.0 GiB"


# ------------------------------------------------------------------------------- totals

def test_device_totals_of_the_hybrid_example():
    net, plan = hybrid_plan()
    totals = device_totals(plan, net)
    assert [t.physical for t in totals] == [7, 5, 3, 1]
    # conv (20 params) everywhere; fa, pa, out on 0; fb on 1.
    params = {"conv": 20, "fa": 20, "fb": 20, "out": 27}
    assert totals[0].param_bytes == (20 + 20 + 27) * FLOAT_BYTES * PARAM_COPIES
    assert totals[1].param_bytes == (20 + 20) * FLOAT_BYTES * PARAM_COPIES
    assert totals[3].param_bytes == params["conv"] * FLOAT_BYTES * PARAM_COPIES
    # data: 4 features x 2 cases x 4 bytes per shard; labels on device 0 for 4 shards.
    assert [t.loaded_bytes for t in totals] == [32 + 4 * 8, 32, 32, 32]
    sent, received = expected_traffic(plan)
    assert [t.sent_bytes for t in totals] == [sent[d] for d in range(4)]
    assert [t.received_bytes for t in totals] == [received[d] for d in range(4)]


@settings(max_examples=150, deadline=None)
@given(valid_nets())
def test_bytes_sent_equal_bytes_received(gen):
    net, plan = _plan(gen)
    totals = device_totals(plan, net)
    assert sum(t.sent_bytes for t in totals) == sum(t.received_bytes for t in totals)
    sent, received = expected_traffic(plan)
    for t in totals:
        assert (t.sent_bytes, t.received_bytes) == (sent[t.device], received[t.device])
    # Pairwise: copies go src -> dst, a ring all-reduce sends each device's share to the next
    # device of the ring.  Nothing is sent to oneself, and what d sends the others receive.
    pair = defaultdict(int)
    for op in plan.ops:
        if isinstance(op, (Copy, GradCopy)):
            pair[(op.src, op.dst)] += op.nbytes
        elif isinstance(op, AllReduce):
            ring = op.replica_devices
            r = len(ring)
            for k, d in enumerate(ring):
                pair[(d, ring[(k + 1) % r])] += 2 * (r - 1) * op.nbytes // r
    assert all(src != dst for src, dst in pair)
    for t in totals:
        assert t.sent_bytes == sum(n for (src, dst), n in pair.items() if src == t.device)
        assert t.received_bytes == sum(n for (src, dst), n in pair.items() if dst == t.device)
    assert sum(t.loaded_bytes for t in totals) == sum(op.nbytes for op in plan.ops
                                                      if isinstance(op, Load))
    for t in totals:
        expected = sum(p.param_count for p in plan.layers.values() if t.device in p.devices)
        assert t.param_bytes == expected * FLOAT_BYTES * PARAM_COPIES
        assert t.activation_bytes >= t.loaded_bytes


# ------------------------------------------------------------------------------- JSON

def check_json_matches_plan(plan, net):
    data = json.loads(plan_json(plan, net))
    assert data == json.loads(json.dumps(plan_summary(plan, net)))
    assert data["scheme"] == plan.scheme
    assert (data["minibatch"], data["num_shards"], data["shard_size"], data["num_passes"]) == \
           (plan.minibatch, plan.num_shards, plan.shard_size, plan.num_passes)
    assert data["devices"] == [{"logical": d, "physical": p}
                               for d, p in enumerate(plan.physical_devices)]
    assert data["notes"] == plan.notes
    assert [l["name"] for l in data["layers"]] == list(plan.layers)
    for row, p in zip(data["layers"], plan.layers.values()):
        assert row["devices"] == list(p.devices) and row["replicas"] == p.replicas
        assert (row["period"], row["update_period"], row["scheme"], row["param_count"]) == \
               (p.period, p.update_period, p.scheme, p.param_count)
        assert row["needs_backward"] == p.needs_backward
    assert len(data["ops"]) == len(plan.ops)
    for row, op in zip(data["ops"], plan.ops):
        assert row["kind"] == op.kind and row["index"] == op.index
        assert row["layer"] == op.layer and row["pass_index"] == op.pass_index
        assert row["deps"] == list(op.deps) and row["devices"] == list(op.devices)
        if hasattr(op, "nbytes"):
            assert row["nbytes"] == op.nbytes
    totals = device_totals(plan, net)
    assert [t["sent_bytes"] for t in data["totals"]] == [t.sent_bytes for t in totals]
    assert [t["received_bytes"] for t in data["totals"]] == [t.received_bytes for t in totals]
    assert [t["param_bytes"] for t in data["totals"]] == [t.param_bytes for t in totals]
    return data


def test_plan_json_of_the_hybrid_example():
    net, plan = hybrid_plan()
    data = check_json_matches_plan(plan, net)
    kinds = {row["kind"] for row in data["ops"]}
    assert kinds == {"load", "forward", "copy", "backward", "gradcopy", "allreduce", "update"}
    update = next(row for row in data["ops"] if row["kind"] == "update" and row["layer"] == "fa")
    assert update["num_cases_scale"] == 0.25


@settings(max_examples=30, deadline=None)
@given(valid_nets())
def test_plan_json_matches_random_plans(gen):
    net, plan = _plan(gen)
    check_json_matches_plan(plan, net)


def test_the_totals_say_why_the_peak_is_less_than_param_plus_activation_memory():
    """param memory counts every weight gradient; the peak only those held at that moment,
    so on the bundled net the columns read 512.0 KiB + 7.4 MiB against a peak of 7.8 MiB.
    A line under the table says what the peak is made of."""
    net, plan = hybrid_plan()
    totals = device_totals(plan, net)
    assert any(t.peak_bytes < t.param_bytes + t.activation_bytes for t in totals)
    after = plan_text(plan, net).split("Totals per device (per minibatch)\n")[1].splitlines()
    legend = after[2 + plan.num_devices]
    assert legend.startswith("peak memory: the weights and momentum, the weight gradients "
                             "held at the peak and the activation memory"), legend
    assert "param memory counts every weight gradient" in legend
