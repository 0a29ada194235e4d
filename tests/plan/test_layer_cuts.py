"""Layer-wise cuts (convnet/plan/layer_cuts.py): the balanced cut is the best of all cuts."""

from __future__ import annotations

from itertools import combinations

import pytest

from convnet.config import load_net
from convnet.plan.layer_cuts import (balanced_cuts, layer_wise_gpus, layer_work, placed_order,
                                     stage_shares)
from tests.support.configs import reference_dims, reference_pair


@pytest.mark.parametrize("name", ["cifar10-11pct", "imagenet-1gpu"])
@pytest.mark.parametrize("stages", [2, 3])
def test_the_balanced_cut_has_the_least_busy_busiest_stage(name, stages):
    net = load_net(*reference_pair(name), data_dims=reference_dims(name),
                   num_classes=10 if name.startswith("cifar") else 1000)
    names = placed_order(net)
    best = min(max(stage_shares(net, [names[i] for i in cut]))
               for cut in combinations(range(1, len(names)), stages - 1))
    cuts = balanced_cuts(net, stages)
    assert max(stage_shares(net, cuts)) == pytest.approx(best)
    gpus = layer_wise_gpus(net, cuts)
    assert [gpus[n] for n in names] == sorted(gpus[n] for n in names)  # consecutive stages
    assert {d for (d,) in gpus.values()} == set(range(stages))


def test_a_conv_layers_work_is_its_multiply_adds():
    net = load_net(*reference_pair("cifar10-11pct"), data_dims=reference_dims("cifar10-11pct"),
                   num_classes=10)
    # conv2: 64 filters of 5x5x64 on a 12x12 map (24x24 images, pooled)
    conv2 = net["conv2"]
    assert layer_work(conv2) == conv2.attrs["modulesX"] ** 2 * 64 * 5 * 5 * 64


def test_auto_place_tries_the_balanced_split_with_several_micro_batch_counts():
    from convnet.plan.layer_cuts import PIPELINE_MICRO_BATCHES, pipeline_candidates
    from convnet.plan.planner import make_plan

    net = load_net(*reference_pair("cifar10-11pct"), data_dims=reference_dims("cifar10-11pct"),
                   num_classes=10)
    found = pipeline_candidates(net, 2)
    assert [c.micro_batches for c in found] == list(PIPELINE_MICRO_BATCHES)
    for candidate in found:
        assert candidate.gpus == layer_wise_gpus(net, balanced_cuts(net, 2))
        assert f"--micro-batches {candidate.micro_batches}" in candidate.name
        plan = make_plan(candidate.apply(net), (0, 1), 128, candidate.micro_batches)
        assert plan.micro_batches == candidate.micro_batches and plan.scheme == "model"
    assert pipeline_candidates(net, 1) == []
