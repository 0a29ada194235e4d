"""The automatic profile size: the largest power of two whose step fits the budget."""

from __future__ import annotations

from convnet.app.prediction.profile_size import STEP_BUDGET_SECONDS, automatic_size


def test_a_cheap_net_is_profiled_at_its_whole_minibatch():
    assert automatic_size(128, 8, 0.001, 8) == 128


def test_a_costly_net_is_profiled_at_the_largest_power_of_two_within_the_budget():
    per_case = 0.01  # 0.25 s fits 25 cases: 16
    assert automatic_size(128, 4, 4 * per_case, 4) == 16
    assert 16 * per_case <= STEP_BUDGET_SECONDS < 32 * per_case


def test_never_below_the_probe_nor_above_the_minibatch():
    assert automatic_size(128, 4, 3.0, 4) == 4  # ImageNet at 224x224: a few images
    assert automatic_size(6, 4, 3.0, 8) == 6
    assert automatic_size(100, 4, 4 * 0.004, 4) == 32  # fits 62: 32, not 100
