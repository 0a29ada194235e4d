"""Forward semantics of the layers against naive per-pixel references written
straight from cuda-convnet2's definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from convnet.config.layer_types.table import LAYER_TYPES
from convnet.config.model import LayerDef
from convnet.kernels import conv as kconv
from convnet.kernels.conv import choice as conv_choice
from convnet.kernels.conv import geometry as conv_geometry
from convnet.layers import build_layer, layer_class
from convnet.layers.base import Context, Layer

from tests.support.layers import (conv_def, fc_def, norm_def, params_for, pool_def, random_inputs,
                                  simple_def)

CTX = Context()


def run(ldef, inputs, params=None, ctx=CTX):
    layer = build_layer(ldef)
    params = params_for(layer) if params is None else params
    return layer.forward(inputs, params, ctx)[0], params


# ---------------------------------------------------------------- references

def ref_conv(xs, ws, b, attrs, local=False):
    """Loops over output pixels; windows past the padded edge read zeros."""
    n = xs[0].shape[0]
    m, filters = attrs["modulesX"], attrs["filters"]
    y = np.zeros((n, filters, m, m))
    for i, (x, w) in enumerate(zip(xs, ws)):
        fs, p, s, g = (attrs[k][i] for k in ("filterSize", "padding", "stride", "groups"))
        c = x.shape[1]
        big = np.zeros((n, c, x.shape[2] + 2 * p + fs + s, x.shape[3] + 2 * p + fs + s))
        big[:, :, p:p + x.shape[2], p:p + x.shape[3]] = x
        cg, fg = c // g, filters // g
        for oy in range(m):
            for ox in range(m):
                patch = big[:, :, oy * s:oy * s + fs, ox * s:ox * s + fs]
                wk = w[oy * m + ox] if local else w
                for gi in range(g):
                    pg = patch[:, gi * cg:(gi + 1) * cg].reshape(n, -1)
                    wg = wk[gi * fg:(gi + 1) * fg].reshape(fg, -1)
                    y[:, gi * fg:(gi + 1) * fg, oy, ox] += pg @ wg.T
    return y + (b.reshape(1, -1, 1, 1) if b.ndim == 1 else b[None])


def ref_pool(x, kind, size, stride, start, outputs):
    n, c, s, _ = x.shape
    y = np.zeros((n, c, outputs, outputs))
    for oy in range(outputs):
        for ox in range(outputs):
            y0, x0 = start + oy * stride, start + ox * stride
            win = x[:, :, max(y0, 0):min(y0 + size, s), max(x0, 0):min(x0 + size, s)]
            win = win.reshape(n, c, -1)
            if win.shape[2] == 0:
                continue
            if kind == "max":
                y[:, :, oy, ox] = win.max(axis=2)
            elif kind == "avg":
                y[:, :, oy, ox] = win.mean(axis=2)
            else:
                pick = np.abs(win).argmax(axis=2)
                y[:, :, oy, ox] = np.take_along_axis(win, pick[..., None], axis=2)[..., 0]
    return y


def ref_norm(x, kind, size, scale, pow_, min_div):
    n, c, s, _ = x.shape
    h = size // 2
    y = np.zeros_like(x)
    if kind == "cmrnorm":
        for ch in range(c):
            lo, hi = max(ch - h, 0), min(ch - h + size, c)
            d = min_div + scale / size * (x[:, lo:hi] ** 2).sum(axis=1)
            y[:, ch] = x[:, ch] * d ** -pow_
        return y
    src = x
    if kind == "cnorm":
        src = np.zeros_like(x)
        for py in range(s):
            for px in range(s):
                win = x[:, :, max(py - h, 0):min(py - h + size, s), max(px - h, 0):min(px - h + size, s)]
                src[:, :, py, px] = x[:, :, py, px] - win.mean(axis=(2, 3))
    for py in range(s):
        for px in range(s):
            win = src[:, :, max(py - h, 0):min(py - h + size, s), max(px - h, 0):min(px - h + size, s)]
            d = min_div + scale / size ** 2 * (win ** 2).sum(axis=(2, 3))
            y[:, :, py, px] = x[:, :, py, px] * d ** -pow_
    return y


# ------------------------------------------------------------------- tests

@pytest.mark.parametrize("type_", ["conv", "local"])
@pytest.mark.parametrize("kw", [
    dict(in_shapes=((3, 7, 7),), fs=3, padding=1, stride=2),
    dict(in_shapes=((2, 6, 6),), fs=4, padding=0, stride=3),
    dict(in_shapes=((4, 5, 5),), filters=6, groups=2, fs=2, padding=1, stride=2),
    dict(in_shapes=((3, 6, 6), (2, 4, 4)), fs=[3, 1], padding=[1, 0], stride=[2, 1], filters=4),
])
@pytest.mark.parametrize("layout", ["nchw", "chwn", "cases", "winograd"])
def test_conv_and_local_match_reference(type_, kw, layout, monkeypatch):
    monkeypatch.setattr(conv_choice, "LAYOUT", layout)
    ldef = conv_def(type_=type_, **kw)
    xs = random_inputs(ldef, batch=2)
    y, p = run(ldef, xs)
    ws = [p[f"W{i}"] for i in range(len(xs))]
    np.testing.assert_allclose(y, ref_conv(xs, ws, p["b"], ldef.attrs, local=type_ == "local"),
                               rtol=1e-10, atol=1e-12)


def test_conv_unshared_biases_and_ceil_rule_sizes():
    ldef = conv_def(in_shapes=((2, 8, 8),), fs=3, padding=0, stride=2, shared_biases=False)
    assert ldef.attrs["modulesX"] == 1 + math.ceil((8 - 3) / 2) == 4
    layer = build_layer(ldef)
    p = layer.init_params(np.random.default_rng(0))
    assert p["b"].shape == (4, 4, 4)
    xs = random_inputs(ldef, batch=2)
    y, _ = run(ldef, xs, {k: v.astype(np.float64) for k, v in p.items()})
    assert y.shape == (2, 4, 4, 4)


def test_local_with_equal_weights_is_conv():
    cdef = conv_def(in_shapes=((3, 6, 6),), fs=3, padding=1, stride=2, filters=4)
    ldef = conv_def(in_shapes=((3, 6, 6),), fs=3, padding=1, stride=2, filters=4, type_="local")
    xs = random_inputs(cdef)
    yc, pc = run(cdef, xs)
    m = cdef.attrs["modulesX"]
    pl = {"W0": np.broadcast_to(pc["W0"], (m * m,) + pc["W0"].shape).copy(),
          "b": np.broadcast_to(pc["b"][:, None, None], (4, m, m)).copy()}
    yl, _ = run(ldef, xs, pl)
    np.testing.assert_allclose(yl, yc, rtol=1e-12)


def test_fc_flattens_images_in_channel_row_column_order():
    ldef = fc_def(in_shapes=((2, 3, 3), (4,)), outputs=5)
    xs = random_inputs(ldef)
    y, p = run(ldef, xs)
    want = xs[0].reshape(3, 18) @ p["W0"] + xs[1] @ p["W1"] + p["b"]
    np.testing.assert_allclose(y, want, rtol=1e-12)


@pytest.mark.parametrize("pool", ["max", "avg", "maxabs"])
@pytest.mark.parametrize("size,stride,start,outputs", [
    (3, 2, 0, None), (3, 2, -1, None), (4, 3, -2, None), (2, 2, 1, None), (3, 3, 0, None),
    (2, 2, 0, 2), (3, 2, 0, 5)])  # the last: outputsX larger than needed -> an empty window
def test_pool_matches_reference(pool, size, stride, start, outputs):
    ldef = pool_def(pool=pool, in_shape=(3, 8, 8), size=size, stride=stride, start=start,
                    outputs_x=outputs)
    x = random_inputs(ldef)[0]
    y, _ = run(ldef, [x])
    a = ldef.attrs
    np.testing.assert_allclose(y, ref_pool(x, pool, size, stride, start, a["outputsX"]),
                               rtol=1e-12)


def test_pool_output_sizes_follow_the_ceiling_rule():
    # cuda-convnet2: the 224x224 ImageNet net gives 55 -> 27 -> 13 -> 6
    from convnet.kernels.conv import out_size as conv_size
    from convnet.kernels.pool import out_size as pool_size
    assert conv_size(224, 11, 0, 4) == 55
    assert [pool_size(s, 3, 2, 0) for s in (55, 27, 13)] == [27, 13, 6]
    assert pool_size(24, 3, 2, 0) == 12  # CIFAR: the last window hangs over the edge


def test_avg_pool_divides_by_pixels_inside():
    ldef = pool_def(pool="avg", in_shape=(1, 4, 4), size=3, stride=2, start=-1)
    x = np.ones((1, 1, 4, 4))
    y, _ = run(ldef, [x])
    np.testing.assert_allclose(y, 1.0)  # averaging ones gives one, however many are inside


@pytest.mark.parametrize("kind", ["cmrnorm", "rnorm", "cnorm"])
@pytest.mark.parametrize("size", [3, 4])
def test_norms_match_reference(kind, size):
    ldef = norm_def(kind, in_shape=(6, 5, 5), size=size, scale=1.5, pow_=0.75, min_div=1.2)
    x = random_inputs(ldef, batch=2)[0]
    y, _ = run(ldef, [x])
    np.testing.assert_allclose(y, ref_norm(x, kind, size, 1.5, 0.75, 1.2), rtol=1e-10)


def test_cmrnorm_min_div_defaults_to_one():
    ldef = LayerDef(name="n", type="cmrnorm", inputs=("x",), attrs={"size": 3, "channels": 4,
                    "imgSize": 2}, params={"scale": 0.5, "pow": 0.75},
                    input_shapes=((4, 2, 2),), output_shape=(4, 2, 2))
    x = np.random.default_rng(0).standard_normal((2, 4, 2, 2))
    y, _ = run(ldef, [x])
    np.testing.assert_allclose(y, ref_norm(x, "cmrnorm", 3, 0.5, 0.75, 1.0), rtol=1e-10)


NEURON_VALUES = [
    ("ident", lambda x: x), ("logistic", lambda x: 1 / (1 + np.exp(-x))), ("abs", np.abs),
    ("relu", lambda x: np.maximum(x, 0)), ("nrelu", lambda x: np.maximum(x, 0)),
    ("softrelu", lambda x: np.log1p(np.exp(x))), ("square", lambda x: x * x),
    ("tanh[1.7,0.6]", lambda x: 1.7 * np.tanh(0.6 * x)),
    ("brelu[1.5]", lambda x: np.minimum(np.maximum(x, 0), 1.5)),
    ("linear[2,-1]", lambda x: 2 * x - 1), ("drelu[0.5]", lambda x: x - 0.5 * np.tanh(x / 0.5)),
    ("abstanh[1.5,-0.5]", lambda x: 1.5 * np.abs(np.tanh(0.5 * x))),
]


@pytest.mark.parametrize("spec,fn", NEURON_VALUES, ids=[s for s, _ in NEURON_VALUES])
def test_neuron_values(spec, fn):
    x = np.linspace(-6, 6, 25).reshape(1, 25)
    y, _ = run(simple_def("neuron", [(25,)], neuron_=spec), [x])
    np.testing.assert_allclose(y, fn(x), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("spec,fn", [("sqrt", np.sqrt), ("log[0.5]", lambda x: np.log(0.5 + x))])
def test_neuron_values_positive_domain(spec, fn):
    x = np.linspace(0.01, 5, 9).reshape(1, 9)
    y, _ = run(simple_def("neuron", [(9,)], neuron_=spec), [x])
    np.testing.assert_allclose(y, fn(x), rtol=1e-12)


def test_inline_neuron_does_not_touch_inputs():
    ldef = simple_def("pass", [(4,)], neuron_="relu")
    x = np.array([[-1.0, 2.0, -3.0, 4.0]])
    y, _ = run(ldef, [x])
    np.testing.assert_array_equal(x, [[-1.0, 2.0, -3.0, 4.0]])
    np.testing.assert_array_equal(y, [[0.0, 2.0, 0.0, 4.0]])


def test_softmax_is_stable_and_normalised():
    x = np.array([[1000.0, 1000.0, -1000.0], [1.0, 2.0, 3.0]])
    y, _ = run(simple_def("softmax", [(3,)]), [x])
    np.testing.assert_allclose(y.sum(axis=1), 1.0)
    np.testing.assert_allclose(y[0], [0.5, 0.5, 0.0])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(y[1], e / e.sum())


def test_combining_layers():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 2, 2, 2)), rng.standard_normal((2, 2, 2, 2))
    y, _ = run(simple_def("eltsum", [(2, 2, 2)] * 2, attrs={"coeffs": [2.0, -1.0]}), [a, b])
    np.testing.assert_allclose(y, 2 * a - b)
    y, _ = run(simple_def("eltmax", [(2, 2, 2)] * 2), [a, b])
    np.testing.assert_array_equal(y, np.maximum(a, b))
    y, _ = run(simple_def("concat", [(2, 2, 2), (3,)], out_shape=(11,)), [a, b.reshape(2, 8)[:, :3]])
    np.testing.assert_array_equal(y, np.concatenate([a.reshape(2, 8), b.reshape(2, 8)[:, :3]], 1))
    y, _ = run(simple_def("pass", [(2, 2, 2), (2, 2, 2)], out_shape=(4, 2, 2)), [a, b])
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=1))


def test_sum_layer_sums_channel_groups():
    x = np.arange(2 * 6 * 2 * 2, dtype=np.float64).reshape(2, 6, 2, 2)
    y, _ = run(simple_def("sum", [(6, 2, 2)], out_shape=(3, 2, 2), attrs={"stride": 2}), [x])
    np.testing.assert_array_equal(y, x.reshape(2, 3, 2, 2, 2).sum(axis=2))
    y, _ = run(simple_def("sum", [(6, 2, 2)], out_shape=(1, 2, 2)), [x])
    np.testing.assert_array_equal(y, x.sum(axis=1, keepdims=True))


# -------------------------------------------------------------------- costs

def test_logreg_cost_and_metrics():
    ldef = simple_def("cost.logreg", [(1,), (4,)], out_shape=(1,), params={"topk": 2})
    layer = build_layer(ldef)
    probs = np.array([[0.7, 0.1, 0.1, 0.1],    # label 0: right
                      [0.4, 0.3, 0.2, 0.1],    # label 1: 2nd best -> top-1 wrong, top-2 right
                      [0.4, 0.3, 0.2, 0.1],    # label 3: wrong both
                      [0.25, 0.25, 0.25, 0.25],  # label 2: tie counts as right
                      [0.6, 0.0, 0.3, 0.1]])   # label 1: p = 0 -> large finite cost
    labels = np.array([[0], [1], [3], [2], [1]], dtype=np.float32)
    cost, _ = layer.forward([labels, probs], {}, CTX)
    assert cost.shape == (5,)
    np.testing.assert_allclose(cost[:4], -np.log([0.7, 0.3, 0.1, 0.25]))
    assert np.isfinite(cost[4]) and cost[4] > 60
    m = layer.metrics([labels, probs], cost)
    assert m["cost"] == pytest.approx(cost.sum())
    assert m["error"] == 3 and m["error_topk"] == 2


def test_crossent_bce_sum2_costs_and_metrics():
    rng = np.random.default_rng(1)
    labels = np.eye(3)[[0, 2, 1, 1]]
    probs = np.array([[0.8, 0.1, 0.1], [0.2, 0.2, 0.6], [0.5, 0.3, 0.2], [0.1, 0.7, 0.2]])
    ce = build_layer(simple_def("cost.crossent", [(3,), (3,)], out_shape=(1,)))
    cost, _ = ce.forward([labels, probs], {}, CTX)
    np.testing.assert_allclose(cost, -np.log([0.8, 0.6, 0.3, 0.7]))
    m = ce.metrics([labels, probs], cost)
    assert m["error"] == 1 and m["cost"] == pytest.approx(cost.sum())

    t, y = rng.random((4, 3)), rng.uniform(0.1, 0.9, (4, 3))
    bce = build_layer(simple_def("cost.bce", [(3,), (3,)], out_shape=(1,),
                                 params={"posWeight": 2.0}))
    cost, _ = bce.forward([t, y], {}, CTX)
    np.testing.assert_allclose(cost, -(2 * t * np.log(y) + (1 - t) * np.log(1 - y)).sum(1))
    m = bce.metrics([t, y], cost)
    assert m["error"] == pytest.approx(((y > 0.5) != (t > 0.5)).mean(axis=1).sum())

    x = rng.standard_normal((4, 2, 3))
    s2 = build_layer(simple_def("cost.sum2", [(2, 3)], out_shape=(1,)))
    cost, _ = s2.forward([x], {}, CTX)
    np.testing.assert_allclose(cost, (x ** 2).sum(axis=(1, 2)))
    assert s2.metrics([x], cost) == {"cost": pytest.approx((x ** 2).sum())}


def test_cost_gradients_are_of_the_coefficient_times_the_sum():
    layer = build_layer(simple_def("cost.sum2", [(3,)], out_shape=(1,), params={"coeff": 0.5}))
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]])
    out, st = layer.forward([x], {}, CTX)
    (g,), pg = layer.backward(None, [x], out, {}, st, CTX, [True])
    np.testing.assert_allclose(g, x)  # d(0.5 * sum x^2)/dx, not divided by the case count
    assert pg == {}


# -------------------------------------------------------------------- weights

@pytest.mark.parametrize("ldef", [
    conv_def(in_shapes=((3, 6, 6), (2, 6, 6)), filters=4, init_w=[0.5, 2.0], init_b=0.25),
    conv_def(in_shapes=((4, 6, 6),), filters=6, groups=2, type_="local", init_w=0.5),
    fc_def(in_shapes=((2, 3, 3), (7,)), outputs=5, init_w=0.5)], ids=["conv", "local", "fc"])
def test_init_params(ldef):
    layer = build_layer(ldef)
    p = layer.init_params(np.random.default_rng(0))
    assert set(p) == {f"W{i}" for i in range(len(ldef.inputs))} | {"b"}
    for k, shape in ldef.param_shapes().items():
        assert p[k].shape == shape and p[k].dtype == np.float32
    np.testing.assert_array_equal(p["b"], np.float32(ldef.attrs["initB"]))
    init_w = ldef.attrs["initW"]
    for i in range(len(ldef.inputs)):
        w = p[f"W{i}"]
        assert abs(w.mean()) < 0.2 * init_w[i] and 0.7 < w.std() / init_w[i] < 1.3
    if ldef.type == "local":
        assert p["W0"].shape == (36, 6, 2, 3, 3)


# ---------------------------------------------------------------- dtypes

def _every_layer_case():
    cases = [
        conv_def(neuron_="relu"), conv_def(type_="local", neuron_="logistic"),
        fc_def(neuron_="tanh[1,1]"), pool_def(pool="max"), pool_def(pool="avg", start=-1),
        pool_def(pool="maxabs"), norm_def("cmrnorm"), norm_def("rnorm"), norm_def("cnorm"),
        simple_def("neuron", [(4,)], neuron_="softrelu"), simple_def("softmax", [(4,)]),
        simple_def("dropout", [(4,)]), simple_def("dropout2", [(4,)]),
        simple_def("pass", [(4,), (4,)], out_shape=(8,)),
        simple_def("concat", [(4,), (4,)], out_shape=(8,)),
        simple_def("eltsum", [(4,), (4,)]), simple_def("eltmax", [(4,), (4,)]),
        simple_def("sum", [(4,)], out_shape=(1,)),
        simple_def("cost.sum2", [(4,)], out_shape=(1,)),
        simple_def("cost.crossent", [(4,), (4,)], out_shape=(1,)),
        simple_def("cost.bce", [(4,), (4,)], out_shape=(1,)),
    ]
    return {l.type + (f"-{l.attrs['pool']}" if l.type == "pool" else ""): l for l in cases}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(_every_layer_case()))
def test_layers_compute_in_the_input_dtype(name, dtype):
    ldef = _every_layer_case()[name]
    layer = build_layer(ldef)
    params = params_for(layer, dtype=dtype)
    xs = random_inputs(ldef, dtype=dtype, positive=ldef.type in ("cost.bce", "cost.crossent"))
    if ldef.type == "cost.bce":
        xs = [x / (x.max() + 1) for x in xs]
    y, st = layer.forward(xs, params, Context(train=True, seed=1))
    assert y.dtype == dtype
    g = None if ldef.is_cost else np.ones_like(y)
    gin, gp = layer.backward(g, xs, y, params, st, Context(train=True, seed=1),
                             [True] * len(xs))
    for gi, x in zip(gin, xs):
        assert gi.dtype == dtype and gi.shape == x.shape
    for k, v in gp.items():
        assert v.dtype == dtype and v.shape == params[k].shape


def test_registry_and_build_layer():
    spec_types = {"data", "conv", "local", "fc", "pool", "cmrnorm", "rnorm", "cnorm", "neuron",
                  "softmax", "cost.logreg", "cost.crossent", "cost.bce", "cost.sum2", "dropout",
                  "dropout2", "pass", "concat", "eltsum", "eltmax", "sum", "bnorm"}
    assert set(LAYER_TYPES) == spec_types
    for ltype in LAYER_TYPES.values():
        assert issubclass(layer_class(ltype), Layer)
    with pytest.raises(ValueError, match="unknown layer type"):
        build_layer(LayerDef(name="x", type="nope"))
    data = build_layer(LayerDef(name="d", type="data", attrs={"dataIdx": 0}))
    x = np.ones((2, 3))
    assert data.forward([x], {}, CTX)[0] is x


@pytest.mark.parametrize("kw", [
    dict(in_shapes=((3, 9, 9),), fs=5, padding=0, stride=2),
    dict(in_shapes=((3, 6, 6), (2, 4, 4)), fs=[3, 1], padding=[1, 0], stride=[2, 1], filters=4),
    dict(in_shapes=((4, 5, 5),), filters=6, groups=2, fs=3, padding=1, stride=1,
         shared_biases=False),
])
def test_conv_cases_layout_in_blocks_matches_nchw(kw, monkeypatch):
    """The cases layout split into blocks of one case (its weight gradient summed over
    blocks) gives the outputs and all gradients of the nchw layout."""
    ldef = conv_def(**kw)
    layer = build_layer(ldef)
    rng = np.random.default_rng(3)
    xs = random_inputs(ldef, batch=3)
    params = {k: v.astype(np.float64) for k, v in params_for(layer).items()}
    gy = None
    results = {}
    for layout, chunk in (("nchw", conv_geometry.CHUNK_BYTES), ("cases", 1)):
        monkeypatch.setattr(conv_choice, "LAYOUT", layout)
        monkeypatch.setattr(conv_geometry, "CHUNK_BYTES", chunk)
        y, state = layer.forward(xs, params, CTX)
        if gy is None:
            gy = rng.standard_normal(y.shape)
        dxs, grads = layer.backward(gy, xs, y, params, state, CTX, [True] * len(xs))
        results[layout] = (y, dxs, grads)
    (y0, dx0, g0), (y1, dx1, g1) = results["nchw"], results["cases"]
    np.testing.assert_allclose(y1, y0, rtol=1e-12, atol=1e-12)
    for a, b in zip(dx1, dx0):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for k in g0:
        np.testing.assert_allclose(g1[k], g0[k], rtol=1e-12, atol=1e-12)


def test_conv_layout_choice(monkeypatch):
    """Stride-1 3x3/5x5 layers with enough channels take Winograd; others: large output
    maps the cases layout, small ones chwn or nchw by weights per filter."""
    assert kconv.conv_layout(48, 31, [11], [0], [4], [3], [1]) == "cases"
    assert kconv.conv_layout(128, 15, [5], [2], [2], [48], [1]) == "chwn"
    assert kconv.conv_layout(32, 15, [3], [1], [1], [3], [1]) == "nchw"  # 3 channels: thin
    assert kconv.conv_layout(192, 15, [5], [2], [1], [64], [1]) == "winograd"
    assert kconv.conv_layout(384, 7, [3], [1], [1], [192], [1]) == "winograd"
    assert kconv.conv_layout(384, 7, [3], [1], [1], [192], [16]) == "nchw"  # 12 per group
    assert kconv.conv_layout(64, 8, [3, 5], [1, 2], [1, 1], [64, 64], [1, 1]) == "chwn"
    monkeypatch.setattr(conv_choice, "WINOGRAD", False)  # --no-winograd
    assert kconv.conv_layout(192, 15, [5], [2], [1], [64], [1]) == "chwn"
