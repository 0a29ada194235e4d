"""Layer cases shared by the CUDA kernel tests: every layer type and neuron, small
shapes, deterministic inputs, and a forward+backward runner over any array module.

``tests/cuda/test_layers_emulated.py`` runs them through the CUDA kernel code
on the host; ``tests/cuda/test_gpu.py`` runs them on CuPy arrays.  Both compare
with the numpy kernels.  ``tests/cuda/test_layer_cases.py`` checks the catalogue
covers every layer type and neuron.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from convnet.layers import build_layer
from convnet.layers.base import Context
from tests.support.layers import (NEURON_SPECS, POSITIVE_DOMAIN, conv_def, fc_def, norm_def,
                                  pool_def, simple_def)

TRAIN = Context(train=True, seed=11, step=3, case_offset=5)


@dataclass
class LayerCase:
    ldef: object
    make_inputs: Callable  # rng -> list of float64 host arrays
    ctx: Context = field(default=TRAIN)


def _normal(ldef, batch=3, positive=False):
    def make(rng):
        out = []
        for shape in ldef.input_shapes:
            x = rng.standard_normal((batch,) + tuple(shape))
            out.append(np.abs(x) + 0.2 if positive else x)
        return out
    return make


def _probs(rng, n, k):
    p = rng.random((n, k)) + 0.05
    return p / p.sum(axis=1, keepdims=True)


def layer_cases() -> dict[str, LayerCase]:
    cases: dict[str, LayerCase] = {}

    def add(name, ldef, make=None, ctx=TRAIN, batch=3):
        cases[name] = LayerCase(ldef, make or _normal(ldef, batch), ctx)

    conv = {
        "plain": dict(in_shapes=((3, 9, 9),), fs=3, padding=1, stride=1, filters=8),
        "stride_overhang": dict(in_shapes=((2, 7, 7),), fs=3, padding=1, stride=2),
        "no_pad_ceil": dict(in_shapes=((2, 6, 6),), fs=3, padding=0, stride=2),
        "wide_filter": dict(in_shapes=((8, 9, 9),), fs=5, padding=2, stride=1, filters=4),
        "alexnet_like": dict(in_shapes=((3, 23, 23),), fs=11, padding=0, stride=4, filters=8),
        "groups2": dict(in_shapes=((4, 5, 5),), filters=6, groups=2),
        "groups3": dict(in_shapes=((6, 5, 5),), filters=3, groups=3, fs=2, padding=0),
        "unshared_bias": dict(in_shapes=((3, 5, 5),), shared_biases=False, neuron_="tanh[1,1]"),
        "multi_input": dict(in_shapes=((3, 6, 6), (2, 5, 5)), fs=[3, 4], padding=[1, 2],
                            stride=[1, 1], filters=4),
        "multi_input_groups": dict(in_shapes=((4, 6, 6), (2, 3, 3)), fs=[3, 1], padding=[0, 0],
                                   stride=[2, 1], groups=[2, 1], filters=4, neuron_="relu"),
        # cuda-convnet v1's randSparse: 4 groups reading 2 of 4 channels each (gathered
        # with array operations, then the grouped kernels)
        "rand_sparse": dict(in_shapes=((4, 5, 5),), filters=8, groups=4, rand_sparse=True,
                            filter_channels=2),
    }
    for name, kw in conv.items():
        add(f"conv-{name}", conv_def(**kw), batch=2)
        kw = {k: v for k, v in kw.items() if k != "shared_biases"}
        add(f"local-{name}", conv_def(type_="local", **kw), batch=2)
    add("fc-flat", fc_def(in_shapes=((5,),), outputs=3))
    add("fc-image", fc_def(in_shapes=((2, 3, 3),), outputs=4, neuron_="logistic"))
    add("fc-multi", fc_def(in_shapes=((5,), (2, 2, 2), (3,)), outputs=4))
    pools = {
        "overhang": dict(in_shape=(3, 8, 8), size=3, stride=2, start=0),
        "start_negative": dict(in_shape=(2, 7, 7), size=3, stride=2, start=-1),
        "start_negative_big": dict(in_shape=(2, 6, 6), size=4, stride=3, start=-2),
        "start_positive": dict(in_shape=(2, 7, 7), size=2, stride=2, start=1),
        "stride_equals_size": dict(in_shape=(2, 7, 7), size=3, stride=3, start=0),
        "given_outputs": dict(in_shape=(2, 6, 6), size=2, stride=2, start=0, outputs_x=2),
        "empty_window": dict(in_shape=(2, 8, 8), size=3, stride=2, start=0, outputs_x=5),
    }
    for kind in ("max", "avg", "maxabs"):
        for name, kw in pools.items():
            add(f"pool-{kind}-{name}", pool_def(pool=kind, **kw))
    for kind in ("cmrnorm", "rnorm", "cnorm"):
        for size, pow_, min_div in [(3, 0.75, 1.0), (4, 0.5, 2.0), (5, 1.3, 0.7), (9, 0.75, 1.0)]:
            channels = 10 if size == 9 else 6
            add(f"{kind}-{size}-{pow_}",
                norm_def(kind, in_shape=(channels, 7, 7), size=size, pow_=pow_, min_div=min_div,
                         scale=2.0), batch=2)
    add("cmrnorm-relu", norm_def("cmrnorm", neuron_="relu"), batch=2)
    for name, spec in NEURON_SPECS.items():
        ldef = simple_def("neuron", [(4, 3, 3)], neuron_=spec, name=f"n_{name}")
        add(f"neuron-{name}", ldef, _normal(ldef, positive=name in POSITIVE_DOMAIN))
        if name in POSITIVE_DOMAIN:
            ldef = simple_def("eltsum", [(6,), (6,)], neuron_=spec, attrs={"coeffs": [1.0, 0.5]},
                              name=f"inline_{name}")
            add(f"inline-{name}", ldef, _normal(ldef, positive=True))
        else:
            add(f"inline-{name}", fc_def(in_shapes=((2, 2, 2),), outputs=5, neuron_=spec,
                                         name=f"inline_{name}"))
    add("softmax", simple_def("softmax", [(5,)]), batch=4)
    add("softmax-1000", simple_def("softmax", [(1000,)]), batch=4)
    for topk, coeff in [(1, 1.0), (3, 0.5)]:
        ldef = simple_def("cost.logreg", [(1,), (5,)], out_shape=(1,),
                          params={"coeff": coeff, "topk": topk})
        add(f"logreg-{topk}", ldef, lambda rng: [rng.integers(0, 5, (6, 1)).astype(np.float64),
                                                 _probs(rng, 6, 5)])
    ldef = simple_def("cost.crossent", [(4,), (4,)], out_shape=(1,), params={"coeff": 0.3})
    add("crossent", ldef, lambda rng: [_probs(rng, 5, 4), _probs(rng, 5, 4)])
    ldef = simple_def("cost.bce", [(3,), (3,)], out_shape=(1,),
                      params={"coeff": 0.7, "posWeight": 2.5})
    add("bce", ldef, lambda rng: [rng.random((5, 3)), rng.uniform(0.05, 0.95, (5, 3))])
    add("sum2", simple_def("cost.sum2", [(2, 3, 3)], out_shape=(1,), params={"coeff": 0.25}))
    for type_ in ("dropout", "dropout2"):
        for train, enable in [(True, True), (False, True), (True, False)]:
            ldef = simple_def(type_, [(5, 4, 4)], params={"keep": 0.6, "enable": enable},
                              neuron_="tanh[1,1]", name=f"{type_}_layer")
            add(f"{type_}-{'train' if train else 'test'}-{'on' if enable else 'off'}", ldef,
                ctx=Context(train=train, seed=11, step=3, case_offset=4), batch=6)
    for type_ in ("pass", "concat"):
        add(type_, simple_def(type_, [(2, 3, 3), (3, 3, 3), (4,)], out_shape=(2 * 9 + 27 + 4,),
                              neuron_="logistic"))
    add("pass-single", simple_def("pass", [(2, 3, 3)], neuron_="softrelu"))
    add("eltsum", simple_def("eltsum", [(3, 2, 2)] * 3, attrs={"coeffs": [1.0, -0.5, 2.0]}))
    add("eltmax", simple_def("eltmax", [(3, 2, 2)] * 3, neuron_="square"))
    add("sum", simple_def("sum", [(6, 3, 3)], out_shape=(3, 3, 3), attrs={"stride": 2}))
    add("sum-all", simple_def("sum", [(6, 3, 3)], out_shape=(1, 3, 3)))
    for name, shape, neuron_, ctx in [("image", (4, 3, 3), "relu", TRAIN),
                                      ("flat", (6,), None, TRAIN),
                                      ("test", (4, 3, 3), None, Context(train=False))]:
        add(f"bnorm-{name}", simple_def("bnorm", [shape], neuron_=neuron_, attrs={
            "channels": shape[0], "epsilon": 1e-3, "decay": 0.9, "stats": "global"}),
            ctx=ctx, batch=5)
    return cases


def forward_backward(case: LayerCase, to_array: Callable, to_host: Callable,
                     dtype=np.float32, seed: int = 0) -> dict[str, np.ndarray]:
    """Run one case's forward and backward with arrays made by ``to_array`` (host ->
    numpy or CuPy array); returns host copies of the output, metrics and every gradient."""
    rng = np.random.default_rng(seed)
    ldef = case.ldef
    layer = build_layer(ldef)
    host_inputs = [x.astype(dtype) for x in case.make_inputs(rng)]
    host_params = {k: v.astype(dtype) for k, v in layer.init_params(rng).items()}
    inputs = [to_array(x) for x in host_inputs]
    params = {k: to_array(v) for k, v in host_params.items()}
    y, state = layer.forward(inputs, params, case.ctx)
    out = {"y": to_host(y)}
    if ldef.is_cost:
        for k, v in layer.metrics(inputs, y).items():
            out[f"metric-{k}"] = np.asarray(float(v))
        grad = None
    else:
        grad = to_array(rng.standard_normal(tuple(y.shape)).astype(dtype))
    need = [layer.input_differentiable(i) for i in range(len(inputs))]
    mask = state[0] if getattr(layer, "neuron", None) is not None else state  # (state, z)
    if ldef.type in ("dropout", "dropout2") and mask is not None:
        out["mask"] = to_host(mask).astype(np.float32)
    in_grads, param_grads = layer.backward(grad, inputs, y, params, state, case.ctx, need)
    for i, g in enumerate(in_grads):
        if g is not None:
            out[f"d_in{i}"] = to_host(g)
    for k, g in param_grads.items():
        out[f"d_{k}"] = to_host(g)
    return out
