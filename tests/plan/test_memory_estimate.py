"""The plan's memory estimate (convnet/plan/memory.py, shown by --print-plan and used by
--simulate) against the executor's own accounting (convnet/runtime/step/memory.py).

* Every layer type's memory rule (convnet/config/layer_types/memory_rules.py) says exactly what
  its forward call keeps for the backward call, checked on the layers' real state
  for every layer of the all-layers example, the ImageNet nets and the CIFAR-10 net
  (every conv column order, the model-parallel towers).
* The whole-step estimate between operations is within 15% of the measured per-device
  peak, and its activation part within 20% of what the step held at the measured
  peak, on the bundled digits nets (one device, data-, model- and hybrid-parallel) and
  the all-layers example on two devices; the whole peak adds the temporaries of the
  call running then (held to the process's measured peak by
  tests/app/test_memory_measured.py).
* The accounting itself: weights and momentum at the peak are exactly the replicas'
  parameter bytes, a view counts once, and the process peak covers the devices'.
"""

from __future__ import annotations


import numpy as np
import pytest

from convnet.app.run.memory_fit import weight_sharing
from convnet.config import load_net
from convnet.plan.memory import STEP, memory_peaks
from convnet.plan.ops import FLOAT_BYTES
from convnet.plan.planner import make_plan
from convnet.runtime.devices.backends import make_devices
from convnet.runtime.step.executor import Executor
from convnet.runtime.step.memory import MemoryMeter, _owner, peak_rss_bytes
from tests.support import ROOT

EXAMPLES = ROOT / "examples"
REF = EXAMPLES / "cuda-convnet2"


def _all_layers():
    return load_net(EXAMPLES / "all-layers.cfg", EXAMPLES / "all-layers-params.cfg",
                    data_dims={0: (3, 8, 8), 1: (1,)}, num_classes=4)


def _imagenet(name="imagenet-2gpu-model", size=64):
    return load_net(REF / f"layers-{name}.cfg", REF / f"layer-params-{name}.cfg",
                    data_dims={0: (3, size, size), 1: (1,)}, num_classes=1000)


def _cifar10(params=REF / "layer-params-cifar10-11pct.cfg"):
    return load_net(REF / "layers-cifar10-11pct.cfg", params,
                    data_dims={0: (3, 32, 32), 1: (1,)}, num_classes=10)


def _cifar10_with_fork_dropout(tmp_path):
    """The CIFAR-10 net with the dropout fork's ``dropout=`` on conv1 and fc10."""
    params = (REF / "layer-params-cifar10-11pct.cfg").read_text()
    for name in ("conv1", "fc10"):
        params = params.replace(f"[{name}]\n", f"[{name}]\ndropout=0.5\n")
    (tmp_path / "params.cfg").write_text(params)
    return _cifar10(tmp_path / "params.cfg")


def _digits(layer_def):
    params = "digits-hybrid-params.cfg" if "hybrid" in layer_def else "digits-params.cfg"
    return load_net(EXAMPLES / layer_def, EXAMPLES / params, data_dims={0: (1, 8, 8), 1: (1,)},
                    num_classes=10)


def _batch(net, mini, seed=0):
    rng = np.random.default_rng(seed)
    dims = net["data"].output_shape if "data" in net.layers else None
    classes = next(ldef for ldef in net if ldef.type == "softmax").outputs
    return [rng.standard_normal((mini,) + tuple(dims), dtype=np.float32),
            rng.integers(0, classes, (mini, 1)).astype(np.float32)]


def _forward_buffers(net, gpus, mini):
    """The activations and kept states of one train-mode forward pass."""
    ex = Executor(net, make_plan(net, gpus, mini), make_devices(gpus, "cpu"), seed=0,
                  parallel=False)
    try:
        return ex._run_tasks(_batch(net, mini), ex._eval_tasks, train=True, progress=0.0), ex
    finally:
        ex.close()


def _arrays(obj):
    if obj is None:
        return []
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [a for item in obj for a in _arrays(item)]
    if isinstance(obj, dict):
        return [a for item in obj.values() for a in _arrays(item)]
    return []  # e.g. the conv cache's layout name


@pytest.mark.parametrize("make_net, gpus", [(lambda _: _all_layers(), (0,)),
                                            (lambda _: _imagenet(), (0, 1)),
                                            (lambda _: _imagenet("imagenet-1gpu", 128), (0,)),
                                            (lambda _: _cifar10(), (0,)),
                                            (_cifar10_with_fork_dropout, (0,))],
                         ids=["all-layers", "imagenet-2gpu-model", "imagenet-1gpu", "cifar10",
                              "cifar10-fork-dropout"])
def test_each_layer_types_rule_is_what_its_forward_call_keeps(make_net, gpus, tmp_path):
    net, mini = make_net(tmp_path), 4
    buffers, ex = _forward_buffers(net, gpus, mini)
    plan = ex.plan
    checked = set()
    for (name, shard), state in buffers.states.items():
        ldef = net[name]
        device = plan.producer_of(name, shard)[1]
        output = buffers.acts[(name, shard, device)]
        inputs = [buffers.acts[(i, shard, device)] for i in ldef.inputs]
        seen = {id(_owner(a)) for a in inputs + [output]}
        kept = {id(_owner(a)): _owner(a).nbytes for a in _arrays(state)}
        kept_bytes = sum(n for key, n in kept.items() if key not in seen)
        rule = ldef.layer_type.memory(ldef)
        assert kept_bytes == rule.kept_per_case * plan.shard_size + rule.kept_per_call, name
        new_output = id(_owner(output)) not in {id(_owner(a)) for a in inputs}
        assert new_output == rule.new_output, name
        checked.add(ldef.type)
    computed = {ldef.type for ldef in net if not ldef.is_data}
    assert checked == computed


def _measure(net, gpus, mini, steps=2):
    ex = Executor(net, make_plan(net, gpus, mini), make_devices(gpus, "cpu"), seed=0,
                  parallel=True)
    try:
        batch = _batch(net, mini)
        ex.step(batch)
        meter = MemoryMeter(ex)
        ex.memory = meter
        for _ in range(steps):
            ex.step(batch)
    finally:
        ex.close()
    return ex.plan, meter, ex.store.shared


NETS = {
    "digits-single": (lambda: _digits("digits-single.cfg"), (0,), 128),
    "digits-data": (lambda: _digits("digits-data.cfg"), (0, 1), 128),
    "digits-model": (lambda: _digits("digits-model.cfg"), (0, 1), 128),
    "digits-hybrid": (lambda: _digits("digits-hybrid.cfg"), (0, 1), 128),
    "all-layers-2dev": (_all_layers, (0, 1), 16),
}


@pytest.mark.parametrize("name", sorted(NETS))
def test_the_plans_peak_estimate_is_close_to_the_measured_peak(name):
    make_net, gpus, mini = NETS[name]
    net = make_net()
    plan, meter, shared = _measure(net, gpus, mini)
    # --print-plan's figures count the copies the executor keeps
    assert weight_sharing(plan, net, "cpu", "sync", processes=1) == shared
    for measured, estimate in zip(meter.peaks, memory_peaks(plan, net, shared)):
        if not measured.peak_bytes:
            continue
        assert estimate.between_ops_bytes == pytest.approx(measured.peak_bytes, rel=0.15), \
            measured
        held = sum(estimate.between_ops_at_peak[k] for k in STEP)
        assert held == pytest.approx(measured.activation_bytes, rel=0.20), measured
        assert estimate.peak_bytes >= estimate.between_ops_bytes


def test_simulates_peak_memory_is_the_estimate_and_within_15_percent_between_operations():
    from convnet.plan.report import device_totals
    from convnet.simulate.costs import ComputeProfile, CostModel
    from convnet.simulate.hardware import DEVICE_KINDS
    from convnet.simulate.report import peak_memory

    make_net, gpus, mini = NETS["digits-hybrid"]
    net = make_net()
    plan, meter, shared = _measure(net, gpus, mini)
    predicted = peak_memory(plan, net, CostModel(ComputeProfile(64), DEVICE_KINDS["measured"]))
    assert predicted == [t.peak_bytes for t in device_totals(plan, net, shared)]
    for measured, peak in zip(meter.peaks, memory_peaks(plan, net, shared)):
        assert peak.between_ops_bytes == pytest.approx(measured.peak_bytes, rel=0.15)


def test_only_synchronous_cpu_replicas_of_one_process_share_their_weights():
    net = _digits("digits-data.cfg")
    plan = make_plan(net, (0, 1), 128)
    replicated = {name for name, p in plan.layers.items() if p.replicas > 1 and p.param_count}
    assert replicated and weight_sharing(plan, net, "cpu", "sync", processes=1) == replicated
    for backend, sync, processes in [("cpu", "local:2", 1), ("cpu", "async:4", 1),
                                     ("cpu", "sync", 2), ("cuda", "sync", 1)]:
        assert weight_sharing(plan, net, backend, sync, processes) == frozenset()


@pytest.mark.parametrize("name", ["imagenet-2gpu-model", "imagenet-2gpu-data"])
def test_the_accounting_counts_parameters_exactly_and_views_once(name):
    net = _imagenet(name)
    plan, meter, shared = _measure(net, (0, 1), 8, steps=1)
    # the data-parallel layers' replicas share one copy of the weights, on device 0
    assert bool(shared) == (name == "imagenet-2gpu-data")
    for peak in meter.peaks:
        params = sum(p.param_count for name, p in plan.layers.items()
                     if peak.device in (p.devices[:1] if name in shared else p.devices))
        assert peak.at_peak["weights"] == peak.at_peak["momentum"] == params * FLOAT_BYTES
        assert peak.peak_bytes == sum(peak.at_peak.values())
        # (no claim on the activations at the peak: a training step frees each one after
        # its last reader, so a device's peak may come during the all-reduce, after its
        # backward pass freed them, or before, as the threads happen to run)
    assert meter.process_peak_bytes >= max(p.peak_bytes for p in meter.peaks)
    assert meter.process_peak_bytes <= sum(p.peak_bytes for p in meter.peaks)
    assert peak_rss_bytes() > meter.process_peak_bytes


def test_a_view_of_an_array_is_its_owner():
    a = np.zeros((4, 6), np.float32)
    assert _owner(a[1:].reshape(-1)[2:]) is a
    assert _owner(a) is a
