"""The pipeline schedules' ticks (convnet/plan/schedules.py): fill-drain is GPipe's
formula, 1F1B runs every item once in a valid order, as many ticks as fill-drain, and
holds at most min(M, S - s) micro-batches between forward and backward on stage s."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from convnet.plan.schedules import FILL_DRAIN, ONE_F_ONE_B, item_ticks, stage_sequence

SIZES = st.tuples(st.integers(1, 5), st.integers(1, 9))  # (stages, micro-batches)


@given(SIZES)
def test_fill_drain_ticks_are_gpipes(sizes):
    stages, micro = sizes
    last = stages - 1
    ticks = item_ticks(FILL_DRAIN, stages, micro)
    for s in range(stages):
        for m in range(micro):
            assert ticks["F", s, m] == m + s
            assert ticks["B", s, m] == micro + last + m + (last - s)


@given(SIZES)
def test_1f1b_runs_each_item_once_after_what_it_needs_in_as_many_ticks(sizes):
    stages, micro = sizes
    ticks = item_ticks(ONE_F_ONE_B, stages, micro)
    assert set(ticks) == {(k, s, m) for k in "FB" for s in range(stages) for m in range(micro)}
    for s in range(stages):
        assert len({ticks[k, s, m] for k in "FB" for m in range(micro)}) == 2 * micro
        for m in range(micro):
            assert ticks["F", s, m] < ticks["B", s, m]
            if s:
                assert ticks["F", s - 1, m] < ticks["F", s, m]
            if s < stages - 1:
                assert ticks["B", s + 1, m] < ticks["B", s, m]
            if m:  # weight gradients add up in micro-batch order
                assert ticks["B", s, m - 1] < ticks["B", s, m]
    assert max(ticks.values()) + 1 == max(item_ticks(FILL_DRAIN, stages, micro).values()) + 1


@given(SIZES)
def test_1f1b_bounds_the_micro_batches_a_stage_holds(sizes):
    stages, micro = sizes
    for s in range(stages):
        held, most = 0, 0
        for kind, _ in stage_sequence(ONE_F_ONE_B, s, stages, micro):
            held += 1 if kind == "F" else -1
            most = max(most, held)
        assert most == min(micro, stages - s)
        assert max(0, *(m + 1 for k, m in stage_sequence(FILL_DRAIN, s, stages, micro)
                        if k == "F")) == micro
