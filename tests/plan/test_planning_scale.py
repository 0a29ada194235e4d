"""Planning and the plan report grow linearly with the layer count.

A config file may hold tens of thousands of layers (the 4 MiB cap admits ~90k), and
``--print-plan`` on one must not take minutes.  Counting work, not timing it (the
machine is shared): the layers visited through the net, and the buffer sizes the
memory estimate adds up, on chains of N and 4N layers.  Linear work grows 4-fold;
a scan of the whole net per layer grows 16-fold.
"""

from __future__ import annotations

from dataclasses import replace

from convnet.config import load_net
from convnet.plan import memory
from convnet.plan.planner import make_plan
from convnet.plan.report import device_totals, plan_text
from tests.support.configs import long_chain, write_pair

SMALL = 200
GROWTH = 5  # 4N layers may cost at most this many times the work of N


class _CountingLayers(dict):
    """A net's layer dict that counts every layer handed out by a walk over it."""

    visits = 0

    def values(self):
        for ldef in super().values():
            _CountingLayers.visits += 1
            yield ldef

    def items(self):
        for item in super().items():
            _CountingLayers.visits += 1
            yield item

    def __iter__(self):
        for name in super().__iter__():
            _CountingLayers.visits += 1
            yield name


def _chain(tmp_path, depth: int):
    folder = tmp_path / str(depth)
    folder.mkdir()
    return load_net(*write_pair(folder, *long_chain(depth)), {0: (8,), 1: (1,)}, 4)


def _layer_visits(tmp_path, depth: int) -> int:
    net = _chain(tmp_path, depth)
    net = replace(net, layers=_CountingLayers(net.layers))
    _CountingLayers.visits = 0
    plan = make_plan(net, (0, 0), 8)
    plan_text(plan, net)
    return _CountingLayers.visits


def test_planning_visits_each_layer_a_bounded_number_of_times(tmp_path):
    small, large = _layer_visits(tmp_path, SMALL), _layer_visits(tmp_path, 4 * SMALL)
    assert small > SMALL  # the counter sees the walks
    assert large <= GROWTH * small, (small, large)


def test_the_memory_estimate_does_not_re_add_what_a_device_holds(tmp_path, monkeypatch):
    """The estimate reads each device's totals after every operation; adding up every
    buffer held at each of them made it quadratic (the activations stay to the end)."""
    added = 0

    def counting_sum(values, start=0):
        nonlocal added
        values = list(values)
        added += len(values)
        return sum(values, start)

    monkeypatch.setattr(memory, "sum", counting_sum, raising=False)
    counts = []
    for depth in (SMALL, 4 * SMALL):
        net = _chain(tmp_path, depth)
        added = 0
        device_totals(make_plan(net, (0,), 8), net)
        counts.append(added)
    assert counts[1] <= GROWTH * counts[0] + 100, counts
