"""The CUDA kernels, run on the host: their code agrees with the numpy kernels.

Every kernel of :mod:`convnet.kernels.cuda` is compiled with the host C++ compiler
and run element by element (:mod:`tests.support.cuda_emulation`), and the override
functions run unchanged on numpy arrays (:func:`convnet.kernels.cuda.kernel_set.using`).
This checks, without a GPU, everything but the device itself: index
arithmetic, window bounds, operation order, the argument lists the layers
call the overrides with, caches passed from forward to backward, and dropout
bits.  Where the CUDA kernel repeats the numpy kernel's operations in the
same order the results must be bitwise equal, and are.
"""

from __future__ import annotations


import numpy as np
import pytest

from convnet.kernels import batch_norm as kbn
from convnet.kernels import conv as kconv
from convnet.kernels import images as kimages
from convnet.kernels.conv import choice as conv_choice
from convnet.kernels import nn as knn
from convnet.kernels import norm as knorm
from convnet.kernels import pool as kpool
from convnet.kernels import random as krandom
from convnet.kernels import update as kupdate
from convnet.kernels.cuda import OVERRIDES, kernel_set
from convnet.kernels.neurons import NEURONS

from tests.support.cuda_emulation import (compiler_available, emulated_kernel_set, override,
                                          overrides_for_numpy)
from tests.support.cuda_cases import forward_backward, layer_cases
from tests.support.layers import NEURON_SPECS

pytestmark = pytest.mark.skipif(not compiler_available(),
                                reason="no host C++ compiler (g++/clang++) to emulate the "
                                       "CUDA kernels with")

DTYPES = [np.float32, np.float64]


@pytest.fixture(scope="module")
def emulated():
    with kernel_set.using(emulated_kernel_set()) as emulated_kernels:
        yield emulated_kernels


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------- conv, local

CONV_GEOMETRIES = [  # n, c, s, filters, fs, pad, stride, groups
    (3, 4, 9, 6, 3, 1, 1, 1),
    (2, 6, 10, 6, 5, 2, 2, 2),
    (2, 3, 7, 4, 3, 0, 3, 1),     # last window past the edge
    (2, 4, 11, 4, 4, 3, 3, 2),    # padding larger than the overhang
    (2, 3, 23, 8, 11, 0, 4, 1),   # AlexNet's first layer, scaled
    (1, 2, 5, 3, 5, 0, 1, 1),     # one output pixel
]


def _conv_inputs(rng, dtype, n, c, s, f, fs, pad, stride, g, local=False, shared=True):
    m = kconv.out_size(s, fs, pad, stride)
    x = rng.standard_normal((n, c, s, s)).astype(dtype)
    wshape = (m * m, f, c // g, fs, fs) if local else (f, c // g, fs, fs)
    w = rng.standard_normal(wshape).astype(dtype)
    b = rng.standard_normal(f if shared and not local else (f, m, m)).astype(dtype)
    geom = dict(filter_sizes=[fs], paddings=[pad], strides=[stride], channels=[c], groups=[g],
                img_sizes=[s], modules=m)
    return x, w, b, geom


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geometry", CONV_GEOMETRIES)
@pytest.mark.parametrize("shared", [True, False])
def test_conv_is_bitwise_the_generic_nchw_conv(emulated, geometry, shared, dtype, monkeypatch):
    """Same columns, same GEMMs, same order of additions in col2im."""
    monkeypatch.setattr(conv_choice, "LAYOUT", "nchw")
    rng = np.random.default_rng(1)
    x, w, b, geom = _conv_inputs(rng, dtype, *geometry, shared=shared)
    y0, c0 = kconv.conv_forward.generic([x], [w], b, **geom)
    y1, c1 = override("conv_forward")([x], [w], b, **geom)
    _same(y0, y1)
    gy = rng.standard_normal(y0.shape).astype(dtype)
    r0 = kconv.conv_backward.generic(gy, [x], [w], c0, [True], shared_biases=shared, **geom)
    r1 = override("conv_backward")(gy, [x], [w], c1, [True], shared_biases=shared, **geom)
    for a, b_ in zip((r0[0][0], r0[1][0], r0[2]), (r1[0][0], r1[1][0], r1[2])):
        _same(a, b_)


@pytest.mark.parametrize("geometry", CONV_GEOMETRIES)
def test_conv_agrees_with_the_generic_chwn_conv(emulated, geometry, monkeypatch):
    monkeypatch.setattr(conv_choice, "LAYOUT", "chwn")
    rng = np.random.default_rng(2)
    x, w, b, geom = _conv_inputs(rng, np.float64, *geometry)
    y0, c0 = kconv.conv_forward.generic([x], [w], b, **geom)
    y1, c1 = override("conv_forward")([x], [w], b, **geom)
    np.testing.assert_allclose(y1, y0, rtol=1e-12, atol=1e-12)
    gy = rng.standard_normal(y0.shape)
    r0 = kconv.conv_backward.generic(gy, [x], [w], c0, [True], **geom)
    r1 = override("conv_backward")(gy, [x], [w], c1, [True], **geom)
    for a, b_ in zip((r0[0][0], r0[1][0], r0[2]), (r1[0][0], r1[1][0], r1[2])):
        np.testing.assert_allclose(b_, a, rtol=1e-12, atol=1e-12)


def test_conv_backward_rebuilds_columns_without_a_cache(emulated):
    rng = np.random.default_rng(3)
    x, w, b, geom = _conv_inputs(rng, np.float32, *CONV_GEOMETRIES[1])
    y, cache = override("conv_forward")([x], [w], b, keep_cache=False, **geom)
    assert cache.cols == [None]
    gy = rng.standard_normal(y.shape).astype(np.float32)
    _, cached = override("conv_forward")([x], [w], b, **geom)
    a = override("conv_backward")(gy, [x], [w], cache, [False], **geom)
    b_ = override("conv_backward")(gy, [x], [w], cached, [False], **geom)
    assert a[0] == [None] and b_[0] == [None]
    _same(a[1][0], b_[1][0])
    # the generic forward's cache is accepted too (columns rebuilt)
    _, generic_cache = kconv.conv_forward.generic([x], [w], b, **geom)
    c = override("conv_backward")(gy, [x], [w], generic_cache, [False], **geom)
    _same(a[1][0], c[1][0])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geometry", CONV_GEOMETRIES)
def test_local_is_bitwise_the_generic_local(emulated, geometry, dtype):
    rng = np.random.default_rng(4)
    x, w, b, geom = _conv_inputs(rng, dtype, *geometry, local=True)
    y0, c0 = kconv.local_forward.generic([x], [w], b, **geom)
    y1, c1 = override("local_forward")([x], [w], b, **geom)
    _same(y0, y1)
    gy = rng.standard_normal(y0.shape).astype(dtype)
    r0 = kconv.local_backward.generic(gy, [x], [w], c0, [True], **geom)
    r1 = override("local_backward")(gy, [x], [w], c1, [True], **geom)
    for a, b_ in zip((r0[0][0], r0[1][0], r0[2]), (r1[0][0], r1[1][0], r1[2])):
        _same(a, b_)


# ----------------------------------------------------------------------- pool

POOL_GEOMETRIES = [  # img, size, stride, start, outputs (None: the ceiling rule)
    (9, 3, 2, 0, None), (8, 3, 2, -1, None), (7, 2, 3, 0, 4), (6, 4, 1, 1, None),
    (5, 3, 3, -2, 3), (8, 3, 2, 0, 5), (55, 3, 2, 0, None), (13, 3, 2, 0, None)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["max", "avg", "maxabs"])
@pytest.mark.parametrize("geometry", POOL_GEOMETRIES)
def test_pool_is_bitwise_the_generic_pool(emulated, kind, geometry, dtype):
    s, size, stride, start, outs = geometry
    o = outs or kpool.out_size(s, size, stride, start)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 3, s, s)).astype(dtype)
    x[0, 0, :3, :3] = 0.5  # ties inside a window
    kw = dict(pool=kind, size=size, stride=stride, start=start, outputs=o)
    y0, c0 = kpool.pool_forward.generic(x, **kw)
    y1, c1 = override("pool_forward")(x, **kw)
    _same(y0, y1)
    if kind == "maxabs":
        _same(c0, c1)
    gy = rng.standard_normal(y0.shape).astype(dtype)
    d0 = kpool.pool_backward.generic(gy, x, y0, c0, **kw)
    _same(d0, override("pool_backward")(gy, x, y1, c1, **kw))
    if kind == "maxabs":  # the generic forward's uint8 offsets work as a cache too
        _same(d0, override("pool_backward")(gy, x, y1, c0, **kw))


# ---------------------------------------------------------------------- norms

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["cmrnorm", "rnorm", "cnorm"])
@pytest.mark.parametrize("size", [1, 3, 4, 5, 9])
@pytest.mark.parametrize("pow_", [0.75, 0.5, 1.0, 0.6])
def test_norms_agree_with_the_generic_norms(emulated, kind, size, pow_, dtype):
    """Bitwise for the exponents with a closed form (0.75, 0.5, 1); others go
    through pow(), whose last bit differs between math libraries."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 10, 7, 7)).astype(dtype)
    kw = dict(kind=kind, size=size, scale=0.8, pow=pow_, min_div=1.5)
    y0, c0 = knorm.response_norm_forward.generic(x, **kw)
    y1, c1 = override("response_norm_forward")(x, **kw)
    gy = rng.standard_normal(x.shape).astype(dtype)
    d0 = knorm.response_norm_backward.generic(gy, x, y0, c0, **kw)
    d1 = override("response_norm_backward")(gy, x, y1, c1, **kw)
    if pow_ in (0.75, 0.5, 1.0):
        _same(y0, y1)
        _same(d0, d1)
    else:
        tol = 1e-6 if dtype == np.float32 else 1e-14
        np.testing.assert_allclose(y1, y0, rtol=tol, atol=tol)
        np.testing.assert_allclose(d1, d0, rtol=tol, atol=tol)


# ---------------------------------------------------------------------- costs

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("topk", [1, 3, 7])
def test_logreg_is_bitwise_the_generic_logreg(emulated, dtype, topk):
    rng = np.random.default_rng(8)
    probs = rng.random((9, 7)).astype(dtype)
    labels = rng.integers(0, 7, (9, 1)).astype(dtype)
    probs[0, int(labels[0, 0])] = 0  # log of the floor
    probs[1] = 0.25  # ties in the case's favour
    for a, b in zip(knn.logreg_cost.generic(labels, probs, topk),
                    override("logreg_cost")(labels, probs, topk)):
        _same(a, b)
    _same(knn.logreg_grad.generic(labels, probs, 0.7), override("logreg_grad")(labels, probs, 0.7))


def test_logreg_label_out_of_range_gives_a_nan_cost(emulated):
    probs = np.full((2, 3), 1 / 3, np.float32)
    cost, err1, _ = override("logreg_cost")(np.array([[1.0], [3.0]], np.float32), probs)
    assert np.isfinite(cost[0]) and np.isnan(cost[1]) and err1[1] == 1


# -------------------------------------------------------------------- dropout

@pytest.mark.parametrize("shape,offset", [((7, 3, 5), 11), ((4, 9), 0), ((3,), 2 ** 40),
                                          ((2, 1000), 2 ** 62)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_uniforms_are_bitwise_numpys(emulated, shape, offset, dtype):
    key = krandom.stream_key(3, 4, "drop")
    x = np.zeros(shape, dtype)
    _same(krandom.uniform_like.generic(x, key, offset), override("uniform_like")(x, key, offset))


# --------------------------------------------------------------------- update

@pytest.mark.parametrize("wc", [0.0, 0.004])
@pytest.mark.parametrize("flag", [None, True, False])
def test_the_gated_update_is_bitwise_the_cpu_update(emulated, wc, flag):
    """The fused kernel, and the generic masked form GPU arrays take without it, against
    the CPU optimizer's blocked loop; a false flag leaves the weights as they were."""
    from convnet.runtime.step.learning_rules import LearningRule
    from convnet.runtime.step.optimizer import MomentumSGD
    from convnet.config.values.schedules import Schedule

    rng = np.random.default_rng(4)
    w, inc, grad = (rng.standard_normal(1000).astype(np.float32) for _ in range(3))
    rule = LearningRule(Schedule("const", 0.01), 0.9, wc)
    expected = [w.copy(), inc.copy()]
    if flag is not False:
        MomentumSGD().update(np, expected[0], expected[1], grad, rule, 0.0, 37)
    ok = None if flag is None else np.array(flag)
    fused = [w.copy(), inc.copy()]
    override("momentum_update")(fused[0], fused[1], grad, ok, 0.01, 0.9, wc, 37)
    masked = [w.copy(), inc.copy()]
    kupdate.masked_update(np, masked[0], masked[1], grad, np.array(flag is not False), 0.01,
                          0.9, wc, 37)
    for got in (fused, masked):
        _same(got[0], expected[0])
        _same(got[1], expected[1])


# -------------------------------------------------------------------- neurons

NEURON_ARGS = {"log": (1.5,), "tanh": (1.7, -0.6), "brelu": (1.2,), "linear": (0.5, 0.25),
               "drelu": (0.8,), "abstanh": (1.3, -0.7)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(NEURONS))
def test_fused_neurons_agree_with_the_generic_neurons(emulated, name, dtype):
    fn = NEURONS[name]
    args = NEURON_ARGS.get(name, ())
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 5, 3)).astype(dtype)
    x[0, 0, 0] = 0
    if name in ("sqrt", "log"):
        x = np.abs(x) + 0.1
    y0 = fn.forward(np, x.copy(), args, None)
    y1 = override("neuron_forward")(x.copy(), name, args)
    inplace = x.copy()
    y2 = override("neuron_forward")(inplace, name, args, out=inplace)
    assert y2 is inplace
    g = rng.standard_normal(x.shape).astype(dtype)
    d0 = fn.backward(np, g, x if fn.uses_input else None, y0, args)
    d1 = override("neuron_backward")(g, x if fn.uses_input else None, y1, name, args)
    eps = np.finfo(dtype).eps
    for got, want, scale in ((y1, y0, np.abs(x) + 1), (y2, y0, np.abs(x) + 1),
                             (d1, d0, np.abs(g) * (np.abs(x) + 1))):
        assert got.dtype == want.dtype
        assert np.all(np.abs(got - want) <= 8 * eps * scale), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_passes_are_bitwise_the_generic_ones_and_its_sums_agree(emulated, dtype):
    """The forward and the input gradient repeat the numpy passes (bitwise); the sums
    over the pixels accumulate in double where numpy's dot products sum blocks of the
    element type (agreeing to that type's rounding)."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 5, 7)) * 0.5 + 2).astype(dtype)
    g = rng.standard_normal((3, 5, 7)).astype(dtype)
    scale, shift = rng.standard_normal(5).astype(dtype), rng.standard_normal(5).astype(dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    moments = override("batch_moments")(x)
    np.testing.assert_allclose(moments, kbn.batch_moments.generic(x), rtol=tol)
    mean, invstd = moments[:5], kbn.inverse_std(moments[5:] / 21, 1e-5)
    _same(kbn.batch_norm_forward.generic(x, mean, invstd, scale, shift),
          override("batch_norm_forward")(x, mean, invstd, scale, shift))
    sums = override("batch_norm_grad_sums")(g, x, mean, invstd)
    np.testing.assert_allclose(sums, kbn.batch_norm_grad_sums.generic(g, x, mean, invstd),
                               rtol=tol, atol=tol * np.abs(sums).max())
    _same(kbn.batch_norm_backward.generic(g, x, mean, invstd, scale, sums, 21),
          override("batch_norm_backward")(g, x, mean, invstd, scale, sums, 21))


# -------------------------------------------------- whole layers and the engine

CASES = layer_cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_layers_with_cuda_kernels_match_numpy(name, monkeypatch):
    """Every layer type through the layer library, CUDA kernels dispatched for numpy
    arrays: same outputs, metrics, gradients (and dropout masks) as plain numpy."""
    monkeypatch.setattr(conv_choice, "LAYOUT", "nchw")
    case = CASES[name]
    want = forward_backward(case, np.asarray, np.asarray, dtype=np.float64)
    with overrides_for_numpy():
        got = forward_backward(case, np.asarray, np.asarray, dtype=np.float64)
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-13,
                                   err_msg=f"{name} {key}")


@pytest.mark.parametrize("name", ["conv-groups2", "local-multi_input", "pool-maxabs-overhang",
                                  "cnorm-5-1.3", "logreg-3", "neuron-tanh", "bnorm-image"])
def test_gradient_check_passes_with_cuda_kernels(name):
    from tests.support.layers import fd_check

    case = CASES[name]
    with overrides_for_numpy():
        fd_check(case.ldef, case.make_inputs(np.random.default_rng(0)), ctx=case.ctx)


def test_executor_with_cuda_kernels_matches_numpy(tmp_path):
    """Three training steps of the hybrid reference config (scaled) on four CPU
    devices: the CUDA kernel code gives the weights the numpy kernels give."""
    from convnet.config import load_net
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor
    from convnet.plan.planner import make_plan
    from tests.support.scaled_configs import IMAGE_DIMS, NUM_CLASSES, scaled_config

    layer_def, params = scaled_config("imagenet-4gpu-data-model", tmp_path)
    net = load_net(layer_def, params, data_dims={0: IMAGE_DIMS, 1: (1,)}, num_classes=NUM_CLASSES)
    rng = np.random.default_rng(7)
    batches = [[rng.standard_normal((8,) + IMAGE_DIMS).astype(np.float32),
                rng.integers(0, NUM_CLASSES, (8, 1)).astype(np.float32)] for _ in range(3)]

    def train():
        plan = make_plan(net, (0, 1, 2, 3), 8)
        ex = Executor(net, plan, make_devices((0, 1, 2, 3), "cpu"), seed=3, parallel=True)
        try:
            costs = [ex.step(b, progress=i / 10).costs for i, b in enumerate(batches)]
            return ex.state_arrays(), costs
        finally:
            ex.close()

    want, want_costs = train()
    with overrides_for_numpy():
        got, got_costs = train()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=2e-5, atol=1e-6, err_msg=key)
    for a, b in zip(got_costs, want_costs):
        assert a["logprob"]["cost"] == pytest.approx(b["logprob"]["cost"], rel=1e-5)


def test_every_override_names_a_generic_kernel_or_a_documented_hook():
    import convnet.kernels.neurons as kneurons
    modules = [kconv, kpool, knorm, knn, krandom, kneurons, kupdate, kbn, kimages]
    generic = {name for m in modules for name in dir(m)
               if hasattr(getattr(m, name), "generic")}
    assert set(OVERRIDES) - generic == {"neuron_forward", "neuron_backward"} - generic
    assert set(NEURON_SPECS) == set(NEURONS)
