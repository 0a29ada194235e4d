"""Shared helpers for the layer tests: LayerDefs built by hand (no parser) and
an independent finite-difference checker.  This module holds no tests."""

from __future__ import annotations

import math

import numpy as np

from convnet.config.layer_types.weight_shapes import is_learned_key
from convnet.config.model import LayerDef
from convnet.config.values.neurons import NeuronSpec
from convnet.kernels.conv import out_size as conv_out_size
from convnet.kernels.pool import out_size as pool_out_size
from convnet.layers import build_layer
from convnet.layers.base import Context

#: One parameter set per neuron of the kernels' table, for the layer and CUDA cases.
NEURON_SPECS = {
    "ident": "ident", "logistic": "logistic", "abs": "abs", "relu": "relu", "nrelu": "nrelu",
    "softrelu": "softrelu", "square": "square", "sqrt": "sqrt", "log": "log[1.5]",
    "tanh": "tanh[1.7159,0.6666]", "brelu": "brelu[1.2]", "linear": "linear[2,-0.5]",
    "drelu": "drelu[0.7]", "abstanh": "abstanh[1.5,-0.8]",
}
#: The neurons defined only for positive inputs.
POSITIVE_DOMAIN = {"sqrt", "log"}


def neuron(spec: str | None) -> NeuronSpec | None:
    """'tanh[1.5,0.5]' -> NeuronSpec('tanh', (1.5, 0.5))."""
    if spec is None:
        return None
    if "[" in spec:
        name, rest = spec.split("[", 1)
        return NeuronSpec(name, tuple(float(a) for a in rest.rstrip("]").split(",")))
    return NeuronSpec(spec)


def conv_def(name="conv", in_shapes=((3, 7, 7),), filters=4, fs=3, padding=1, stride=1,
             groups=1, shared_biases=True, type_="conv", neuron_=None, init_w=0.3, init_b=0.1,
             rand_sparse=False, filter_channels=None):
    """A conv or local LayerDef with per-input lists expanded and shapes inferred.

    ``filters`` is the layer total (attrs['filters'] after parsing); ``filter_channels``
    (per input, with ``rand_sparse``) defaults to channels/groups."""
    n = len(in_shapes)
    lst = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * n  # noqa: E731
    fs, padding, stride, groups = lst(fs), lst(padding), lst(stride), lst(groups)
    rand_sparse = lst(rand_sparse)
    channels = [s[0] for s in in_shapes]
    imgs = [s[1] for s in in_shapes]
    mods = {conv_out_size(imgs[i], fs[i], padding[i], stride[i]) for i in range(n)}
    assert len(mods) == 1, mods
    m = mods.pop()
    attrs = dict(filters=filters, filterSize=fs, padding=padding, stride=stride,
                 channels=channels, groups=groups, initW=lst(init_w), initB=init_b,
                 imgSize=imgs, modulesX=m, randSparse=rand_sparse,
                 filterChannels=lst(filter_channels) if filter_channels is not None
                 else [c // g for c, g in zip(channels, groups)])
    if type_ == "conv":
        attrs["sharedBiases"] = shared_biases
    return LayerDef(name=name, type=type_, inputs=tuple(f"in{i}" for i in range(n)),
                    neuron=neuron(neuron_), attrs=attrs, input_shapes=tuple(in_shapes),
                    output_shape=(filters, m, m))


def fc_def(name="fc", in_shapes=((5,),), outputs=3, neuron_=None, init_w=0.3, init_b=0.1):
    n = len(in_shapes)
    return LayerDef(name=name, type="fc", inputs=tuple(f"in{i}" for i in range(n)),
                    neuron=neuron(neuron_),
                    attrs=dict(outputs=outputs, initW=[init_w] * n, initB=init_b),
                    input_shapes=tuple(in_shapes), output_shape=(outputs,))


def pool_def(name="pool", in_shape=(3, 7, 7), pool="max", size=3, stride=2, start=0,
             outputs_x=None, neuron_=None):
    c, s, _ = in_shape
    o = outputs_x or pool_out_size(s, size, stride, start)
    return LayerDef(name=name, type="pool", inputs=("in0",), neuron=neuron(neuron_),
                    attrs=dict(pool=pool, sizeX=size, stride=stride, start=start, outputsX=o,
                               channels=c, imgSize=s),
                    input_shapes=(in_shape,), output_shape=(c, o, o))


def norm_def(type_="cmrnorm", in_shape=(6, 5, 5), size=3, scale=0.8, pow_=0.75, min_div=1.0,
             name="norm", neuron_=None):
    c, s, _ = in_shape
    return LayerDef(name=name, type=type_, inputs=("in0",), neuron=neuron(neuron_),
                    attrs=dict(size=size, channels=c, imgSize=s),
                    params=dict(scale=scale, pow=pow_, minDiv=min_div),
                    input_shapes=(in_shape,), output_shape=in_shape)


def simple_def(type_, in_shapes, out_shape=None, name=None, neuron_=None, attrs=None, params=None):
    n = len(in_shapes)
    return LayerDef(name=name or type_, type=type_, inputs=tuple(f"in{i}" for i in range(n)),
                    neuron=neuron(neuron_), attrs=dict(attrs or {}), params=dict(params or {}),
                    input_shapes=tuple(in_shapes),
                    output_shape=tuple(out_shape) if out_shape is not None else tuple(in_shapes[0]))


def random_inputs(ldef, batch=3, rng=None, dtype=np.float64, positive=False):
    rng = rng or np.random.default_rng(0)
    out = []
    for shape in ldef.input_shapes:
        x = rng.standard_normal((batch,) + tuple(shape))
        if positive:
            x = np.abs(x) + 0.1
        out.append(x.astype(dtype))
    return out


def params_for(layer, seed=0, dtype=np.float64):
    p = layer.init_params(np.random.default_rng(seed))
    return {k: v.astype(dtype) for k, v in p.items()}


def fd_check(ldef, inputs, params=None, ctx=None, samples=10, eps=1e-5, tol=1e-5, seed=0,
             check_inputs=None):
    """Central-difference check of a layer's input and weight gradients (float64).

    Objective: sum(G * output) for a fixed random G (costs: coeff * sum(output)).
    Returns {array name: max relative error}; asserts each is below ``tol``.
    """
    rng = np.random.default_rng(seed)
    ctx = ctx or Context(train=True, seed=3, step=5, case_offset=7)
    layer = build_layer(ldef)
    params = params_for(layer) if params is None else params
    inputs = [np.array(x, dtype=np.float64, copy=True) for x in inputs]
    y, state = layer.forward(inputs, params, ctx)
    if ldef.is_cost:
        coeff = float(ldef.params.get("coeff", 1.0))
        gout = None
        objective = lambda: coeff * float(np.sum(layer.forward(inputs, params, ctx)[0]))  # noqa: E731
    else:
        gout = rng.standard_normal(np.shape(y))
        objective = lambda: float(np.sum(gout * layer.forward(inputs, params, ctx)[0]))  # noqa: E731
    if check_inputs is None:
        check_inputs = [layer.input_differentiable(i) for i in range(len(inputs))]
    in_g, p_g = layer.backward(None if gout is None else gout.copy(), inputs, y, params, state,
                               ctx, list(check_inputs))
    learned = {k for k in params if is_learned_key(k)}  # tables, running averages: none
    assert set(p_g) == learned, (sorted(p_g), sorted(learned))
    targets = [(k, params[k], p_g[k]) for k in sorted(learned)]
    targets += [(f"in{i}", inputs[i], in_g[i]) for i in range(len(inputs)) if check_inputs[i]]
    errors = {}
    for name, arr, an in targets:
        assert an is not None, name
        assert an.shape == arr.shape, (name, an.shape, arr.shape)
        flat, anf = arr.reshape(-1), np.asarray(an).reshape(-1)
        floor = 1e-3 * max(float(np.abs(anf).max()), 1e-3)
        nz = np.flatnonzero(anf)
        pick = np.unique(np.concatenate([
            rng.choice(nz, size=min(len(nz), samples // 2), replace=False) if len(nz) else [],
            rng.choice(flat.size, size=min(flat.size, samples - samples // 2), replace=False),
        ]).astype(np.int64))
        worst = 0.0
        for j in pick:
            old = flat[j]
            h = eps * max(1.0, abs(old))
            flat[j] = old + h
            fp = objective()
            flat[j] = old - h
            fm = objective()
            flat[j] = old
            num = (fp - fm) / (2 * h)
            worst = max(worst, abs(num - anf[j]) / max(abs(num), abs(anf[j]), floor))
        errors[name] = worst
        assert worst < tol, f"{ldef.type} '{ldef.name}' {name}: relative error {worst:.2e}"
    return errors


def flat_size(shape) -> int:
    return int(math.prod(shape))
