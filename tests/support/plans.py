"""Build small NetConfigs directly (no files) for planner and executor tests."""

from __future__ import annotations

import numpy as np

from convnet.config.model import LayerDef, NetConfig
from convnet.config.values.schedules import Schedule

WEIGHT_PARAMS = {"epsW": [Schedule("const", 0.01)], "epsB": Schedule("const", 0.02),
                 "momW": [0.9], "momB": 0.9, "wc": [0.0], "wball": [0.0], "updatePeriod": 0}


def fc_net(spec, features: int = 4, num_classes: int = 3) -> NetConfig:
    """A net of fc/pass layers from ``[(name, type, inputs, gpu, updatePeriod), ...]``.

    Two data layers ``data`` (``features`` wide) and ``labels`` are prepended.
    Every fc layer has ``features`` outputs except those feeding a cost, which
    have ``num_classes``.
    """
    layers = {
        "data": LayerDef("data", "data", attrs={"dataIdx": 0}, output_shape=(features,)),
        "labels": LayerDef("labels", "data", attrs={"dataIdx": 1}, output_shape=(1,)),
    }
    feeds_softmax = {inp for _, type_, inputs, _, _ in spec if type_ == "softmax" for inp in inputs}
    for name, type_, inputs, gpu, update_period in spec:
        in_shapes = tuple(layers[i].output_shape for i in inputs)
        ldef = LayerDef(name, type_, inputs=tuple(inputs), gpu=tuple(gpu) if gpu else None,
                        input_shapes=in_shapes, file="test.cfg")
        if type_ == "fc":
            ldef.attrs = {"outputs": features, "initW": [0.1] * len(inputs), "initB": 0.0}
            ldef.params = dict(WEIGHT_PARAMS, momW=[0.9] * len(inputs), wc=[0.0] * len(inputs),
                               wball=[0.0] * len(inputs),
                               epsW=[Schedule("const", 0.01)] * len(inputs),
                               updatePeriod=update_period)
            ldef.attrs["outputs"] = num_classes if name in feeds_softmax else features
            ldef.output_shape = (ldef.attrs["outputs"],)
        elif type_ in ("pass", "concat"):
            ldef.output_shape = (sum(s[0] for s in in_shapes),)
        elif type_ == "cost.logreg":
            ldef.output_shape = (1,)
            ldef.params = {"coeff": 1.0, "topk": 1}
        else:
            ldef.output_shape = in_shapes[0]
        layers[name] = ldef
    return NetConfig(layers=layers, data_dims={0: (features,), 1: (1,)}, num_classes=num_classes)


def happens_before(plan):
    """``before(a, b)``: op ``a`` is ordered before op ``b`` in every valid execution.

    The parallel executor runs each device's ops in list order and waits for
    cross-device ``deps``; so the ordering is the transitive closure of deps
    plus program order on each device (an all-reduce joins all its devices).
    """
    closure: list[int] = []
    last_on: dict[int, int] = {}
    for op in plan.ops:
        preds = set(op.deps) | {last_on[d] for d in op.devices if d in last_on}
        mask = 0
        for q in preds:
            mask |= closure[q] | (1 << q)
        closure.append(mask)
        for d in op.devices:
            last_on[d] = op.index

    def before(a, b) -> bool:
        return bool((closure[b.index] >> a.index) & 1)

    return before


def check_plan_invariants(plan, net) -> None:
    """Assert the structural properties every plan must have.

    Shards and passes, one Forward/Backward per layer and shard, a Load or
    Copy exactly where a reader's device lacks an activation, a GradCopy
    exactly where a gradient crosses devices, dependencies that make every
    read follow its write in any execution, and P/U updates per replica with
    an all-reduce before each when a weight layer is replicated.
    """
    from convnet.plan.ops import (FLOAT_BYTES, AllReduce, Backward, Copy, Forward, GradCopy, Load,
                              Update)

    ops, layers = plan.ops, plan.layers
    placed = {n: p for n, p in layers.items() if p.devices}
    counts = [p.replicas for p in placed.values()]
    P, S, rmin = plan.num_passes, plan.num_shards, plan.rmin
    assert S == max(counts) and rmin == min(counts) and P == S // rmin
    assert plan.minibatch % S == 0 and plan.shard_size == plan.minibatch // S
    for name, p in placed.items():
        assert p.period == p.replicas // rmin and P % p.period == 0, name
        assert list(p.active_passes(P)) == list(range(0, P, p.period))
        assert len(set(p.devices)) == p.replicas
        assert all(0 <= d < plan.num_devices for d in p.devices), name
    assert set(layers) == set(net.layers)

    for i, op in enumerate(ops):
        assert op.index == i
        assert all(0 <= d < i for d in op.deps), op
        assert len(set(op.deps)) == len(op.deps), op
        assert 0 <= op.pass_index < P, op
        assert op.devices and all(0 <= d < plan.num_devices for d in op.devices), op
        assert op.layer in placed, op
    assert [op.pass_index for op in ops] == sorted(op.pass_index for op in ops)
    for d in range(plan.num_devices):
        mine = plan.ops_for_device(d)
        assert [op.index for op in mine] == sorted(op.index for op in mine)

    before = happens_before(plan)

    def shard_bytes(layer):
        return net[layer].outputs * plan.shard_size * FLOAT_BYTES

    def unique(kind, key_of):
        out = {}
        for op in ops:
            if isinstance(op, kind):
                key = key_of(op)
                assert key not in out, f"two {kind.__name__} ops for {key}"
                out[key] = op
        return out

    fwd = unique(Forward, lambda o: (o.layer, o.shard))
    bwd = unique(Backward, lambda o: (o.layer, o.shard))
    loads = unique(Load, lambda o: (o.layer, o.shard, o.device))
    copies = unique(Copy, lambda o: (o.layer, o.shard, o.dst))
    gcopies = unique(GradCopy, lambda o: (o.layer, o.consumer, o.shard, o.dst))

    for name, p in placed.items():
        ldef = net[name]
        mine = {s for (l, s) in fwd if l == name}
        if ldef.is_data:
            assert not mine
            continue
        assert mine == set(range(S)), f"{name} forwards shards {sorted(mine)}"
        back = {s for (l, s) in bwd if l == name}
        assert back == (set(range(S)) if p.needs_backward else set()), name
        for s in range(S):
            r = s % p.replicas
            f = fwd[(name, s)]
            assert (f.replica, f.device) == (r, p.devices[r]) == plan.producer_of(name, s)
            assert f.pass_index == (s // p.replicas) * p.period
            assert f.shard == p.shard(f.pass_index, f.replica, rmin)
            if p.needs_backward:
                b = bwd[(name, s)]
                assert (b.replica, b.device) == (r, p.devices[r])
                assert b.pass_index == f.pass_index + p.period - 1
                assert before(f, b)
        assert len(p.input_grads) == len(ldef.inputs)
        for inp, wanted in zip(ldef.inputs, p.input_grads):
            assert wanted == (p.needs_backward and layers[inp].needs_backward), (name, inp)

    # Activations: a Load or Copy exactly where needed, ordered by deps.
    need_loads, need_copies = set(), set()
    for f in fwd.values():
        for inp in net[f.layer].inputs:
            if net[inp].is_data:
                load = loads[(inp, f.shard, f.device)]
                assert load.nbytes == shard_bytes(inp) and before(load, f)
                need_loads.add((inp, f.shard, f.device))
                continue
            _, src = plan.producer_of(inp, f.shard)
            made = fwd[(inp, f.shard)]
            assert made.device == src
            if src == f.device:
                assert before(made, f), (made, f)
                continue
            copy = copies[(inp, f.shard, f.device)]
            assert copy.src == src and copy.src != copy.dst
            assert copy.nbytes == shard_bytes(inp)
            assert before(made, copy) and before(copy, f), (made, copy, f)
            need_copies.add((inp, f.shard, f.device))
    assert need_loads == set(loads), set(loads) - need_loads
    assert need_copies == set(copies), set(copies) - need_copies

    # Gradients: a consumer's backward precedes the producer's, crossing by GradCopy.
    need_gcopies = set()
    for b in bwd.values():
        p = layers[b.layer]
        for inp, wanted in zip(net[b.layer].inputs, p.input_grads):
            if not wanted:
                continue
            _, dst = plan.producer_of(inp, b.shard)
            target = bwd[(inp, b.shard)]
            if dst == b.device:
                assert before(b, target), (b, target)
                continue
            gc = gcopies[(inp, b.layer, b.shard, dst)]
            assert gc.src == b.device and gc.nbytes == shard_bytes(inp)
            assert before(b, gc) and before(gc, target), (b, gc, target)
            need_gcopies.add((inp, b.layer, b.shard, dst))
    assert need_gcopies == set(gcopies), set(gcopies) - need_gcopies

    # Weight updates.
    for name, p in placed.items():
        ldef = net[name]
        upd = [op for op in ops if isinstance(op, Update) and op.layer == name]
        ars = [op for op in ops if isinstance(op, AllReduce) and op.layer == name]
        if not (ldef.has_weights and p.needs_backward):
            assert not upd and not ars, name
            continue
        U, T, R = p.update_period, p.period, p.replicas
        assert U > 0 and U % T == 0 and P % U == 0, name
        points = list(range(U - 1, P, U))
        assert len(points) == P // U
        assert [a.pass_index for a in ars] == (points if R > 1 else [])
        for a in ars:
            assert a.replica_devices == p.devices and a.nbytes == p.param_count * FLOAT_BYTES
        for r in range(R):
            mine = [u for u in upd if u.replica == r]
            assert [u.pass_index for u in mine] == points, (name, r)
            assert all(u.device == p.devices[r] for u in mine)
            assert all(abs(u.num_cases_scale - U / P) < 1e-12 for u in mine)
            uses = [o for o in list(fwd.values()) + list(bwd.values())
                    if o.layer == name and o.replica == r]
            for k, u in enumerate(mine):
                for o in uses:
                    assert before(o, u) if o.pass_index <= u.pass_index else before(u, o), (o, u)
                if R > 1:
                    ar = ars[k]
                    assert before(ar, u)
                    window = [o for o in bwd.values() if o.layer == name
                              and u.pass_index - U < o.pass_index <= u.pass_index]
                    assert len(window) == R * U // T
                    assert all(before(o, ar) for o in window)


#: A small hybrid fc net on two devices: fc1 data parallel, then two model-parallel towers.
SMALL_HYBRID = [("fc1", "fc", ["data"], [0, 1], 0),
                ("fca", "fc", ["fc1"], [0], 0), ("fcb", "fc", ["fc1"], [1], 0),
                ("top", "fc", ["fca", "fcb"], [0], 0),
                ("probs", "softmax", ["top"], None, 0),
                ("cost", "cost.logreg", ["labels", "probs"], [0], 0)]


#: A three-level hybrid on four devices: fc1 on 4 replicas, fc2 on 2 (two passes a step,
#: so it updates twice per minibatch), fc3 on 1.
THREE_LEVELS = [("fc1", "fc", ["data"], [0, 1, 2, 3], 0), ("fc2", "fc", ["fc1"], [0, 1], 0),
                ("fc3", "fc", ["fc2"], [0], 0), ("probs", "softmax", ["fc3"], None, 0),
                ("cost", "cost.logreg", ["labels", "probs"], [0], 0)]


def with_rates(net: NetConfig, eps: float) -> NetConfig:
    """``net`` with every fc layer's epsW and epsB set to ``eps`` (large steps make a
    missed or mis-weighted update show far above float rounding)."""
    for ldef in net:
        if ldef.type == "fc":
            ldef.params["epsW"] = [Schedule("const", eps)] * len(ldef.inputs)
            ldef.params["epsB"] = Schedule("const", eps)
    return net


def small_batch(n=8):
    """A minibatch for SMALL_HYBRID: 4 features and a label in 0..2 per case."""
    return small_batches(1, seed=0, n=n)[0]


def small_batches(count: int, seed: int, n=8):
    """``count`` minibatches like :func:`small_batch`, drawn in turn from one seed."""
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((n, 4)).astype(np.float32),
             rng.integers(0, 3, (n, 1)).astype(np.float32)] for _ in range(count)]
