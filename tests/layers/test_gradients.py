"""Finite-difference checks (float64) of every layer type and every neuron."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.config.layer_types.table import LAYER_TYPES
from convnet.kernels.conv import choice as conv_choice
from convnet.kernels.neurons import NEURONS
from convnet.layers.base import Context

from tests.support.layers import (NEURON_SPECS, POSITIVE_DOMAIN, conv_def, fc_def, fd_check,
                                  norm_def, pool_def, random_inputs, simple_def)


def test_every_neuron_is_covered():
    assert set(NEURON_SPECS) == set(NEURONS)


@pytest.mark.parametrize("name", sorted(NEURON_SPECS))
def test_neuron_layer(name):
    ldef = simple_def("neuron", [(4, 3, 3)], neuron_=NEURON_SPECS[name])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 3, 3))
    if name in POSITIVE_DOMAIN:
        x = np.abs(x) + 0.2
    fd_check(ldef, [x])


@pytest.mark.parametrize("name", sorted(NEURON_SPECS))
def test_inline_neuron(name):
    """The inline neuron= of a layer is part of its forward and backward."""
    spec = NEURON_SPECS[name]
    if name in POSITIVE_DOMAIN:  # an eltsum of positive inputs stays positive
        ldef = simple_def("eltsum", [(6,), (6,)], neuron_=spec, attrs={"coeffs": [1.0, 0.5]})
        fd_check(ldef, random_inputs(ldef, positive=True))
    else:
        ldef = fc_def(in_shapes=((2, 2, 2),), outputs=5, neuron_=spec)
        fd_check(ldef, random_inputs(ldef))


# ------------------------------------------------------------------ conv / local

CONV_CASES = {
    "plain": dict(in_shapes=((3, 6, 6),), fs=3, padding=1, stride=1),
    "stride_overhang": dict(in_shapes=((2, 7, 7),), fs=3, padding=1, stride=2),  # 4 windows, last past edge
    "no_pad_ceil": dict(in_shapes=((2, 6, 6),), fs=3, padding=0, stride=2),       # 3 windows, last past edge
    "groups2": dict(in_shapes=((4, 5, 5),), filters=6, groups=2),
    # stride 1 with a Winograd tile: 5x5 filters, a last tile past the map, two inputs
    "five_groups2": dict(in_shapes=((4, 7, 7),), filters=4, groups=2, fs=5, padding=2),
    "tile_overhang": dict(in_shapes=((2, 5, 5),), fs=3, padding=1, stride=1),
    "two_inputs_stride1": dict(in_shapes=((3, 6, 6), (2, 8, 8)), fs=[3, 3], padding=[1, 0],
                               stride=[1, 1], filters=4),
    "groups3": dict(in_shapes=((6, 5, 5),), filters=3, groups=3, fs=2, padding=0),
    "unshared_bias": dict(in_shapes=((3, 5, 5),), shared_biases=False, neuron_="tanh[1,1]"),
    "multi_input": dict(in_shapes=((3, 6, 6), (2, 5, 5)), fs=[3, 4], padding=[1, 2], stride=[1, 1],
                        filters=4),
    "multi_input_groups": dict(in_shapes=((4, 6, 6), (2, 3, 3)), fs=[3, 1], padding=[0, 0],
                               stride=[2, 1], groups=[2, 1], filters=4, neuron_="relu"),
}


@pytest.mark.parametrize("layout", ["nchw", "chwn", "cases", "winograd"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv(case, layout, monkeypatch):
    monkeypatch.setattr(conv_choice, "LAYOUT", layout)
    ldef = conv_def(**CONV_CASES[case])
    fd_check(ldef, random_inputs(ldef, batch=2))


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_local(case):
    kw = dict(CONV_CASES[case])
    kw.pop("shared_biases", None)
    ldef = conv_def(type_="local", **kw)
    fd_check(ldef, random_inputs(ldef, batch=2))


FC_CASES = {
    "flat": dict(in_shapes=((5,),), outputs=3),
    "image_input": dict(in_shapes=((2, 3, 3),), outputs=4, neuron_="logistic"),
    "multi_input": dict(in_shapes=((5,), (2, 2, 2), (3,)), outputs=4),
}


@pytest.mark.parametrize("case", sorted(FC_CASES))
def test_fc(case):
    ldef = fc_def(**FC_CASES[case])
    fd_check(ldef, random_inputs(ldef))


# ----------------------------------------------------------------------- pooling

POOL_CASES = {
    "overhang": dict(in_shape=(3, 8, 8), size=3, stride=2, start=0),       # last window 6..8
    "start_negative": dict(in_shape=(2, 7, 7), size=3, stride=2, start=-1),
    "start_negative_big": dict(in_shape=(2, 6, 6), size=4, stride=3, start=-2),
    "start_positive": dict(in_shape=(2, 7, 7), size=2, stride=2, start=1),
    "stride_equals_size": dict(in_shape=(2, 7, 7), size=3, stride=3, start=0),
    "given_outputs": dict(in_shape=(2, 6, 6), size=2, stride=2, start=0, outputs_x=2),
}


@pytest.mark.parametrize("pool", ["max", "avg", "maxabs"])
@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pool(pool, case):
    ldef = pool_def(pool=pool, **POOL_CASES[case])
    fd_check(ldef, random_inputs(ldef))


# ------------------------------------------------------------------ normalisation

@pytest.mark.parametrize("kind", ["cmrnorm", "rnorm", "cnorm"])
@pytest.mark.parametrize("size,pow_,min_div", [(3, 0.75, 1.0), (4, 0.5, 2.0), (5, 1.3, 0.7)])
def test_norm(kind, size, pow_, min_div):
    ldef = norm_def(kind, in_shape=(6, 5, 5), size=size, pow_=pow_, min_div=min_div,
                    scale=2.0)
    fd_check(ldef, random_inputs(ldef, batch=2))


def test_norm_with_inline_neuron():
    ldef = norm_def("cmrnorm", neuron_="relu")
    fd_check(ldef, random_inputs(ldef, batch=2))


# ----------------------------------------------------------------- softmax, costs

def test_softmax():
    ldef = simple_def("softmax", [(5,)])
    fd_check(ldef, random_inputs(ldef, batch=4))


@pytest.mark.parametrize("topk,coeff", [(1, 1.0), (3, 0.5)])
def test_logreg(topk, coeff):
    ldef = simple_def("cost.logreg", [(1,), (5,)], out_shape=(1,),
                      params={"coeff": coeff, "topk": topk})
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 5, size=(6, 1)).astype(np.float64)
    probs = rng.random((6, 5)) + 0.1
    probs /= probs.sum(axis=1, keepdims=True)
    errs = fd_check(ldef, [labels, probs])
    assert "in0" not in errs and "in1" in errs  # labels are not differentiable


def test_softmax_then_logreg_through_softmax():
    """The usual pair: the gradient through softmax of -log p[label] is p - onehot."""
    from convnet.layers import build_layer
    ctx = Context()
    sm = build_layer(simple_def("softmax", [(4,)]))
    cost = build_layer(simple_def("cost.logreg", [(1,), (4,)], out_shape=(1,)))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4))
    labels = np.array([[0], [3], [1], [1], [2]], dtype=np.float64)
    p, st = sm.forward([x], {}, ctx)
    c, cst = cost.forward([labels, p], {}, ctx)
    (_, gp), _ = cost.backward(None, [labels, p], c, {}, cst, ctx, [False, True])
    (gx,), _ = sm.backward(gp, [x], p, {}, st, ctx, [True])
    onehot = np.eye(4)[labels.ravel().astype(int)]
    np.testing.assert_allclose(gx, p - onehot, atol=1e-12)


@pytest.mark.parametrize("coeff", [1.0, 0.3])
def test_crossent(coeff):
    ldef = simple_def("cost.crossent", [(4,), (4,)], out_shape=(1,), params={"coeff": coeff})
    rng = np.random.default_rng(3)
    labels = rng.random((5, 4))
    labels /= labels.sum(axis=1, keepdims=True)
    probs = rng.random((5, 4)) + 0.1
    probs /= probs.sum(axis=1, keepdims=True)
    errs = fd_check(ldef, [labels, probs])
    assert {"in0", "in1"} <= set(errs)


@pytest.mark.parametrize("pos_weight", [1.0, 2.5])
def test_bce(pos_weight):
    ldef = simple_def("cost.bce", [(3,), (3,)], out_shape=(1,),
                      params={"coeff": 0.7, "posWeight": pos_weight})
    rng = np.random.default_rng(4)
    fd_check(ldef, [rng.random((5, 3)), rng.uniform(0.05, 0.95, (5, 3))])


def test_sum2():
    ldef = simple_def("cost.sum2", [(2, 3, 3)], out_shape=(1,), params={"coeff": 0.25})
    fd_check(ldef, random_inputs(ldef))


# ------------------------------------------------------------------------ dropout

@pytest.mark.parametrize("type_", ["dropout", "dropout2"])
@pytest.mark.parametrize("train,enable", [(True, True), (False, True), (True, False)])
def test_dropout(type_, train, enable):
    """Masks are a function of the context, so a fixed context fixes the mask."""
    ldef = simple_def(type_, [(5, 2, 2)], params={"keep": 0.6, "enable": enable},
                      neuron_="tanh[1,1]")
    ctx = Context(train=train, seed=11, step=3, case_offset=4)
    fd_check(ldef, random_inputs(ldef, batch=4), ctx=ctx)


# --------------------------------------------------------------- combining layers

@pytest.mark.parametrize("type_", ["pass", "concat"])
def test_concat(type_):
    ldef = simple_def(type_, [(2, 3, 3), (3, 3, 3), (4,)], out_shape=(2 * 9 + 27 + 4,),
                      neuron_="logistic")
    fd_check(ldef, random_inputs(ldef))


def test_pass_single_input():
    ldef = simple_def("pass", [(2, 3, 3)], neuron_="softrelu")
    fd_check(ldef, random_inputs(ldef))


def test_eltsum():
    ldef = simple_def("eltsum", [(3, 2, 2), (3, 2, 2), (3, 2, 2)],
                      attrs={"coeffs": [1.0, -0.5, 2.0]})
    fd_check(ldef, random_inputs(ldef))


def test_eltmax():
    ldef = simple_def("eltmax", [(3, 2, 2), (3, 2, 2), (3, 2, 2)], neuron_="square")
    fd_check(ldef, random_inputs(ldef))


@pytest.mark.parametrize("in_shape,stride,out_shape", [
    ((6, 3, 3), 2, (3, 3, 3)), ((6, 3, 3), None, (1, 3, 3)), ((8,), 4, (2,))])
def test_sum(in_shape, stride, out_shape):
    attrs = {} if stride is None else {"stride": stride}
    ldef = simple_def("sum", [in_shape], out_shape=out_shape, attrs=attrs)
    errs = fd_check(ldef, random_inputs(ldef))
    assert "in0" in errs


def test_every_layer_type_has_a_gradient_test():
    tested = {"neuron", "conv", "local", "fc", "pool", "cmrnorm", "rnorm", "cnorm", "softmax",
              "cost.logreg", "cost.crossent", "cost.bce", "cost.sum2", "dropout", "dropout2",
              "pass", "concat", "eltsum", "eltmax", "sum",
              "bnorm"}  # tests/layers/test_batch_norm.py
    assert set(LAYER_TYPES) - {"data"} == tested
