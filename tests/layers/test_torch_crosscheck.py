"""Independent cross-check against PyTorch on the CPU: forward and backward of
conv, local (with equal weights everywhere, which is a conv), max/avg pooling,
cmrnorm, fc and softmax + logreg agree on random float32 inputs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch (in the 'test' extra) is not installed; "
                                            "the cross-check against it is skipped")
F = torch.nn.functional

from convnet.kernels.conv import choice as conv_choice  # noqa: E402
from convnet.layers import build_layer  # noqa: E402
from convnet.layers.base import Context  # noqa: E402

from tests.support.layers import conv_def, fc_def, norm_def, pool_def, simple_def  # noqa: E402

CTX = Context(train=True)
RTOL, ATOL = 2e-4, 2e-5


def _run(ldef, inputs, params, grad):
    layer = build_layer(ldef)
    y, st = layer.forward(inputs, params, CTX)
    gin, gp = layer.backward(grad, inputs, y, params, st, CTX, [True] * len(inputs))
    return y, gin, gp


def _t(a, grad=True):
    return torch.from_numpy(np.array(a, copy=True)).requires_grad_(grad)


def _close(ours, theirs):
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else theirs
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)


def _torch_conv(x, w, fs, padding, stride, modules, groups=1):
    """conv2d on an input padded out to the ceiling-rule size (extra zeros right/bottom)."""
    right = (modules - 1) * stride + fs - x.shape[-1] - padding
    return F.conv2d(F.pad(x, (padding, right, padding, right)), w, stride=stride, groups=groups)


@pytest.mark.parametrize("n,c,s,f,fs,pad,stride,groups", [
    (4, 3, 9, 8, 3, 1, 1, 1),
    (3, 4, 10, 6, 5, 2, 2, 2),   # the last window hangs past the padded edge
    (2, 6, 7, 6, 3, 0, 3, 3),
])
@pytest.mark.parametrize("layout", [None, "nchw", "chwn", "cases", "winograd"])
def test_conv(n, c, s, f, fs, pad, stride, groups, layout, monkeypatch):
    monkeypatch.setattr(conv_choice, "LAYOUT", layout)
    ldef = conv_def(in_shapes=((c, s, s),), filters=f, fs=fs, padding=pad, stride=stride,
                    groups=groups)
    m = ldef.attrs["modulesX"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, s, s)).astype(np.float32)
    params = {"W0": rng.standard_normal((f, c // groups, fs, fs)).astype(np.float32) * 0.3,
              "b": rng.standard_normal(f).astype(np.float32)}
    g = rng.standard_normal((n, f, m, m)).astype(np.float32)
    y, (dx,), gp = _run(ldef, [x], params, g)

    xt, wt, bt = _t(x), _t(params["W0"]), _t(params["b"])
    yt = _torch_conv(xt, wt, fs, pad, stride, m, groups) + bt.view(1, -1, 1, 1)
    yt.backward(torch.from_numpy(g))
    _close(y, yt)
    _close(dx, xt.grad)
    _close(gp["W0"], wt.grad)
    _close(gp["b"], bt.grad)


def test_conv_two_inputs_sum():
    ldef = conv_def(in_shapes=((3, 8, 8), (2, 5, 5)), filters=4, fs=[3, 3], padding=[1, 1],
                    stride=[2, 1])
    m = ldef.attrs["modulesX"]
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
          rng.standard_normal((2, 2, 5, 5)).astype(np.float32)]
    params = {"W0": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
              "W1": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
              "b": np.zeros(4, np.float32)}
    g = rng.standard_normal((2, 4, m, m)).astype(np.float32)
    y, dxs, gp = _run(ldef, xs, params, g)
    xt = [_t(x) for x in xs]
    wt = [_t(params["W0"]), _t(params["W1"])]
    yt = _torch_conv(xt[0], wt[0], 3, 1, 2, m) + _torch_conv(xt[1], wt[1], 3, 1, 1, m)
    yt.backward(torch.from_numpy(g))
    _close(y, yt)
    for i in range(2):
        _close(dxs[i], xt[i].grad)
        _close(gp[f"W{i}"], wt[i].grad)


@pytest.mark.parametrize("fs,pad,stride", [(3, 1, 1), (3, 0, 2)])
def test_local_with_equal_weights_matches_conv(fs, pad, stride):
    c, s, f, n = 4, 7, 5, 3
    ldef = conv_def(in_shapes=((c, s, s),), filters=f, fs=fs, padding=pad, stride=stride,
                    type_="local")
    m = ldef.attrs["modulesX"]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, c, s, s)).astype(np.float32)
    w = rng.standard_normal((f, c, fs, fs)).astype(np.float32) * 0.3
    b = rng.standard_normal(f).astype(np.float32)
    params = {"W0": np.broadcast_to(w, (m * m,) + w.shape).copy(),
              "b": np.broadcast_to(b[:, None, None], (f, m, m)).copy()}
    g = rng.standard_normal((n, f, m, m)).astype(np.float32)
    y, (dx,), gp = _run(ldef, [x], params, g)

    xt, wt, bt = _t(x), _t(w), _t(b)
    yt = _torch_conv(xt, wt, fs, pad, stride, m) + bt.view(1, -1, 1, 1)
    yt.backward(torch.from_numpy(g))
    _close(y, yt)
    _close(dx, xt.grad)
    # the conv's weight gradient is the sum of the per-position ones
    _close(gp["W0"].sum(axis=0), wt.grad)
    _close(gp["b"].sum(axis=(1, 2)), bt.grad)


@pytest.mark.parametrize("size,stride,start", [(3, 2, 0), (2, 2, 0), (3, 1, -1), (4, 3, -1)])
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_pool(pool, size, stride, start):
    c, s, n = 3, 9, 4
    ldef = pool_def(pool=pool, in_shape=(c, s, s), size=size, stride=stride, start=start)
    o = ldef.attrs["outputsX"]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, c, s, s)).astype(np.float32)
    g = rng.standard_normal((n, c, o, o)).astype(np.float32)
    y, (dx,), _ = _run(ldef, [x], {}, g)

    xt = _t(x)
    left = -start
    right = start + (o - 1) * stride + size - s  # pixels past the right edge
    if pool == "max":
        yt = F.max_pool2d(F.pad(xt, (left, max(right, 0), left, max(right, 0)),
                                value=-float("inf")), size, stride)
    else:  # sum of the pixels inside / number of pixels inside
        padded = F.pad(xt, (left, max(right, 0), left, max(right, 0)))
        ones = F.pad(torch.ones_like(xt), (left, max(right, 0), left, max(right, 0)))
        yt = F.avg_pool2d(padded, size, stride) / F.avg_pool2d(ones, size, stride)
    yt = yt[..., :o, :o]
    yt.backward(torch.from_numpy(g))
    _close(y, yt)
    _close(dx, xt.grad)


@pytest.mark.parametrize("size", [3, 4, 9])
def test_cmrnorm(size):
    c, s, n = 12, 5, 3
    ldef = norm_def("cmrnorm", in_shape=(c, s, s), size=size, scale=0.5, pow_=0.75, min_div=2.0)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, c, s, s)).astype(np.float32) * 2
    g = rng.standard_normal(x.shape).astype(np.float32)
    y, (dx,), _ = _run(ldef, [x], {}, g)
    xt = _t(x)
    yt = F.local_response_norm(xt, size, alpha=0.5, beta=0.75, k=2.0)
    yt.backward(torch.from_numpy(g))
    _close(y, yt)
    _close(dx, xt.grad)


def test_fc_two_inputs():
    ldef = fc_def(in_shapes=((2, 3, 3), (5,)), outputs=7)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
          rng.standard_normal((4, 5)).astype(np.float32)]
    params = {"W0": rng.standard_normal((18, 7)).astype(np.float32),
              "W1": rng.standard_normal((5, 7)).astype(np.float32),
              "b": rng.standard_normal(7).astype(np.float32)}
    g = rng.standard_normal((4, 7)).astype(np.float32)
    y, dxs, gp = _run(ldef, xs, params, g)
    xt = [_t(x) for x in xs]
    wt = {k: _t(v) for k, v in params.items()}
    yt = F.linear(xt[0].reshape(4, -1), wt["W0"].t()) + F.linear(xt[1], wt["W1"].t(), wt["b"])
    yt.backward(torch.from_numpy(g))
    _close(y, yt)
    for i in range(2):
        _close(dxs[i], xt[i].grad)
        _close(gp[f"W{i}"], wt[f"W{i}"].grad)
    _close(gp["b"], wt["b"].grad)


def test_softmax_and_logreg():
    n, k = 6, 5
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((n, k)) * 3).astype(np.float32)
    labels = rng.integers(0, k, size=(n, 1)).astype(np.float32)
    sm = build_layer(simple_def("softmax", [(k,)]))
    cost = build_layer(simple_def("cost.logreg", [(1,), (k,)], out_shape=(1,),
                                  params={"coeff": 0.5}))
    p, st = sm.forward([x], {}, CTX)
    c, cst = cost.forward([labels, p], {}, CTX)
    (_, gp), _ = cost.backward(None, [labels, p], c, {}, cst, CTX, [False, True])
    (gx,), _ = sm.backward(gp, [x], p, {}, st, CTX, [True])

    xt = _t(x)
    pt = F.softmax(xt, dim=1)
    ct = F.nll_loss(torch.log(pt), torch.from_numpy(labels.ravel().astype(np.int64)),
                    reduction="none")
    (0.5 * ct.sum()).backward()
    _close(p, pt)
    _close(c, ct)
    _close(gx, xt.grad)
