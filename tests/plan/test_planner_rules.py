"""Each placement and update-period rule of the planner, broken once, with the error it must give.

Every broken rule raises :class:`PlanError`; the message names the layer(s)
involved and says which rule was broken, and the error points at the section
(and key) to edit.  Each failing net has a valid twin that plans, so a test
cannot pass merely because the net is malformed in some other way.
"""

from __future__ import annotations

import pytest

from convnet.errors import ConfigError, PlanError
from convnet.plan.ops import AllReduce, Backward, Copy, Forward, GradCopy, Load, Update
from convnet.plan.planner import make_plan
from tests.support.plans import fc_net

GPUS4 = (0, 1, 2, 3)


def _head(top: str, gpu=None):
    """softmax + logreg cost on ``top`` (both on ``gpu``, default: inherited / cost's)."""
    return [("probs", "softmax", [top], None, 0),
            ("cost", "cost.logreg", ["labels", "probs"], gpu, 0)]


def plan_of(spec, gpus=GPUS4, minibatch=8):
    net = fc_net(spec)
    return net, make_plan(net, gpus, minibatch)


def plan_error(spec, gpus=GPUS4, minibatch=8) -> PlanError:
    with pytest.raises(PlanError) as info:
        make_plan(fc_net(spec), gpus, minibatch)
    return info.value


def assert_names(err: PlanError, *phrases: str) -> None:
    text = str(err)
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} missing from: {text}"


# --------------------------------------------------------------------------- distinct devices

def test_replicas_on_distinct_devices():
    err = plan_error([("fc1", "fc", ["data"], [1, 0, 1], 0)] + _head("fc1", [0, 1, 2]))
    assert_names(err, "'fc1'", "distinct devices", "1,0,1")
    assert err.section == "fc1" and err.key == "gpu"


def test_repeated_device_reported_on_the_reader_not_on_the_data_layer():
    # The data layer takes its reader's device list; the error must name the reader.
    err = plan_error([("fc1", "fc", ["data"], [0, 0], 0)])
    assert err.section == "fc1"
    assert "'data'" not in str(err)


def test_distinct_devices_valid_twin():
    plan_of([("fc1", "fc", ["data"], [1, 0, 2], 0)] + _head("fc1", [0, 1, 2]), minibatch=6)


# --------------------------------------------------------------------------- divides inputs

def test_replica_count_divides_each_input():
    spec = [("a", "fc", ["data"], [0, 1], 0),
            ("b", "fc", ["a"], [0, 1, 2], 0)]
    err = plan_error(spec)
    assert_names(err, "'b'", "'a'", "divide each input", "3 replicas", "has 2")
    assert err.section == "b"


def test_replica_count_larger_than_input_is_rejected():
    err = plan_error([("a", "fc", ["data"], [0], 0), ("b", "fc", ["a"], [0, 1], 0)])
    assert_names(err, "'b'", "'a'", "divide each input")


def test_divides_inputs_valid_twin():
    net, plan = plan_of([("a", "fc", ["data"], [0, 1, 2, 3], 0),
                         ("b", "fc", ["a"], [2, 3], 0)] + _head("b", [3, 2]))
    assert plan.layers["b"].replicas == 2


# --------------------------------------------------------------------------- equal input counts

def test_inputs_have_equal_replica_counts():
    spec = [("a", "fc", ["data"], [0, 1, 2, 3], 0),
            ("b", "fc", ["a"], [0, 1], 0),
            ("c", "eltsum", ["a", "b"], [0, 1], 0)]
    err = plan_error(spec)
    assert_names(err, "'c'", "'a'", "'b'", "inputs of a layer", "equal replica counts")
    assert err.section == "c"


def test_cost_reading_labels_and_a_differently_replicated_layer():
    # labels gets the cost's single replica; probs has two.
    spec = [("a", "fc", ["data"], [0, 1], 0), ("probs", "softmax", ["a"], None, 0),
            ("cost", "cost.logreg", ["labels", "probs"], None, 0)]
    err = plan_error(spec)
    # 'cost' has no gpu= and its first input is data: it defaults to device 0 (1 replica),
    # which divides probs' 2 but labels (1) and probs (2) differ.
    assert_names(err, "'cost'", "'labels'", "'probs'", "equal replica counts")


# --------------------------------------------------------------------------- equal consumer counts

def test_consumers_have_equal_replica_counts():
    spec = [("a", "fc", ["data"], [0, 1, 2, 3], 0),
            ("b", "fc", ["a"], [0, 1], 0),
            ("c", "fc", ["a"], [2], 0)]
    err = plan_error(spec)
    assert_names(err, "'a'", "'b'", "'c'", "consumers of a layer", "equal replica counts")


def test_two_readers_of_a_data_layer_with_different_counts():
    spec = [("a", "fc", ["data"], [0, 1], 0),
            ("b", "fc", ["data"], [2], 0)]
    err = plan_error(spec)
    assert_names(err, "'data'", "'a'", "'b'", "consumers of a layer", "equal replica counts")
    assert err.section == "b"


def test_two_readers_of_a_data_layer_on_different_devices_are_fine():
    net, plan = plan_of([("a", "fc", ["data"], [0], 0), ("b", "fc", ["data"], [1], 0),
                         ("ab", "pass", ["a", "b"], [0], 0)] + _head("ab"))
    loads = {(op.shard, op.device) for op in plan.ops if isinstance(op, Load)
             and op.layer == "data"}
    assert loads == {(0, 0), (0, 1)}


# --------------------------------------------------------------------------- divisor chain

def test_every_count_divides_the_largest():
    # Two components (one per data layer) with 2 and 3 replicas.
    spec = [("a", "fc", ["data"], [0, 1], 0), ("b", "fc", ["labels"], [0, 1, 2], 0)]
    err = plan_error(spec)
    assert_names(err, "'a'", "'b'", "divide the largest", "2 replicas", "has 3")
    assert "'data'" not in str(err) and "'labels'" not in str(err)


def test_every_count_is_a_multiple_of_the_smallest():
    # Counts 6, 2 and 3: all divide 6, but 3 is not a multiple of 2.
    spec = [("x", "fc", ["data"], list(range(6)), 0),
            ("y", "fc", ["x"], [0, 1], 0),
            ("z", "fc", ["labels"], [3, 4, 5], 0)]
    err = plan_error(spec, gpus=tuple(range(6)), minibatch=12)
    assert_names(err, "'z'", "'y'", "multiple of the smallest", "3 replicas", "has 2")


def test_divisor_chain_valid_twin():
    spec = [("x", "fc", ["data"], list(range(6)), 0),
            ("y", "fc", ["x"], [0, 1, 2], 0),
            ("z", "fc", ["labels"], [3, 4, 5], 0)]
    net, plan = plan_of(spec, gpus=tuple(range(6)), minibatch=12)
    assert (plan.num_shards, plan.num_passes, plan.rmin) == (6, 2, 3)


# --------------------------------------------------------------------------- pass layers

def test_pass_layer_has_as_many_replicas_as_its_inputs():
    spec = [("a", "fc", ["data"], [0, 1], 0), ("p", "pass", ["a"], [0], 0)]
    err = plan_error(spec)
    assert_names(err, "'p'", "'a'", "pass layer", "as many replicas as its inputs")
    assert err.section == "p"


def test_a_concat_may_gather_a_replicated_input():
    # The pass rule is about pass layers; a concat behaves like any other layer.
    plan_of([("a", "fc", ["data"], [0, 1], 0), ("p", "concat", ["a"], [0], 0)] + _head("p"))


def test_two_pass_layers_reading_one_input_on_overlapping_devices():
    spec = [("fa", "fc", ["data"], [0], 0), ("fb", "fc", ["data"], [1], 0),
            ("p1", "pass", ["fa", "fb"], [0], 0),
            ("p2", "pass", ["fa", "fb"], [0], 0)]
    err = plan_error(spec)
    assert_names(err, "'p1'", "'p2'", "'fa'", "two pass layers", "overlapping devices",
                 "device 0")
    assert err.section == "p2"


def test_two_pass_layers_reading_one_input_on_distinct_devices_are_fine():
    spec = [("fa", "fc", ["data"], [0], 0), ("fb", "fc", ["data"], [1], 0),
            ("p1", "pass", ["fa", "fb"], [0], 0),
            ("p2", "pass", ["fa", "fb"], [1], 0),
            ("s", "eltsum", ["p1", "p2"], [0], 0)] + _head("s")
    plan_of(spec)


# --------------------------------------------------------------------------- --gpu range

@pytest.mark.parametrize("bad", [2, 7, -1])
def test_device_index_past_the_gpu_list(bad):
    err = plan_error([("a", "fc", ["data"], [0, bad], 0)] + _head("a", [0, 1]), gpus=(5, 3))
    assert_names(err, "'gpu'", f"device index {bad}", "--gpu list", "2 device(s)")
    assert err.section == "a" and err.key == "gpu"


def test_empty_gpu_list_is_an_error():
    net = fc_net([("a", "fc", ["data"], [0], 0)])
    net["a"].gpu = ()
    with pytest.raises(PlanError, match=r"\[a\].*gpu= list is empty"):
        make_plan(net, (0,), 4)


def test_empty_gpu_argument_is_an_error():
    with pytest.raises(PlanError, match="--gpu"):
        make_plan(fc_net([("a", "fc", ["data"], [0], 0)]), (), 4)


# --------------------------------------------------------------------------- updatePeriod

HYBRID = [("conv", "fc", ["data"], [0, 1, 2, 3], "U_conv"),
          ("mid", "fc", ["conv"], [0, 1], "U_mid"),
          ("top", "fc", ["mid"], [0], "U_top")]


def hybrid(u_conv=0, u_mid=0, u_top=0):
    us = {"U_conv": u_conv, "U_mid": u_mid, "U_top": u_top}
    return [(n, t, i, g, us[u]) for n, t, i, g, u in HYBRID] + _head("top")


@pytest.mark.parametrize("layer,kwargs,period", [
    ("mid", {"u_mid": 1}, 2),     # T = 2, U = 1
    ("mid", {"u_mid": 3}, 2),     # not a multiple of T = 2
    ("conv", {"u_conv": 2}, 4),   # T = 4
    ("top", {"u_top": 3}, 1),     # multiple of T = 1 but does not divide P = 4
    ("top", {"u_top": 8}, 1),     # larger than P
])
def test_update_period_must_be_a_multiple_of_t_dividing_p(layer, kwargs, period):
    err = plan_error(hybrid(**kwargs))
    assert_names(err, f"[{layer}]", "updatePeriod", f"activation period {period}",
                 "divide the pass count 4")
    assert err.section == layer and err.key == "updatePeriod"


def test_negative_update_period_is_an_error():
    err = plan_error(hybrid(u_top=-1))
    assert err.section == "top" and err.key == "updatePeriod"


@pytest.mark.parametrize("u_mid,u_top,expected", [
    (0, 0, {"conv": 4, "mid": 2, "top": 1}),
    (2, 2, {"conv": 4, "mid": 2, "top": 2}),
    (4, 4, {"conv": 4, "mid": 4, "top": 4}),
    (0, 1, {"conv": 4, "mid": 2, "top": 1}),
])
def test_update_period_valid_twins(u_mid, u_top, expected):
    net, plan = plan_of(hybrid(u_mid=u_mid, u_top=u_top))
    assert {n: plan.layers[n].update_period for n in expected} == expected


def test_update_period_error_points_at_the_params_file():
    net = fc_net(hybrid(u_top=3))
    net["top"].params_file = "params.cfg"
    with pytest.raises(PlanError) as info:
        make_plan(net, GPUS4, 8)
    assert info.value.file == "params.cfg"
    assert str(info.value).startswith("params.cfg [top] key 'updatePeriod'")


# --------------------------------------------------------------------------- --mini

@pytest.mark.parametrize("mini", [6, 2, 0, -4])
def test_minibatch_must_be_a_multiple_of_rmax(mini):
    err = plan_error(hybrid(), minibatch=mini)
    assert_names(err, f"--mini {mini}", "multiple of the largest replica count 4", "'conv'")


def test_minibatch_valid_twin():
    net, plan = plan_of(hybrid(), minibatch=12)
    assert plan.shard_size == 3


# --------------------------------------------------------------------------- errors are user errors

def test_plan_errors_are_config_errors_with_exit_code_2():
    err = plan_error([("a", "fc", ["data"], [0, 0], 0)])
    assert isinstance(err, ConfigError) and err.exit_code == 2


# --------------------------------------------------------------------------- placement defaults

def test_default_device_next_to_a_data_layer_is_noted():
    net, plan = plan_of([("a", "fc", ["data"], None, 0)] + _head("a"), gpus=(3, 2))
    assert plan.layers["a"].devices == (0,)
    assert plan.layers["a"].gpu_source.startswith("default 0")
    assert any("'a'" in note and "device 0" in note for note in plan.notes)
    assert plan.layers["probs"].gpu_source == "inherited from 'a'"
    assert plan.layers["cost"].devices == (0,)  # first input 'labels' is data


def test_inherits_the_first_inputs_device_list():
    net, plan = plan_of([("a", "fc", ["data"], [2, 3], 0), ("b", "fc", ["a"], None, 0),
                         ("c", "fc", ["b"], None, 0)] + _head("c", [2, 3]))
    assert plan.layers["c"].devices == (2, 3)
    assert plan.layers["c"].gpu_source == "inherited from 'b'"
    assert plan.layers["data"].devices == (2, 3)


def test_logical_devices_map_to_the_physical_list():
    net, plan = plan_of([("a", "fc", ["data"], [0, 1], 0)] + _head("a", [0, 1]), gpus=(3, 1))
    assert plan.physical_devices == (3, 1) and plan.num_devices == 2
    assert {op.device for op in plan.ops if isinstance(op, Forward)} == {0, 1}


def test_logical_devices_sharing_a_physical_device_are_noted():
    net, plan = plan_of([("a", "fc", ["data"], [0, 1], 0)] + _head("a", [0, 1]), gpus=(0, 0))
    assert any("share physical device 0" in note for note in plan.notes)


def test_unread_data_layer_is_planned_without_devices():
    net, plan = plan_of([("a", "fc", ["data"], [0, 1], 0), ("b", "softmax", ["a"], None, 0)])
    assert plan.layers["labels"].devices == ()
    assert list(plan.layers["labels"].active_passes(plan.num_passes)) == []
    assert not any(op.layer == "labels" for op in plan.ops)
    assert plan.num_passes == 1 and plan.num_shards == 2


def test_input_listed_twice_gets_one_gradient_copy():
    net, plan = plan_of([("f", "fc", ["data"], [0, 1], 0), ("g", "eltsum", ["f", "f"], [1], 0),
                         ("cost", "cost.logreg", ["labels", "g"], [1], 0)], minibatch=4)
    pulls = [(op.layer, op.consumer, op.shard, op.dst) for op in plan.ops
             if isinstance(op, GradCopy)]
    assert pulls == [("f", "g", 0, 0)]
    copies = [(op.layer, op.shard, op.dst) for op in plan.ops if isinstance(op, Copy)]
    assert copies == [("f", 0, 1)]


def test_layers_without_a_path_to_a_cost_get_no_backward():
    net, plan = plan_of([("a", "fc", ["data"], [0], 0), ("side", "fc", ["a"], None, 0),
                         ("probs", "softmax", ["a"], None, 0),
                         ("cost", "cost.logreg", ["labels", "probs"], None, 0)])
    assert plan.layers["a"].needs_backward and not plan.layers["side"].needs_backward
    assert not any(op.layer == "side" and isinstance(op, (Backward, Update, AllReduce))
                   for op in plan.ops)
    assert sum(isinstance(op, Forward) and op.layer == "side" for op in plan.ops) == 1


def test_layers_below_the_first_weight_layer_get_no_backward():
    net, plan = plan_of([("p", "pass", ["data"], [0], 0), ("a", "fc", ["p"], None, 0)]
                        + _head("a"))
    assert not plan.layers["p"].needs_backward
    assert plan.layers["a"].input_grads == (False,)
    assert not any(isinstance(op, Backward) and op.layer == "p" for op in plan.ops)


# --------------------------------------------------------------------------- scheme names

@pytest.mark.parametrize("spec,scheme", [
    ([("a", "fc", ["data"], [0], 0), ("b", "fc", ["a"], None, 0)], "single"),
    ([("a", "fc", ["data"], [0, 1], 0), ("b", "fc", ["a"], [0, 1], 0)], "data"),
    ([("a", "fc", ["data"], [0], 0), ("b", "fc", ["data"], [1], 0),
      ("ab", "pass", ["a", "b"], [0], 0)], "model"),
    # a pipeline (no siblings) still spreads the net over two devices
    ([("a", "fc", ["data"], [0], 0), ("b", "fc", ["a"], [1], 0)], "model"),
    ([("a", "fc", ["data"], [0, 1], 0), ("b", "fc", ["a"], [1, 0], 0),
      ("c", "fc", ["b"], [0], 0), ("d", "fc", ["b"], [1], 0)], "hybrid"),
])
def test_net_scheme_names(spec, scheme):
    net, plan = plan_of(spec + _head(spec[-1][0], spec[-1][3]))
    assert plan.scheme == scheme


def test_used_devices_leave_out_what_no_gpu_list_names():
    """--gpu gives 4 logical devices; layers on 1 and 3 only leave 0 and 2 idle."""
    _, plan = plan_of([("fc1", "fc", ["data"], [3], 0), ("fc2", "fc", ["fc1"], [1], 0),
                       *_head("fc2", gpu=[1])])
    assert plan.num_devices == 4 and plan.used_devices == (1, 3)
