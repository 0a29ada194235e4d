"""The verdict's rule: a clear winner only beyond the rounds' noise (synthetic timings)."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convnet.app.comparison.noise import (CONFIDENCE, DEFAULT_MIN_LEAD, MIN_ROUNDS, decide,
                                          interval_order, median_interval, pair, spread)


def coverage(rounds: int, k: int) -> float:
    """Exact coverage of [k-th smallest, k-th largest] for the median (binomial)."""
    return 1 - 2 * sum(math.comb(rounds, j) for j in range(k)) / 2 ** rounds


def test_interval_order_is_the_widest_coverage_above_the_confidence():
    assert MIN_ROUNDS == 6  # 1 - 2/64 = 96.9%; five rounds give at most 93.8%
    for rounds in range(1, 40):
        k = interval_order(rounds)
        if k is None:
            assert coverage(rounds, 1) < CONFIDENCE
        else:
            assert coverage(rounds, k) >= CONFIDENCE
            assert k == rounds // 2 or coverage(rounds, k + 1) < CONFIDENCE


def test_a_winner_of_every_round_by_a_margin_is_clear():
    x = [0.010, 0.011, 0.010, 0.012, 0.010, 0.010, 0.011, 0.010, 0.010, 0.010]
    y = [t * 1.25 for t in x]
    verdict = decide({"b": y, "a": x})
    decision = verdict.first
    assert (decision.fastest, decision.runner_up, verdict.clear) == ("a", "b", True)
    assert decision.ratio == pytest.approx(1.25)
    assert verdict.text().startswith("a is fastest, 1.25x b, clear")


def test_a_machine_wide_slow_phase_does_not_hide_a_winner():
    """Interleaved rounds pair the configs: a phase that slows every config 3x in some
    rounds moves both sides of each round's ratio alike."""
    phase = [1, 1, 3, 3, 1, 2.5, 1, 1, 3, 1]
    x = [0.010 * p for p in phase]
    y = [0.0108 * p for p in phase]
    verdict = decide({"a": x, "b": y}, min_lead=0.0)
    assert verdict.clear and verdict.first.ratio == pytest.approx(1.08)
    # unpaired, each config's own spread is huge
    assert spread(x) > 0.5


def test_equal_configs_under_noise_give_no_clear_winner():
    rng = random.Random(4)
    x = [0.01 * rng.uniform(0.8, 1.2) for _ in range(10)]
    y = [0.01 * rng.uniform(0.8, 1.2) for _ in range(10)]
    verdict = decide({"a": x, "b": y}, min_lead=0.0)
    assert not verdict.clear
    text = verdict.text()
    # named in the order given, whichever came first by median
    assert text.startswith("no clear winner between a and b (within this machine's noise; ")
    ratios = [b / a for a, b in zip(x, y)] if verdict.first.fastest == "a" else \
        [a / b for a, b in zip(x, y)]
    assert text.endswith(f"the ratios' spread ±{100 * spread(ratios):.1f}%)")


def test_every_config_within_the_noise_of_the_fastest_is_named():
    """a and c are within noise of each other, b is clearly slower: the verdict names a
    and c, in the order given, whichever of them won by median."""
    rng = random.Random(7)
    base = [0.01 * rng.uniform(0.9, 1.1) for _ in range(10)]
    a = [t * rng.uniform(0.9, 1.1) for t in base]
    c = [t * rng.uniform(0.9, 1.1) for t in base]
    b = [t * 1.6 for t in base]
    verdict = decide({"a": a, "b": b, "c": c})
    assert verdict.tied == ("a", "c") and not verdict.clear
    assert verdict.text().startswith("no clear winner between a and c (")
    assert decide({"c": c, "b": b, "a": a}).tied == ("c", "a")


def test_a_lead_beyond_the_noise_but_under_the_least_lead_is_a_tie():
    """A 5% lead in every one of 20 rounds is beyond the noise, but under the 10% that
    repeats from run to run on a shared machine: a tie by default, clear with
    --min-lead 0, and a 25% lead is clear either way."""
    rng = random.Random(3)
    x = [0.01 * rng.uniform(0.95, 1.05) for _ in range(20)]
    y = [t * 1.05 * rng.uniform(0.99, 1.01) for t in x]
    tie = decide({"a": x, "b": y})
    assert DEFAULT_MIN_LEAD == 0.10 and tie.first.interval[0] > 1.0 and not tie.clear
    assert tie.text().startswith("no clear winner between a and b (no lead of 10% or more "
                                 "beyond this machine's noise; ")
    assert decide({"a": x, "b": y}, min_lead=0.0).clear
    assert not decide({"a": x, "b": y}, min_lead=0.06).clear
    z = [t * 1.25 for t in x]
    assert decide({"a": x, "z": z}).clear and decide({"a": x, "z": z}, min_lead=0.2).clear
    assert not decide({"a": x, "z": z}, min_lead=0.3).clear


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.001, 1.0), min_size=MIN_ROUNDS, max_size=20),
       st.floats(1.0, 3.0), st.floats(0.0, 1.0))
def test_a_clear_winner_leads_by_more_than_the_least_lead_in_its_whole_interval(
        x, factor, lead):
    decision = pair("a", x, "b", [t * factor for t in x], lead)
    assert decision.clear == (decision.interval[0] > 1.0 + lead)
    if decision.clear:
        assert decision.ratio > 1.0 + lead


def test_too_few_rounds_never_call_a_winner_clear():
    verdict = decide({"a": [1.0] * 5, "b": [2.0] * 5})
    assert verdict.first.interval is None and not verdict.clear
    assert f"--rounds {MIN_ROUNDS}" in verdict.text()
    assert decide({"a": [1.0]}) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=1, max_size=25))
def test_the_interval_holds_the_median_and_comes_from_the_values(values):
    interval = median_interval(values)
    if len(values) < MIN_ROUNDS:
        assert interval is None
        return
    low, high = interval
    ordered = sorted(values)
    median = (ordered[(len(values) - 1) // 2] + ordered[len(values) // 2]) / 2
    assert low in values and high in values and low <= median <= high


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.001, 1.0), min_size=MIN_ROUNDS, max_size=20),
       st.floats(1.0, 3.0))
def test_a_clear_winner_won_at_least_most_rounds(x, factor):
    y = [t * factor for t in x]
    decision = pair("a", x, "b", y)
    assert decision.ratio == pytest.approx(factor)
    assert decision.clear == (factor > 1.0 and decision.interval[0] > 1.0)
    if decision.clear:
        assert decision.wins > len(x) // 2


def test_the_fastest_is_ahead_in_the_paired_rounds_not_merely_the_lowest_median():
    """On a machine whose speed moves in phases a config can have the lower median and
    still lose most rounds: b's median is 12 ms against a's 30, yet a was faster in 16
    of 20 rounds, so a is the one ahead, and the verdict says so."""
    a = [0.010] * 8 + [0.030] * 4 + [0.030] * 8
    b = [0.011] * 8 + [0.012] * 4 + [0.031] * 8
    assert statistics.median(b) < statistics.median(a)
    verdict = decide({"a": a, "b": b})
    assert (verdict.first.fastest, verdict.first.wins) == ("a", 16)
    assert verdict.first.ratio >= 1.0 and not verdict.clear  # 3%: under the least lead
    assert "median of the round ratios: a 1.03x b, faster in 16 of 20 rounds" in \
        verdict.text()


def test_the_verdicts_spread_is_the_spread_columns_measure_of_the_ratios():
    rng = random.Random(5)
    x = [0.01 * rng.uniform(0.7, 1.3) for _ in range(20)]
    y = [t * rng.uniform(0.97, 1.03) for t in x]
    duel = pair("a", x, "b", y)
    assert duel.noise == spread([b / a for a, b in zip(x, y)])
    assert spread(x) > 3 * duel.noise  # the machine's phases cancel in the ratios
