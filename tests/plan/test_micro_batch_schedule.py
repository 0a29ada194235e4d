"""The micro-batch schedule (docs/PIPELINE.md): properties on random nets, and one
micro-batch pinned to the plans made before micro-batches existed.

On random fc chains placed layer by layer on random devices, and hybrid nets (a
data-parallel first layer, then model-parallel layers with random
``updatePeriod``), with a random micro-batch count, under either schedule: every
(layer, piece) forward and backward runs exactly once, never a backward before its
forward, never an update before the last gradient of its window nor after a forward
of the next, as many updates as without micro-batches; the stages of a chain really
overlap (neither stage's work on neighbouring micro-batches waits for the other's);
and under 1F1B a chain's stage s never holds more than min(M, S - s) micro-batches.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convnet.config import load_net
from convnet.plan.ops import Backward, Forward, Update
from convnet.plan.planner import make_plan
from convnet.plan.scheduler import layer_stages
from convnet.plan.schedules import SCHEDULES
from tests.support import ROOT
from tests.support.plans import fc_net, happens_before

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def pipelined_nets(draw):
    """(spec, devices, minibatch, micro_batches, schedule) of a chain or hybrid fc net."""
    hybrid = draw(st.booleans())
    num_devices = draw(st.integers(2 if hybrid else 1, 3))
    depth = draw(st.integers(1, 4))
    spec, previous = [], "data"
    for i in range(depth):
        name = f"fc{i}"
        if hybrid and i == 0:
            gpu, period = [0, 1], 0
        else:
            gpu = [draw(st.integers(0, num_devices - 1))]
            period = draw(st.sampled_from([0, 1, 2])) if hybrid else 0
        spec.append((name, "fc", [previous], gpu, period))
        previous = name
    spec.append(("probs", "softmax", [previous], None, 0))
    spec.append(("cost", "cost.logreg", ["labels", "probs"], spec[-2][3], 0))
    shards = 2 if hybrid else 1
    per_shard = draw(st.integers(1, 6))
    micro_batches = draw(st.integers(1, per_shard))
    schedule = draw(st.sampled_from(SCHEDULES))
    return spec, num_devices, shards * per_shard, micro_batches, schedule


@SETTINGS
@given(pipelined_nets())
def test_the_schedule_runs_every_piece_once_and_in_order(case):
    spec, num_devices, minibatch, micro_batches, schedule = case
    net = fc_net(spec)
    plan = make_plan(net, (0,) * num_devices, minibatch, micro_batches, schedule)
    plain = make_plan(net, (0,) * num_devices, minibatch)
    before = happens_before(plan)
    pieces = set(range(plan.num_pieces))
    forwards, backwards = _by_layer_and_piece(plan, Forward), _by_layer_and_piece(plan, Backward)
    for name, placement in plan.layers.items():
        if net[name].is_data:
            continue
        assert {p for (l, p) in forwards if l == name} == pieces, name
        assert {p for (l, p) in backwards if l == name} == \
            (pieces if placement.needs_backward else set()), name
    for key, backward in backwards.items():
        assert before(forwards[key], backward), key
    for name, placement in plan.layers.items():
        updates = [op for op in plan.ops if isinstance(op, Update) and op.layer == name]
        assert len(updates) == len([op for op in plain.ops
                                    if isinstance(op, Update) and op.layer == name])
        for update in updates:
            window = range(update.pass_index - placement.update_period + 1, update.pass_index + 1)
            for (layer, _), op in list(forwards.items()) + list(backwards.items()):
                if layer != name or op.replica != update.replica:
                    continue
                if op.pass_index in window or op.pass_index < window.start:
                    assert before(op, update), (op, update)
                else:
                    assert before(update, op), (update, op)


@SETTINGS
@given(pipelined_nets())
def test_neighbouring_stages_overlap_on_neighbouring_micro_batches(case):
    """Where a layer reads one on another device, the reader's forward of micro-batch m
    and the producer's forward of m + 1 are ordered neither way: they can run at once."""
    spec, num_devices, minibatch, micro_batches, schedule = case
    net = fc_net(spec)
    plan = make_plan(net, (0,) * num_devices, minibatch, micro_batches, schedule)
    before = happens_before(plan)
    forwards = _by_layer_and_piece(plan, Forward)
    for name, placement in plan.layers.items():
        if net[name].is_data or placement.replicas > 1:
            continue
        for inp in net[name].inputs:
            source = plan.layers[inp]
            if net[inp].is_data or source.devices == placement.devices or source.replicas > 1:
                continue
            for shard in range(plan.num_shards):
                for m in range(micro_batches - 1):
                    reader = forwards[(name, plan.piece(shard, m))]
                    producer = forwards[(inp, plan.piece(shard, m + 1))]
                    assert not before(reader, producer) and not before(producer, reader)


@SETTINGS
@given(pipelined_nets())
def test_1f1b_holds_at_most_the_stages_after_a_layer_plus_one_micro_batches(case):
    """In a chain (one pass, one replica per layer), a layer of stage s under 1F1B has
    forwarded at most min(M, S - s) pieces that it has not yet back-propagated, at
    every point of the plan (fill-drain: all M)."""
    spec, num_devices, minibatch, micro_batches, _ = case
    net = fc_net(spec)
    plan = make_plan(net, (0,) * num_devices, minibatch, micro_batches, "1f1b")
    if plan.num_passes > 1 or plan.num_shards > 1:
        return
    stages = layer_stages(net, plan) if micro_batches > 1 else {}
    count = max(stages.values(), default=0) + 1
    held: dict[str, int] = {}
    for op in plan.ops:
        if isinstance(op, (Forward, Backward)) and plan.layers[op.layer].needs_backward:
            held[op.layer] = held.get(op.layer, 0) + (1 if isinstance(op, Forward) else -1)
            assert held[op.layer] <= min(micro_batches, count - stages.get(op.layer, 0))


def _by_layer_and_piece(plan, kind):
    out = {}
    for op in plan.ops:
        if isinstance(op, kind):
            assert (op.layer, op.shard) not in out, op
            out[(op.layer, op.shard)] = op
    return out


#: Fingerprints (sha256 of the operation list's repr) of plans made before
#: micro-batches existed: one micro-batch must plan exactly what was planned then.
PLANS_BEFORE_MICRO_BATCHES = {
    ("digits-single", (0,), 12): "a5aaaf45dc037b33",
    ("digits-data", (0, 1), 12): "402c3c92607ab5c2",
    ("digits-model", (0, 1), 12): "aff8e2e0455edbd6",
    ("digits-hybrid", (0, 1), 12): "9ad54a03b4ccefe7",
    ("cuda-convnet2/layers-imagenet-4gpu-data-model", (0, 1, 2, 3), 128): "3f21f8e265f44105",
    ("cuda-convnet2/layers-imagenet-2gpu-model", (0, 1), 128): "5278c6ff2e927942",
    ("cuda-convnet2/layers-cifar10-11pct", (0,), 128): "f7e9ce62d509880d",
}


@pytest.mark.parametrize("name, gpus, mini", list(PLANS_BEFORE_MICRO_BATCHES))
def test_one_micro_batch_plans_what_was_planned_before(name, gpus, mini):
    layer_def = ROOT / "examples" / f"{name}.cfg"
    if name.startswith("cuda-convnet2/"):
        params = layer_def.with_name(layer_def.name.replace("layers-", "layer-params-"))
        dims = {0: (3, 24, 24) if "cifar" in name else (3, 224, 224), 1: (1,)}
    else:
        params = ROOT / "examples" / ("digits-hybrid-params.cfg" if name == "digits-hybrid"
                                      else "digits-params.cfg")
        dims = {0: (1, 8, 8), 1: (1,)}
    net = load_net(layer_def, params, data_dims=dims, num_classes=10)
    for plan in (make_plan(net, gpus, mini), make_plan(net, gpus, mini, 1),
                 make_plan(net, gpus, mini, 1, "1f1b")):
        digest = hashlib.sha256(repr(plan.ops).encode()).hexdigest()[:16]
        assert digest == PLANS_BEFORE_MICRO_BATCHES[(name, gpus, mini)]
