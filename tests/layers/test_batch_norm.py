"""bnorm: finite-difference gradients, shards combined into the whole minibatch's
statistics, the running averages and test mode."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.kernels import batch_norm as kbn
from convnet.layers import build_layer
from convnet.layers.base import Context, ReducedStatistics

from tests.support.layers import fd_check, params_for, random_inputs, simple_def


def bnorm_def(shape, neuron_=None, stats="global", decay=0.9, epsilon=1e-5):
    return simple_def("bnorm", [shape], neuron_=neuron_,
                      attrs={"channels": shape[0], "epsilon": epsilon, "decay": decay,
                             "stats": stats})


def _params(layer, rng):
    """The layer's arrays with a scale and shift away from 1 and 0."""
    params = params_for(layer)
    params["W0"] = rng.uniform(0.5, 1.5, params["W0"].shape)
    params["b"] = rng.standard_normal(params["b"].shape)
    return params


@pytest.mark.parametrize("shape, neuron_", [((4, 3, 3), None), ((5,), "relu"),
                                            ((3, 2, 2), "tanh[1,1]")])
def test_gradients(shape, neuron_):
    ldef = bnorm_def(shape, neuron_)
    rng = np.random.default_rng(5)  # not the objective's generator: its G would be x itself
    errors = fd_check(ldef, random_inputs(ldef, batch=4, rng=rng),
                      params=_params(build_layer(ldef), rng))
    assert set(errors) == {"W0", "b", "in0"}


def _shards_of(layer, x, params, grad, bounds, carry=True):
    """The forward outputs, input gradients and summed weight gradients of ``x`` cut at
    ``bounds``, each shard with the statistics of all (as the BatchStats operation gives;
    with what its own statistics carried for the backward call, unless not ``carry``)."""
    xs, gs = [x[a:b] for a, b in bounds], [grad[a:b] for a, b in bounds]
    counts = [layer.statistics_count(b - a) for a, b in bounds]
    own = [layer.shard_statistics("forward", [xi], params).values for xi in xs]
    moments = layer.combine_statistics("forward", own, counts)
    outs = [layer.forward([xi], params, Context(statistics=ReducedStatistics(
        moments, sum(counts), mine))) for xi, mine in zip(xs, own)]
    own = [layer.shard_statistics("backward", [xi], params, gi, y, state)
           for xi, gi, (y, state) in zip(xs, gs, outs)]
    sums = layer.combine_statistics("backward", [s.values for s in own], counts)
    backs = [layer.backward(gi, [xi], y, params, state, Context(statistics=ReducedStatistics(
        sums, sum(counts), mine.values, mine.carry if carry else None)), [True])
        for xi, gi, (y, state), mine in zip(xs, gs, outs, own)]
    y = np.concatenate([y for y, _ in outs])
    dx = np.concatenate([dxs[0] for dxs, _ in backs])
    weights = {k: sum(grads[k] for _, grads in backs) for k in ("W0", "b")}
    return y, dx, weights


@pytest.mark.parametrize("neuron_", [None, "relu"])
def test_shards_with_combined_statistics_are_the_whole_minibatch(neuron_):
    """Three uneven shards whose statistics are combined give the one-call forward, input
    gradients and (summed) weight gradients, to float64 rounding, also where the mean is
    far from zero (the combination has no sum-of-squares cancellation)."""
    ldef = bnorm_def((3, 4, 4), neuron_)
    layer = build_layer(ldef)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 3, 4, 4)) * 0.01 + 50.0
    params = _params(layer, rng)
    y, state = layer.forward([x], params, Context())
    grad = rng.standard_normal(y.shape)
    (dx,), weights = layer.backward(grad, [x], y, params, state, Context(), [True])
    y3, dx3, weights3 = _shards_of(layer, x, params, grad, [(0, 3), (3, 5), (5, 7)])
    np.testing.assert_allclose(y3, y, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(dx3, dx, rtol=1e-7, atol=1e-9 * np.abs(dx).max())
    for k in weights:
        np.testing.assert_allclose(weights3[k], weights[k], rtol=1e-9, atol=1e-9)


def test_the_backward_call_reuses_the_gradient_its_statistics_took_through_the_neuron():
    """With the replicas' statistics combined, the neuron's backward runs once a shard (in
    its statistics), and the call that reuses it gives the bits of the call that does not."""
    layer = build_layer(bnorm_def((3, 4, 4), "relu"))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 3, 4, 4)).astype(np.float32)
    params = _params(layer, rng)
    grad = rng.standard_normal(x.shape).astype(np.float32)
    calls = []
    backward = layer.neuron.backward
    layer.neuron.backward = lambda *a, **k: calls.append(1) or backward(*a, **k)
    bounds = [(0, 4), (4, 6)]
    reused = _shards_of(layer, x, params, grad, bounds)
    assert len(calls) == 2  # one per shard
    again = _shards_of(layer, x, params, grad, bounds, carry=False)
    assert len(calls) == 2 + 4  # without the carry: twice per shard
    for a, b in zip(reused[:2], again[:2]):
        np.testing.assert_array_equal(a, b)
    for k in reused[2]:
        np.testing.assert_array_equal(reused[2][k], again[2][k])


def test_kernels_in_blocks_of_cases_give_the_bits_of_one_block(monkeypatch):
    """The numpy kernels' element-wise steps block by block of cases (3 cases a block,
    the last one short) give the bits of the whole minibatch in one block."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((11, 3, 25)) * 2 + 0.5).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    scale, shift = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)

    def kernels():
        moments = kbn.batch_moments(x)
        mean, invstd = moments[:3], kbn.inverse_std(moments[3:] / 275, 1e-5)
        sums = kbn.batch_norm_grad_sums(g, x, mean, invstd)
        return [moments, kbn.batch_norm_forward(x, mean, invstd, scale, shift), sums,
                kbn.batch_norm_backward(g, x, mean, invstd, scale, sums, 275)]

    whole = kernels()
    monkeypatch.setattr(kbn, "BLOCK_BYTES", 3 * x[0].nbytes)
    assert kbn._cases_per_block(x) == 3
    for got, want in zip(kernels(), whole):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_float32_statistics_of_values_far_from_zero_keep_their_variance():
    """Values at 1000 with spread 0.01: sum x^2 - m mean^2 in float32 would lose the
    variance entirely; the moments (and their combination) keep it."""
    rng = np.random.default_rng(2)
    x = (1000.0 + 0.01 * rng.standard_normal((64, 2, 16))).astype(np.float32)
    halves = [kbn.batch_moments(x[:32]), kbn.batch_moments(x[32:])]
    moments = kbn.combine_moments(halves, [32 * 16, 32 * 16])
    var = moments[2:] / (64 * 16)  # M2 over the values per channel
    want = x.astype(np.float64).var(axis=(0, 2))
    np.testing.assert_allclose(var, want, rtol=1e-3)


def test_training_moves_the_running_averages_and_testing_uses_them():
    ldef = bnorm_def((2, 3, 3), decay=0.8)
    layer = build_layer(ldef)
    rng = np.random.default_rng(3)
    params = _params(layer, rng)
    x = rng.standard_normal((5, 2, 3, 3)) * 2 + 1
    y, _ = layer.forward([x], params, Context(train=True))
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3), ddof=1)
    np.testing.assert_allclose(params["mean"], 0.2 * mean, rtol=1e-12)
    np.testing.assert_allclose(params["var"], 0.8 + 0.2 * var, rtol=1e-12)
    # training normalises with the batch's own statistics (biased variance)
    xhat = (x - mean[:, None, None]) / np.sqrt(x.var(axis=(0, 2, 3)) + 1e-5)[:, None, None]
    np.testing.assert_allclose(y, params["W0"][:, None, None] * xhat + params["b"][:, None, None],
                               rtol=1e-10, atol=1e-12)
    # testing with the running averages, and leaves them alone
    before = {k: params[k].copy() for k in ("mean", "var")}
    y_test, _ = layer.forward([x], params, Context(train=False))
    scale = params["W0"] / np.sqrt(params["var"] + 1e-5)
    want = (x - params["mean"][:, None, None]) * scale[:, None, None] + params["b"][:, None, None]
    np.testing.assert_allclose(y_test, want, rtol=1e-10, atol=1e-12)
    for k, v in before.items():
        np.testing.assert_array_equal(params[k], v)


def test_test_mode_gradients_treat_the_running_averages_as_constants():
    ldef = bnorm_def((4, 3, 3), "tanh[1,1]")
    layer = build_layer(ldef)
    rng = np.random.default_rng(6)
    params = _params(layer, rng)
    params["mean"], params["var"] = rng.standard_normal(4), rng.uniform(0.5, 2.0, 4)
    errors = fd_check(ldef, random_inputs(ldef, batch=4, rng=rng), params=params,
                      ctx=Context(train=False))
    assert set(errors) == {"W0", "b", "in0"}
