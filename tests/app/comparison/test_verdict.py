"""The verdict's extra lines from synthetic rounds: efficiency above 100% explained, and the
simulator's ranking set beside the measured one."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest

from convnet.app.comparison.noise import paired_steps
from convnet.app.comparison.verdict import (prediction_lines, speedup, superlinear_notes,
                                           verdict_lines)


def config(name, devices, rounds, predicted=None):
    median = statistics.median(rounds)
    return SimpleNamespace(name=name, devices_used=devices, round_seconds=rounds,
                           median_step_seconds=median, images_per_sec=64 / median,
                           predicted_seconds=predicted, scheme="data", copy_bytes=0,
                           allreduce_bytes=0, is_async=False, times=[])


def test_efficiency_above_100_within_the_noise_is_flagged_as_such():
    single = config("single", 1, [0.020, 0.030, 0.018, 0.040, 0.020, 0.025, 0.019, 0.035])
    data = config("data", 2, [0.010, 0.011, 0.015, 0.009, 0.008, 0.012, 0.009, 0.011])
    [note] = superlinear_notes([single, data])
    assert note.startswith("efficiency above 100%: data ")
    assert "not beyond this machine's noise" in note and "read it as at most 100%" in note


def test_efficiency_above_100_beyond_the_noise_is_called_superlinear():
    single = config("single", 1, [0.030] * 8)
    data = config("data", 2, [0.012, 0.0125, 0.012, 0.0122, 0.0121, 0.012, 0.0124, 0.012])
    [note] = superlinear_notes([single, data])
    assert "beyond the noise" in note and "superlinear" in note
    slower = config("data", 2, [0.016] * 8)  # 94%: nothing to explain
    assert superlinear_notes([single, slower]) == []


def test_the_predicted_ranking_stands_beside_the_measured_one():
    a = config("a", 1, [0.03] * 6, predicted=0.031)
    b = config("b", 2, [0.02] * 6, predicted=0.025)
    c = config("c", 2, [0.025] * 6, predicted=0.020)
    lines = prediction_lines([a, b, c])
    assert lines[0].endswith("c 20.00 ms < b 25.00 ms < a 31.00 ms")
    assert lines[1].endswith("b 20.00 ms < c 25.00 ms < a 30.00 ms")
    assert lines[2] == "the prediction disagrees with the measurement: it ranks c before b"
    c.predicted_seconds = 0.028
    assert len(prediction_lines([a, b, c])) == 2  # the same order: no disagreement line
    a.predicted_seconds = b.predicted_seconds = None
    assert prediction_lines([a, b, c]) == []  # one prediction ranks nothing


def test_no_line_calls_fastest_a_config_that_lost_most_rounds():
    """The lower median (b) lost 16 of 20 rounds to a: the winner line names a, and the
    speedups read the rounds paired, so b's is below 1 where it lost most rounds."""
    a = config("a", 1, [0.010] * 8 + [0.030] * 12)
    b = config("b", 2, [0.011] * 8 + [0.012] * 4 + [0.031] * 8)
    assert b.images_per_sec > a.images_per_sec  # what the unpaired medians would say
    steps = paired_steps({"a": a.round_seconds, "b": b.round_seconds})
    for r in (a, b):  # as compare sets them
        r.median_step_seconds = steps[r.name]
        r.images_per_sec = 64 / steps[r.name]
    lines = verdict_lines([a, b], str)  # a 3% lead: under the least lead of 10%
    assert lines[1].startswith("ahead in the rounds, within the noise: a (")
    assert speedup(b, a) < 1.0 and speedup(a, a) == 1.0
    assert steps["b"] / steps["a"] == pytest.approx(31 / 30)  # b's median ratio to a
