"""Plans of the twelve cuda-convnet2 reference configs (six layer-def/layer-params pairs).

Each pair is loaded with the parser and planned on the ``--gpu`` list it was
written for (see the README beside the configs); the tests assert what a
cuda-convnet2 user expects of each: pass counts, which layers are data- or
model-parallel, where activations and gradients cross devices, and how often
each weight layer updates.
"""

from __future__ import annotations

import json
import time

import pytest

from convnet.config import load_net
from convnet.errors import PlanError
from convnet.plan.ops import AllReduce, Backward, Copy, Forward, GradCopy, Load, Update
from convnet.plan.report import device_totals, plan_json, plan_text
from convnet.plan.planner import make_plan
from tests.support import ROOT
from tests.support.plans import check_plan_invariants, happens_before

CONFIGS = ROOT / "examples" / "cuda-convnet2"

IMAGENET = {0: (3, 224, 224), 1: (1,)}
CIFAR = {0: (3, 24, 24), 1: (1,)}
MINI = 128

# name -> (number of devices its --gpu lists, data dims, classes, net scheme, passes)
REFERENCE = {
    "cifar10-11pct": (1, CIFAR, 10, "single", 1),
    "imagenet-1gpu": (1, IMAGENET, 1000, "single", 1),
    "imagenet-2gpu-data": (2, IMAGENET, 1000, "data", 1),
    "imagenet-2gpu-model": (2, IMAGENET, 1000, "model", 1),
    "imagenet-4gpu-data": (4, IMAGENET, 1000, "data", 1),
    "imagenet-4gpu-data-model": (4, IMAGENET, 1000, "hybrid", 4),
}

CONVS = ["conv1", "conv2", "conv3", "conv4", "conv5"]
TRUNK = ["conv1", "rnorm1", "pool1", "conv2", "rnorm2", "pool2", "conv3", "conv4", "conv5",
         "pool3"]
_cache: dict = {}


def load(name):
    if name not in _cache:
        _, dims, classes, _, _ = REFERENCE[name]
        _cache[name] = load_net(CONFIGS / f"layers-{name}.cfg",
                                CONFIGS / f"layer-params-{name}.cfg", dims, classes)
    return _cache[name]


def planned(name, gpus=None, minibatch=MINI):
    net = load(name)
    gpus = tuple(range(REFERENCE[name][0])) if gpus is None else gpus
    return net, make_plan(net, gpus, minibatch)


def ops_of(plan, kind, layer=None):
    return [op for op in plan.ops if isinstance(op, kind) and (layer is None or op.layer == layer)]


# ------------------------------------------------------------------------------- every config

@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_config_plans_with_its_gpu_list(name):
    net, plan = planned(name)
    _, _, _, scheme, passes = REFERENCE[name]
    assert plan.scheme == scheme
    assert plan.num_passes == passes
    replicated = max(p.replicas for p in plan.layers.values())
    assert plan.num_shards == replicated == {"data": plan.num_devices, "hybrid": 4}.get(scheme, 1)
    check_plan_invariants(plan, net)
    assert plan.notes == []  # every reference layer reading data says gpu=


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_config_report_and_json(name):
    net, plan = planned(name)
    text = plan_text(plan, net)
    for layer in net.layers:
        assert f"\n{layer} " in text
    totals = device_totals(plan, net)
    assert sum(t.sent_bytes for t in totals) == sum(t.received_bytes for t in totals)
    data = json.loads(plan_json(plan, net))
    assert (data["scheme"], data["num_passes"], len(data["ops"])) == \
           (plan.scheme, plan.num_passes, len(plan.ops))


@pytest.mark.parametrize("name", ["cifar10-11pct", "imagenet-1gpu"])
def test_single_device_configs(name):
    net, plan = planned(name)
    assert all(p.devices in ((0,), ()) for p in plan.layers.values())
    assert all(p.scheme == "single" for p in plan.layers.values())
    assert not ops_of(plan, Copy) and not ops_of(plan, GradCopy) and not ops_of(plan, AllReduce)
    for layer, p in plan.layers.items():
        if p.param_count:
            assert [u.num_cases_scale for u in ops_of(plan, Update, layer)] == [1.0]


def test_cifar_config_also_plans_on_32_pixel_images():
    net = load_net(CONFIGS / "layers-cifar10-11pct.cfg", CONFIGS / "layer-params-cifar10-11pct.cfg",
                   {0: (3, 32, 32), 1: (1,)}, 10)
    check_plan_invariants(make_plan(net, (0,), MINI), net)


# ------------------------------------------------------------------------------- data parallel

@pytest.mark.parametrize("name,k", [("imagenet-2gpu-data", 2), ("imagenet-4gpu-data", 4)])
def test_data_parallel_configs(name, k):
    net, plan = planned(name)
    devices = tuple(range(k))
    for layer, p in plan.layers.items():
        assert p.devices == devices and p.scheme == "data", layer
        assert p.period == 1
    assert (plan.num_shards, plan.shard_size) == (k, MINI // k)
    assert not ops_of(plan, Copy) and not ops_of(plan, GradCopy)
    loads = {(op.layer, op.shard, op.device) for op in ops_of(plan, Load)}
    assert loads == {(d, s, s) for d in ("data", "labvec") for s in range(k)}
    for layer in CONVS + ["fc4096a", "fc4096b", "fc1000"]:
        p = plan.layers[layer]
        assert p.update_period == 1
        (ar,) = ops_of(plan, AllReduce, layer)
        assert ar.replica_devices == devices and ar.nbytes == p.param_count * 4
        updates = ops_of(plan, Update, layer)
        assert [u.device for u in updates] == list(devices)
        assert all(u.num_cases_scale == 1.0 and u.deps and ar.index in u.deps for u in updates)


# ------------------------------------------------------------------------------- model parallel

def test_two_gpu_model_parallel_towers():
    net, plan = planned("imagenet-2gpu-model")
    towers = [f"{base}{side}" for side in "ab" for base in
              ("conv1", "rnorm1", "pool1", "conv2", "rnorm2", "cnorm2", "pool2", "conv3",
               "conv4", "conv5", "pool3", "fc2048", "dropout1")]
    for layer in towers:
        p = plan.layers[layer]
        assert p.devices == ((0,) if layer.endswith("a") else (1,)), layer
        assert p.scheme == "model", layer
    for layer in ("fc2048ba", "dropout2a", "fc1000", "probs", "logprob"):
        assert plan.layers[layer].devices == (0,)
    for layer in ("fc2048bb", "dropout2b"):
        assert plan.layers[layer].devices == (1,)
    assert (plan.num_shards, plan.num_passes) == (1, 1)
    # Each image goes to both towers; labels only to the cost's device.
    assert {(op.layer, op.device) for op in ops_of(plan, Load)} == \
           {("data", 0), ("data", 1), ("labels", 0)}


def test_two_gpu_model_parallel_copies():
    net, plan = planned("imagenet-2gpu-model")
    copies = {(op.layer, op.src, op.dst) for op in ops_of(plan, Copy)}
    assert copies == {("pool2a", 0, 1), ("pool2b", 1, 0), ("pool3a", 0, 1), ("pool3b", 1, 0),
                      ("dropout1a", 0, 1), ("dropout1b", 1, 0), ("dropout2b", 1, 0)}
    # fc2048ba on device 0 needs dropout1b from device 1.
    before = happens_before(plan)
    (copy,) = [op for op in ops_of(plan, Copy, "dropout1b")]
    (fwd,) = ops_of(plan, Forward, "fc2048ba")
    (made,) = ops_of(plan, Forward, "dropout1b")
    assert (copy.src, copy.dst, fwd.device) == (1, 0, 0)
    assert copy.nbytes == 2048 * MINI * 4
    assert before(made, copy) and before(copy, fwd) and copy.index in fwd.deps
    # And its gradient goes back the same way.
    grads = {(op.layer, op.consumer, op.src, op.dst) for op in ops_of(plan, GradCopy)}
    assert ("dropout1b", "fc2048ba", 0, 1) in grads
    assert grads == {("pool2a", "conv3b", 1, 0), ("pool2b", "conv3a", 0, 1),
                     ("pool3a", "fc2048b", 1, 0), ("pool3b", "fc2048a", 0, 1),
                     ("dropout1a", "fc2048bb", 1, 0), ("dropout1b", "fc2048ba", 0, 1),
                     ("dropout2b", "fc1000", 0, 1)}


def test_two_gpu_model_parallel_updates_without_all_reduce():
    net, plan = planned("imagenet-2gpu-model")
    assert not ops_of(plan, AllReduce)
    weighted = [n for n, l in net.layers.items() if l.has_weights]
    assert len(weighted) == 15
    for layer in weighted:
        (update,) = ops_of(plan, Update, layer)
        assert update.num_cases_scale == 1.0
        assert update.device == plan.layers[layer].devices[0]


# ------------------------------------------------------------------------------- hybrid

def test_hybrid_placement():
    net, plan = planned("imagenet-4gpu-data-model")
    assert (plan.num_shards, plan.num_passes, plan.rmin, plan.shard_size) == (4, 4, 1, 32)
    for layer in TRUNK:
        p = plan.layers[layer]
        assert (p.devices, p.scheme, p.period) == ((0, 1, 2, 3), "data", 4), layer
    for d, suffix in enumerate("abcd"):
        for layer in (f"fc1024{suffix}", f"dropout1{suffix}", f"pass1{suffix}",
                      f"fc1024b{suffix}", f"dropout2{suffix}"):
            p = plan.layers[layer]
            assert (p.devices, p.period) == ((d,), 1), layer
        assert plan.layers[f"fc1024{suffix}"].scheme == "model"
    for layer in ("pass2a", "fc1000", "probs", "logprob"):
        assert plan.layers[layer].devices == (0,)


def test_hybrid_trunk_runs_once_fc_layers_every_pass():
    net, plan = planned("imagenet-4gpu-data-model")
    for layer in TRUNK:
        fwd = ops_of(plan, Forward, layer)
        assert [(op.pass_index, op.shard, op.device) for op in fwd] == \
               [(0, s, s) for s in range(4)]
        bwd = ops_of(plan, Backward, layer)
        assert [(op.pass_index, op.shard, op.device) for op in bwd] == \
               [(3, s, s) for s in range(4)]
    for layer in ("fc1024c", "fc1000"):
        fwd = ops_of(plan, Forward, layer)
        device = plan.layers[layer].devices[0]
        assert [(op.pass_index, op.shard, op.device) for op in fwd] == \
               [(p, p, device) for p in range(4)]


def test_hybrid_pool3_shard_p_goes_from_device_p_to_every_other_device_in_pass_p():
    net, plan = planned("imagenet-4gpu-data-model")
    copies = sorted((op.pass_index, op.shard, op.src, op.dst) for op in ops_of(plan, Copy, "pool3"))
    assert copies == [(p, p, p, d) for p in range(4) for d in range(4) if d != p]
    assert all(op.nbytes == 9216 * 32 * 4 for op in ops_of(plan, Copy, "pool3"))
    # Gradients come back to pool3's replica for that shard from the three other fc layers.
    grads = sorted((op.pass_index, op.shard, op.src, op.dst)
                   for op in ops_of(plan, GradCopy, "pool3"))
    assert grads == [(p, p, d, p) for p in range(4) for d in range(4) if d != p]
    # Every other copy is a model-parallel gather of dropout outputs into the pass layers.
    others = {op.layer for op in ops_of(plan, Copy)} - {"pool3"}
    assert others == {f"dropout{i}{s}" for i in (1, 2) for s in "abcd"} - {"dropout2a"}
    # pass1x gathers all 4 dropout1 outputs on its device: 3 copies each per pass;
    # pass2a gathers the 3 remote dropout2 outputs on device 0.
    assert len(ops_of(plan, Copy)) == 4 * (3 + 4 * 3 + 3)


def test_hybrid_update_periods():
    net, plan = planned("imagenet-4gpu-data-model")
    before = happens_before(plan)
    fcs = [n for n, l in net.layers.items() if l.type == "fc"]
    assert len(fcs) == 9
    for layer in fcs:  # updatePeriod=1: an update after every pass on M/4 cases
        p = plan.layers[layer]
        assert p.update_period == 1
        updates = ops_of(plan, Update, layer)
        assert [u.pass_index for u in updates] == [0, 1, 2, 3]
        assert all(u.num_cases_scale == 0.25 for u in updates)
        assert int(updates[0].num_cases_scale * MINI) == 32
        assert not ops_of(plan, AllReduce, layer)
        # the forward of pass p+1 sees the weights updated in pass p
        fwd = ops_of(plan, Forward, layer)
        assert all(before(updates[k], fwd[k + 1]) for k in range(3))
    for layer in CONVS:  # updatePeriod default = T = 4: once per minibatch, all-reduced
        p = plan.layers[layer]
        assert p.update_period == 4
        (ar,) = ops_of(plan, AllReduce, layer)
        assert ar.replica_devices == (0, 1, 2, 3) and ar.pass_index == 3
        updates = ops_of(plan, Update, layer)
        assert [(u.pass_index, u.device) for u in updates] == [(3, d) for d in range(4)]
        assert all(u.num_cases_scale == 1.0 and before(ar, u) for u in updates)
        assert all(before(b, ar) for b in ops_of(plan, Backward, layer))


def test_hybrid_planning_takes_well_under_a_second():
    """About 10 ms on a quiet machine; the bound only catches a planner whose work
    explodes with the replicas and passes (with room for a heavily loaded machine)."""
    net = load("imagenet-4gpu-data-model")
    start = time.perf_counter()
    make_plan(net, (0, 1, 2, 3), MINI)
    assert time.perf_counter() - start < 3.0


# ------------------------------------------------------------------------------- other --gpu

def test_hybrid_on_a_permuted_physical_list():
    net, plan = planned("imagenet-4gpu-data-model", gpus=(3, 2, 1, 0))
    assert plan.physical_devices == (3, 2, 1, 0)
    assert plan.layers["fc1024a"].devices == (0,)  # logical index 0, physical 3
    assert plan_text(plan, net).startswith("Scheme: hybrid.  Devices: logical 0..3 -> physical "
                                           "3,2,1,0.")


@pytest.mark.parametrize("name,gpus,layer", [
    ("imagenet-4gpu-data-model", (0, 1), "conv1"),
    ("imagenet-2gpu-model", (0,), "conv1b"),
    ("imagenet-2gpu-data", (0,), "conv1"),
])
def test_reference_config_on_too_few_devices(name, gpus, layer):
    with pytest.raises(PlanError) as info:
        planned(name, gpus=gpus)
    assert info.value.section == layer and "past the --gpu list" in str(info.value)
    assert f"layers-{name}.cfg" in str(info.value)


def test_reference_minibatch_not_a_multiple_of_four():
    with pytest.raises(PlanError, match=r"--mini 130 .* largest replica count 4 \(layer 'conv1'\)"):
        planned("imagenet-4gpu-data", minibatch=130)


def test_reference_configs_plan_on_more_devices_than_they_use():
    net, plan = planned("imagenet-2gpu-model", gpus=(0, 1, 2, 3))
    check_plan_invariants(plan, net)
    assert plan.num_devices == 4
    assert not any(set(op.devices) & {2, 3} for op in plan.ops)
