"""Property tests of the planner on random valid nets, and on nets with one thing broken.

The generator builds trees of fc layers (with some dropout, and model-parallel
sibling groups gathered by pass, concat, multi-input fc or eltsum layers) whose
replica counts come from a divisor chain ``Rmin * 2**j`` (Rmax up to 8), on a
random number of devices with random device lists, and random valid
``updatePeriod`` values.  Every plan
must satisfy :func:`tests.support.plans.check_plan_invariants`; every perturbed
net must raise :class:`PlanError` naming the layer that was changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convnet.errors import PlanError
from convnet.plan.ops import Forward
from convnet.plan.planner import make_plan
from tests.support.plans import check_plan_invariants, fc_net

SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@dataclass
class GenNet:
    """A generated net: the fc_net spec plus what the planner must conclude about it."""

    spec: list
    num_devices: int
    minibatch: int
    physical: tuple[int, ...]
    devices: dict[str, tuple[int, ...]]
    counts: dict[str, int]
    consumer_count: dict[str, int | None]
    groups: list[list[str]] = field(default_factory=list)  # model-parallel sibling groups
    gathers: list[str] = field(default_factory=list)  # pass layers

    @property
    def rmax(self) -> int:
        return max(self.counts.values())

    @property
    def rmin(self) -> int:
        return min(self.counts.values())

    def layer(self, name):
        return next(entry for entry in self.spec if entry[0] == name)


class _Builder:
    def __init__(self, draw, levels, num_devices):
        self.draw, self.levels, self.num_devices = draw, levels, num_devices
        self.spec: list[list] = []
        self.devices: dict[str, tuple[int, ...]] = {}
        self.counts: dict[str, int] = {}
        self.consumer_count: dict[str, int | None] = {"data": None, "labels": None}
        self.groups: list[list[str]] = []
        self.gathers: list[str] = []

    def _name(self):
        return f"L{len(self.spec)}"

    def _devices(self, count):
        return tuple(self.draw(st.permutations(range(self.num_devices)))[:count])

    def _add(self, type_, inputs, devices, explicit=True):
        name = self._name()
        self.spec.append([name, type_, list(inputs), list(devices) if explicit else None, 0])
        self.devices[name], self.counts[name] = tuple(devices), len(devices)
        self.consumer_count[name] = None
        for inp in inputs:
            self.consumer_count[inp] = len(devices)
        return name

    def _allowed(self, inp):
        fixed = self.consumer_count[inp]
        return [fixed] if fixed else [c for c in self.levels if c <= self.counts[inp]]

    def _pick(self):
        return self.draw(st.sampled_from([n for n in self.counts]))

    def root(self):
        """A layer reading the image data layer."""
        # Favour the widest count first so that most nets get several passes.
        widest = [self.levels[-1]] * 2
        count = self.consumer_count["data"] or self.draw(st.sampled_from(self.levels + widest))
        if count == 1 and self.draw(st.booleans()):
            return self._add("fc", ["data"], (0,), explicit=False)  # default device 0
        return self._add("fc", ["data"], self._devices(count))

    def chain(self):
        """An fc or dropout layer on an existing layer; sometimes inheriting its devices."""
        inp = self._pick()
        count = self.draw(st.sampled_from(self._allowed(inp)))
        type_ = self.draw(st.sampled_from(["fc", "fc", "dropout2"]))
        if count == self.counts[inp] and self.draw(st.booleans()):
            return self._add(type_, [inp], self.devices[inp], explicit=False)
        return self._add(type_, [inp], self._devices(count))

    def group(self):
        """Model-parallel siblings reading one layer, gathered by pass (or concat, fc, eltsum)."""
        inp = self._pick()
        count = self.draw(st.sampled_from(self._allowed(inp)))
        size = self.draw(st.integers(2, 3))
        if count == 1 and size <= self.num_devices:
            spread = self._devices(size)
            siblings = [self._add("fc", [inp], (d,)) for d in spread]
        else:
            siblings = [self._add("fc", [inp], self._devices(count)) for _ in range(size)]
        self.groups.append(siblings)
        gathers = self.draw(st.integers(1, 2)) if 2 * count <= self.num_devices else 1
        order = self._devices(self.num_devices)
        type_ = self.draw(st.sampled_from(["pass", "pass", "concat", "fc", "eltsum"]))
        for g in range(gathers):
            reads = self.draw(st.permutations(siblings))
            name = self._add(type_, reads, order[g * count:(g + 1) * count])
            if type_ == "pass":
                self.gathers.append(name)

    def finish(self, all_to_cost):
        """Lead the open ends to a softmax and a logreg cost."""
        ends = [n for n in self.counts if self.consumer_count[n] is None]
        if not all_to_cost:
            ends = ends[-1:]
        allowed = [c for c in self.levels if c <= min(self.counts[e] for e in ends)]
        final = self.draw(st.sampled_from(allowed + [allowed[0]] * len(allowed)))
        ends = [e if self.counts[e] == final else self._add("fc", [e], self._devices(final))
                for e in ends]
        top = ends[0]
        if len(ends) > 1:
            top = self._add("concat", self.draw(st.permutations(ends)), self._devices(final))
        probs = self._add("softmax", [top], self.devices[top], explicit=False)
        if self.devices[top] == (0,) and self.draw(st.booleans()):
            self._add("cost.logreg", ["labels", probs], (0,), explicit=False)
        else:
            self._add("cost.logreg", ["labels", probs], self.devices[top])


@st.composite
def valid_nets(draw) -> GenNet:
    rmin = draw(st.sampled_from([1, 1, 1, 2]))
    k = draw(st.sampled_from([0, 1, 1, 2, 2, 3] if rmin == 1 else [0, 1, 1, 2]))
    levels = [rmin << j for j in range(k + 1)]
    num_devices = draw(st.integers(levels[-1], levels[-1] + 2))
    b = _Builder(draw, levels, num_devices)
    b.root()
    for _ in range(draw(st.integers(0, 6))):
        getattr(b, draw(st.sampled_from(["chain", "chain", "group", "root"])))()
    b.finish(all_to_cost=draw(st.integers(0, 3)) > 0)
    counts = dict(b.counts)
    for data in ("data", "labels"):
        if b.consumer_count[data]:
            counts[data] = b.consumer_count[data]
    rmax, rmin = max(counts.values()), min(counts.values())
    passes = rmax // rmin
    for entry in b.spec:
        if entry[1] == "fc":
            t = counts[entry[0]] // rmin
            entry[4] = draw(st.sampled_from([0] + [t << j for j in range(4) if t << j <= passes]))
    minibatch = rmax * draw(st.integers(1, 3))
    physical = tuple(draw(st.permutations(range(num_devices + 2)))[:num_devices])
    return GenNet(b.spec, num_devices, minibatch, physical, b.devices, counts,
                  b.consumer_count, b.groups, b.gathers)


def _plan(gen: GenNet, spec=None, minibatch=None):
    net = fc_net(spec if spec is not None else gen.spec)
    return net, make_plan(net, gen.physical, gen.minibatch if minibatch is None else minibatch)


# ------------------------------------------------------------------------------- valid nets

@SETTINGS
@given(valid_nets())
def test_random_valid_nets_satisfy_the_plan_invariants(gen):
    net, plan = _plan(gen)
    check_plan_invariants(plan, net)
    assert plan.physical_devices == gen.physical and plan.num_devices == gen.num_devices
    assert (plan.num_shards, plan.rmin) == (gen.rmax, gen.rmin)
    assert plan.num_passes == gen.rmax // gen.rmin
    for name, devs in gen.devices.items():
        assert plan.layers[name].devices == devs, name
        assert plan.layers[name].period == len(devs) // gen.rmin
    for entry in gen.spec:
        if entry[1] == "fc" and plan.layers[entry[0]].needs_backward:
            u = entry[4] or plan.layers[entry[0]].period
            assert plan.layers[entry[0]].update_period == u


@SETTINGS
@given(valid_nets())
def test_random_valid_nets_scheme_names(gen):
    net, plan = _plan(gen)
    if plan.num_passes > 1:
        assert plan.scheme == "hybrid"
    for name, p in plan.layers.items():
        if p.replicas > 1:
            assert p.scheme == "data", name
    for group in gen.groups:
        if all(gen.counts[s] == 1 for s in group) and \
                len({gen.devices[s] for s in group}) == len(group):
            assert all(plan.layers[s].scheme == "model" for s in group), group
    if all(c == 1 for c in gen.counts.values()):
        devices = {d for devs in gen.devices.values() for d in devs}
        assert plan.scheme == ("single" if len(devices) == 1 else "model")
    elif plan.num_passes == 1:
        assert plan.scheme in ("data", "hybrid")


@settings(max_examples=40, deadline=None)
@given(valid_nets())
def test_planning_is_deterministic(gen):
    net, first = _plan(gen)
    _, second = _plan(gen)
    assert first.ops == second.ops and first.layers == second.layers


@settings(max_examples=40, deadline=None)
@given(valid_nets(), st.integers(1, 4))
def test_minibatch_size_only_scales_bytes(gen, factor):
    net, plan = _plan(gen)
    _, bigger = _plan(gen, minibatch=gen.minibatch * factor)
    assert [(type(a), a.layer, a.pass_index, a.devices) for a in plan.ops] == \
           [(type(b), b.layer, b.pass_index, b.devices) for b in bigger.ops]
    for a, b in zip(plan.ops, bigger.ops):
        if hasattr(a, "nbytes") and type(a).__name__ != "AllReduce":
            assert b.nbytes == a.nbytes * factor


# ------------------------------------------------------------------------------- broken nets

PERTURBATIONS = ["duplicate_device", "device_past_gpu", "bad_update_period", "bad_minibatch",
                 "count_above_input", "consumer_mismatch", "pass_overlap"]


@st.composite
def perturbed_nets(draw):
    """A valid net with exactly one rule broken: (spec, minibatch, layer the error names)."""
    gen = draw(valid_nets())
    spec = [list(entry) for entry in gen.spec]
    explicit = [e for e in spec if e[3] is not None]
    options = ["bad_update_period"]  # the root layer is always an fc layer
    if explicit:
        options.append("device_past_gpu")
    if gen.rmax > 1:
        options.append("bad_minibatch")
    if any(len(e[3]) > 1 for e in explicit):
        options.append("duplicate_device")
    growable = [e for e in explicit if len(e[2]) == 1 and e[2][0] in gen.devices
                and 2 * gen.counts[e[2][0]] <= gen.num_devices]
    if growable:
        options.append("count_above_input")
    mismatched = [n for n, c in gen.consumer_count.items() if c and n in gen.counts
                  and any(x != c and gen.counts[n] % x == 0 for x in _levels(gen))]
    if mismatched:
        options.append("consumer_mismatch")
    if gen.gathers:
        options.append("pass_overlap")
    options += [o for o in options if o not in ("bad_update_period", "device_past_gpu")]
    kind = draw(st.sampled_from(options))
    minibatch = gen.minibatch
    if kind == "duplicate_device":
        entry = draw(st.sampled_from([e for e in explicit if len(e[3]) > 1]))
        entry[3][-1] = entry[3][0]
        named = entry[0]
    elif kind == "device_past_gpu":
        entry = draw(st.sampled_from(explicit))
        entry[3][draw(st.integers(0, len(entry[3]) - 1))] = gen.num_devices + draw(
            st.integers(0, 2))
        named = entry[0]
    elif kind == "bad_update_period":
        entry = draw(st.sampled_from([e for e in spec if e[1] == "fc"]))
        entry[4] = draw(st.sampled_from([3, 2 * gen.rmax // gen.rmin, -2]))
        named = entry[0]
    elif kind == "bad_minibatch":
        minibatch = gen.minibatch + draw(st.integers(1, gen.rmax - 1))
        named = "--mini"
    elif kind == "count_above_input":
        entry = draw(st.sampled_from(growable))
        count = 2 * gen.counts[entry[2][0]]
        entry[3] = list(draw(st.permutations(range(gen.num_devices)))[:count])
        named = entry[0]
    elif kind == "consumer_mismatch":
        inp = draw(st.sampled_from(mismatched))
        count = draw(st.sampled_from([x for x in _levels(gen) if x != gen.consumer_count[inp]
                                      and gen.counts[inp] % x == 0]))
        named = f"X{len(spec)}"
        devices = list(draw(st.permutations(range(gen.num_devices)))[:count])
        spec.append([named, "fc", [inp], devices, 0])
    else:  # pass_overlap: a second pass layer on the same devices as an existing one
        entry = draw(st.sampled_from([e for e in spec if e[0] in gen.gathers]))
        named = f"X{len(spec)}"
        spec.append([named, "pass", list(entry[2]), list(entry[3]), 0])
    return gen, kind, spec, minibatch, named


def _levels(gen):
    return sorted({c for c in gen.counts.values()})


@SETTINGS
@given(perturbed_nets())
def test_each_perturbed_net_is_rejected_naming_the_layer(case):
    gen, kind, spec, minibatch, named = case
    with pytest.raises(PlanError) as info:
        _plan(gen, spec=spec, minibatch=minibatch)
    assert named in str(info.value), (kind, str(info.value))


# ------------------------------------------------------------------------------- fixed examples

def test_rmin_two_generalisation_covers_every_shard_once():
    # Rmin = 2: a 4-replica layer feeding a 2-replica one; shard = p * Rmin + i.
    net = fc_net([("a", "fc", ["data"], [0, 1, 2, 3], 0), ("b", "fc", ["a"], [3, 2], 0),
                  ("probs", "softmax", ["b"], None, 0),
                  ("cost", "cost.logreg", ["labels", "probs"], [3, 2], 0)])
    plan = make_plan(net, (0, 1, 2, 3), 8)
    check_plan_invariants(plan, net)
    assert (plan.num_passes, plan.rmin) == (2, 2)
    b_shards = [(op.pass_index, op.shard, op.device) for op in plan.ops
                if isinstance(op, Forward) and op.layer == "b"]
    assert b_shards == [(0, 0, 3), (0, 1, 2), (1, 2, 3), (1, 3, 2)]
