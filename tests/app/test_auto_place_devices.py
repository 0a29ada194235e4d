"""--auto-place's devices and candidates: 0..N-1 without --gpu, the first N of a longer
list; hybrid configs with pass layers ranked too; every refused candidate listed with
its reason, those that do not fit in memory dropped before any profile; and training
without --gpu uses as many devices as the config names."""

from __future__ import annotations

import pytest

from convnet.app import options as options_module
from convnet.app.command_line.parser import build_parser
from convnet.app.options import resolve_options
from convnet.app.prediction import auto_place
from convnet.app.run.memory_limits import HostLimit
from convnet.config import load_net
from convnet.errors import DeviceError, PlanError
from convnet.plan.layer_cuts import pipeline_candidates
from convnet.plan.placements import candidates
from convnet.plan.planner import make_plan
from tests.support.cli import EXAMPLES, HYBRID_DEF, HYBRID_PARAMS, SINGLE_DEF, SINGLE_PARAMS

REFERENCE = EXAMPLES / "cuda-convnet2"
DATA_MODEL = (REFERENCE / "layers-imagenet-4gpu-data-model.cfg",
              REFERENCE / "layer-params-imagenet-4gpu-data-model.cfg")
SMALL_IMAGENET = ["--data-provider", "dummy", "--data-dims", "3x52x52", "--num-classes",
                  "1000", "--mini", "8"]


def _opts(*argv):
    return resolve_options(build_parser().parse_args([str(a) for a in argv]))


def test_auto_place_without_gpu_uses_0_to_n_minus_1_and_a_longer_list_its_first_n():
    base = ["--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS]
    assert _opts(*base, "--auto-place", "2").gpu == (0, 1)
    assert _opts(*base, "--auto-place", "2", "--gpu", "3,2,1,0").gpu == (3, 2)


def test_training_without_gpu_uses_the_devices_the_config_names():
    assert _opts("--layer-def", HYBRID_DEF, "--layer-params", HYBRID_PARAMS).gpu == (0, 1)
    assert _opts("--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS).gpu == (0,)
    assert _opts("--layer-def", DATA_MODEL[0], "--layer-params", DATA_MODEL[1],
                 *SMALL_IMAGENET).gpu == (0, 1, 2, 3)


def _imagenet_net():
    return load_net(*DATA_MODEL, data_dims={0: (3, 52, 52), 1: (1,)}, num_classes=1000)


def test_the_hybrid_reference_config_gets_valid_candidates_on_its_four_devices():
    net = _imagenet_net()
    valid = []
    for candidate in candidates(net, 4):
        try:
            make_plan(candidate.apply(net), (0, 1, 2, 3), 16)
            valid.append(candidate.name)
        except PlanError:
            pass
    assert "as written" in valid
    # the family's pass layers go round-robin: the concatenating pass1a..d on 0..3
    assert any(name.startswith("conv data-parallel, towers model-parallel") for name in valid)
    rest = next(c for c in candidates(net, 4) if c.name.startswith("conv data-parallel, rest on 0"))
    assert [rest.gpus[f"pass1{t}"] for t in "abcd"] == [(0,), (1,), (2,), (3,)]


def test_every_refused_candidate_is_named_with_its_reason(monkeypatch):
    """On 2 devices the four pass layers that concatenate the towers cannot sit apart:
    the error names every candidate and the devices the config itself needs."""
    monkeypatch.setattr(auto_place, "measure_cost_models", _no_profile)
    opts = _opts("--layer-def", DATA_MODEL[0], "--layer-params", DATA_MODEL[1],
                 *SMALL_IMAGENET, "--auto-place", "2")
    net = auto_place.assembly.load_net_for(opts)
    with pytest.raises(PlanError) as caught:
        auto_place.rank(opts, net)
    text = str(caught.value)
    assert "try --auto-place 4" in text
    for candidate in candidates(net, 2):
        assert f"{candidate.name}: not a valid plan: " in text


def _no_profile(*args, **kwargs):
    raise AssertionError("a candidate was profiled")


def test_candidates_that_do_not_fit_are_dropped_before_any_profile(monkeypatch):
    from convnet.app.run import memory_fit

    opts = _opts("--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS, "--auto-place", "2")
    net = auto_place.assembly.load_net_for(opts)
    kept, refused = auto_place.screen(opts, net)
    assert len(kept) == len(candidates(net, 2)) + len(pipeline_candidates(net, 2))
    assert refused == []
    # between the smallest and the largest need: some fit, the others are listed
    needs = sorted(sum(pool.needed for pool in memory_fit.memory_pools(
        plan, candidate.apply(net), "cpu", shared=memory_fit.weight_sharing(
            plan, candidate.apply(net), "cpu", "sync", 1))) for candidate, plan in kept)
    assert needs[0] < needs[-1]
    monkeypatch.setattr(memory_fit, "host_limit", lambda: HostLimit(needs[0], "a test's limit"))
    kept, refused = auto_place.screen(opts, net)
    assert kept and refused
    assert all(why.startswith("does not fit in memory: the plan needs about ")
               for _, why in refused)
    monkeypatch.setattr(memory_fit, "host_limit", lambda: HostLimit(1, "a test's limit"))
    monkeypatch.setattr(auto_place, "measure_cost_models", _no_profile)
    with pytest.raises(DeviceError, match="no placement of the net on 2 devices is left"):
        auto_place.rank(opts, net)


def test_default_gpus_read_the_config_once_more_only_in_one_process(monkeypatch):
    monkeypatch.setattr(options_module.launch, "process_count", lambda: 2)
    assert _opts("--layer-def", HYBRID_DEF, "--layer-params", HYBRID_PARAMS).gpu == (0,)
