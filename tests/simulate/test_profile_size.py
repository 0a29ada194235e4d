"""The automatic profile size: the largest power of two within the multiply-add budget,
chosen from the config alone; and how many rounds the profile takes."""

from __future__ import annotations

from convnet.app.prediction.profile_size import (MAX_ROUNDS, PROFILE_BUDGET_SECONDS,
                                                 PROFILE_MULTIPLY_ADDS, another_round,
                                                 automatic_size, is_large)
from convnet.config import load_net
from convnet.plan.layer_cuts import net_work
from tests.support.cli import EXAMPLES


def test_a_cheap_net_is_profiled_at_its_whole_minibatch():
    assert automatic_size(128, 700_000, 8) == 128
    assert not is_large(128, 700_000)


def test_a_costly_net_is_profiled_at_the_largest_power_of_two_within_the_budget():
    per_case = 715e6  # ImageNet at 224x224
    assert automatic_size(128, per_case, 4) == 16
    assert 16 * per_case <= PROFILE_MULTIPLY_ADDS < 32 * per_case
    assert is_large(128, per_case)


def test_never_below_the_least_nor_above_the_minibatch():
    assert automatic_size(128, 5e9, 4) == 4
    assert automatic_size(6, 5e9, 8) == 6
    per_case = PROFILE_MULTIPLY_ADDS / 62  # fits 62: 32, not 100
    assert automatic_size(100, per_case, 4) == 32


def test_the_size_comes_from_the_config():
    """The reference ImageNet net at 224x224 counts about 715 M multiply-adds a case."""
    net = load_net(EXAMPLES / "cuda-convnet2" / "layers-imagenet-1gpu.cfg",
                   EXAMPLES / "cuda-convnet2" / "layer-params-imagenet-1gpu.cfg",
                   {0: (3, 224, 224)}, 1000)
    assert 700e6 < net_work(net) < 730e6
    assert automatic_size(128, net_work(net), 4) == 16


def test_a_round_starts_only_while_it_is_expected_to_fit_the_budget():
    assert another_round(0, 100.0, 100.0)  # always one
    budget = PROFILE_BUDGET_SECONDS
    assert another_round(1, budget / 3, budget / 3)
    assert not another_round(2, budget * 0.6, budget * 0.45)
    assert not another_round(1, 1.0, budget)
    assert not another_round(MAX_ROUNDS, 0.1, 0.01)
