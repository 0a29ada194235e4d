"""Each layer type's test-mode forward pass written as ONNX operators.

The arithmetic is the engine's own (:mod:`convnet.kernels`), with cuda-convnet2's
geometry made explicit where ONNX's differs:

* conv: weights are stored (filters, channels / groups, fs, fs), ONNX's layout;
  the output side ``1 + ceil((2 pad + img - fs) / stride)`` can need windows past
  the padded edge, which read zeros: padding at the end says so (and a ``modulesX``
  below it, the first windows of those that fit: a Slice).
* pool: a window covers ``[start + x stride, start + x stride + size)`` clipped to
  the image; the image is padded (-inf for max, 0 for avg) so that every window
  fits, and an average is rescaled from size^2 to the pixels inside it (where a
  window reaches outside the image).
* cmrnorm of odd size is LRN (ONNX's alpha is cuda-convnet2's scale; both divide
  it by size); of even size its window is not centred like LRN's, so it is a 1x1
  conv with a 0/1 band matrix; rnorm and cnorm are averages over padded windows.
* dropout is the identity at test time, dropout2 and the ``dropout=`` key of conv
  and fc layers scale by what they keep.
* bnorm is BatchNormalization with its running averages (what testing uses): ``W0``,
  ``b``, ``mean`` and ``var`` are its scale, B, input_mean and input_var, ``decay``
  its momentum (for a trainer, or an import, to carry on with).

* local: the windows are copied out by a conv with one-hot filters, then one
  batched MatMul over the output positions (weights (positions, filters, ...)).

A layer with no faithful form (maxabs pooling, whose ties the engine breaks by
window order; a cost layer) raises a one-line error naming it.
"""

from __future__ import annotations

import math

import numpy as np

from convnet.errors import ConfigError

#: (tensor name, per-case shape) of a layer's output in the graph.
Tensor = tuple[str, tuple[int, ...]]


def refuse(ldef, why: str) -> ConfigError:
    return ConfigError(f"--export-onnx: layer '{ldef.name}' ({ldef.type}) {why}",
                       file=ldef.file)


def as_image(g, tensor: Tensor, channels: int, img: int) -> str:
    name, shape = tensor
    return name if shape == (channels, img, img) else g.reshape(name, (channels, img, img), "img")


def as_flat(g, tensor: Tensor) -> str:
    name, shape = tensor
    return name if len(shape) == 1 else g.op("Flatten", [name], "flat", axis=1)


def per_input(value, n: int) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value] * n


def geometry(ldef, key: str, n: int, default=None) -> list:
    return per_input(ldef.attrs.get(key, default), n)


def image_of(ldef, index: int = 0) -> tuple[int, int]:
    """(channels, side) of input ``index`` as the layer reads it."""
    shape = tuple(ldef.input_shapes[index])
    channels = ldef.attrs.get("channels")
    channels = int(per_input(channels, len(ldef.inputs))[index]) if channels else shape[0]
    img = ldef.attrs.get("imgSize")
    if img is None:
        img = shape[-1] if len(shape) == 3 else int(round(math.sqrt(math.prod(shape) / channels)))
    return channels, int(per_input(img, len(ldef.inputs))[index])


# --------------------------------------------------------------------- weighted

def conv_windows(g, ldef, x: str, w: str, fs: int, pad: int, stride: int, img: int,
                 modules: int, groups: int) -> str:
    """ONNX Conv over cuda-convnet2's ``modules`` x ``modules`` windows, whose ceiling
    rule lets the last windows hang past the padded edge: they read zeros, so the
    padding at the end reaches as far as they do.  A layer's ``modulesX`` may ask for
    fewer windows than fit: then the end has no padding, and the windows beyond the
    first ``modules`` are cut off."""
    end = max((modules - 1) * stride + fs - pad - img, 0)  # the padded side holds them all
    y = g.op("Conv", [x, w], f"{ldef.name}_conv", strides=[stride, stride],
             pads=[pad, pad, end, end], group=groups, kernel_shape=[fs, fs])
    if (img + pad + end - fs) // stride + 1 > modules:
        y = g.slice(y, [0, 0], [modules, modules], [2, 3], f"{ldef.name}_windows")
    return y


def conv(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    a, n = ldef.attrs, len(ldef.inputs)
    modules, filters = int(a["modulesX"]), int(a["filters"])
    total = None
    for i in range(n):
        channels, img = image_of(ldef, i)
        fs, pad = int(geometry(ldef, "filterSize", n)[i]), int(geometry(ldef, "padding", n, 0)[i])
        stride, groups = int(geometry(ldef, "stride", n, 1)[i]), int(geometry(ldef, "groups", n, 1)[i])
        y = conv_windows(g, ldef, as_image(g, inputs[i], channels, img),
                         g.const(weights[f"W{i}"], f"{ldef.name}_W{i}"), fs, pad, stride,
                         img, modules, groups)
        total = y if total is None else g.op("Add", [total, y], f"{ldef.name}_sum")
    b = weights["b"]
    bias = b.reshape(1, filters, 1, 1) if b.ndim == 1 else b.reshape(1, filters, modules, modules)
    return g.op("Add", [total, g.const(bias, f"{ldef.name}_b")], ldef.name)


def local(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    """Locally connected: the windows copied out by a conv with one-hot filters (exact),
    then one batched MatMul over the output positions, as the engine computes it."""
    a, n = ldef.attrs, len(ldef.inputs)
    modules, filters = int(a["modulesX"]), int(a["filters"])
    positions = modules * modules
    total = None
    for i in range(n):
        channels, img = image_of(ldef, i)
        fs, pad = int(geometry(ldef, "filterSize", n)[i]), int(geometry(ldef, "padding", n, 0)[i])
        stride, groups = int(geometry(ldef, "stride", n, 1)[i]), int(geometry(ldef, "groups", n, 1)[i])
        window = channels * fs * fs
        one_hot = np.eye(window, dtype=np.float32).reshape(window, channels, fs, fs)
        patches = conv_windows(g, ldef, as_image(g, inputs[i], channels, img),
                               g.const(one_hot, f"{ldef.name}_windows"), fs, pad, stride,
                               img, modules, groups=1)
        cols = g.op("Transpose", [g.reshape(patches, (window, positions), f"{ldef.name}_cols")],
                    f"{ldef.name}_by_position", perm=[2, 0, 1])  # (P, N, K)
        w = weights[f"W{i}"].reshape(positions, filters, -1)  # (P, F, K / groups)
        fg, kg = filters // groups, w.shape[2]
        parts = []
        for gi in range(groups):
            group_cols = cols if groups == 1 else g.slice(
                cols, [gi * kg], [(gi + 1) * kg], [2], f"{ldef.name}_group")
            w_group = np.ascontiguousarray(w[:, gi * fg:(gi + 1) * fg].transpose(0, 2, 1))
            parts.append(g.op("MatMul", [group_cols, g.const(w_group, f"{ldef.name}_W{i}")],
                              f"{ldef.name}_mm"))  # (P, N, F / groups)
        y = parts[0] if groups == 1 else g.op("Concat", parts, f"{ldef.name}_groups", axis=2)
        total = y if total is None else g.op("Add", [total, y], f"{ldef.name}_sum")
    y = g.reshape(g.op("Transpose", [total], f"{ldef.name}_nfp", perm=[1, 2, 0]),
                  (filters, modules, modules), f"{ldef.name}_maps")
    bias = weights["b"].reshape(1, filters, modules, modules)
    return g.op("Add", [y, g.const(bias, f"{ldef.name}_b")], ldef.name)


def fc(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    total = None
    for i, tensor in enumerate(inputs):
        y = g.op("MatMul", [as_flat(g, tensor), g.const(weights[f"W{i}"], f"{ldef.name}_W{i}")],
                 f"{ldef.name}_mm")
        total = y if total is None else g.op("Add", [total, y], f"{ldef.name}_sum")
    return g.op("Add", [total, g.const(weights["b"], f"{ldef.name}_b")], ldef.name)


# ---------------------------------------------------------------------- pooling

def pool(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    a = ldef.attrs
    kind = a.get("pool", "max")
    if kind not in ("max", "avg"):
        raise refuse(ldef, f"pools by {kind}, which has no ONNX form with the engine's ties")
    channels, img = image_of(ldef)
    size, stride = int(a["sizeX"]), int(a.get("stride", 1))
    start, outputs = int(a.get("start", 0) or 0), int(a["outputsX"])
    left = max(0, -start)
    last_end = start + (outputs - 1) * stride + size
    right = max(0, last_end - img)
    x = as_image(g, inputs[0], channels, img)
    if left or right:
        fill = -np.inf if kind == "max" else 0.0
        x = g.op("Pad", [x, g.const([0, 0, left, left, 0, 0, right, right], "pads", np.int64),
                         g.const(fill, "fill")], f"{ldef.name}_pad")
    if start > 0:
        x = g.slice(x, [start, start], [img + right, img + right], [2, 3], f"{ldef.name}_from")
    natural = (left + img + right - max(start, 0) - size) // stride + 1
    lo = start + stride * np.arange(outputs)
    inside = np.clip(np.minimum(lo + size, img) - np.maximum(lo, 0), 1, None)
    rescale = (size * size) / np.outer(inside, inside)  # from a mean over size^2 to one inside
    rescaled = kind == "avg" and np.any(rescale != 1)
    op = "MaxPool" if kind == "max" else "AveragePool"
    # the last node carries the layer's name (what an import names the layer after)
    last = natural <= outputs and not rescaled
    y = g.op(op, [x], ldef.name if last else f"{ldef.name}_{kind}",
             kernel_shape=[size, size], strides=[stride, stride])
    if natural > outputs:
        y = g.slice(y, [0, 0], [outputs, outputs], [2, 3],
                    f"{ldef.name}_cut" if rescaled else ldef.name)
    if not rescaled:  # every window inside the image: the plain average
        return y
    return g.op("Mul", [y, g.const(rescale, f"{ldef.name}_inside")], ldef.name)


# ---------------------------------------------------------------- normalisation

def _divide_by_power(g, ldef, x: str, window_mean: str) -> str:
    """x * (minDiv + scale * window_mean)^(-pow)."""
    p = ldef.params
    d = g.op("Add", [g.op("Mul", [window_mean, g.const(float(p.get("scale", 0.0)), "scale")],
                          f"{ldef.name}_scaled"),
                     g.const(float(p.get("minDiv", 1.0)), "min_div")], f"{ldef.name}_denom")
    factor = g.op("Pow", [d, g.const(-float(p.get("pow", 0.0)), "neg_pow")], f"{ldef.name}_pow")
    return g.op("Mul", [x, factor], ldef.name)


def _window_mean(g, ldef, x: str, size: int, count_pad: bool) -> str:
    """The mean over the size x size window starting size // 2 up and left (clipped):
    over size^2 pixels, zeros outside counted (``count_pad``), or over those inside."""
    h = size // 2
    return g.op("AveragePool", [x], f"{ldef.name}_mean", kernel_shape=[size, size],
                strides=[1, 1], pads=[h, h, size - 1 - h, size - 1 - h],
                count_include_pad=int(count_pad))


def cmrnorm(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    channels, img = image_of(ldef)
    size = int(ldef.attrs["size"])
    x = as_image(g, inputs[0], channels, img)
    p = ldef.params
    if size % 2:
        return g.op("LRN", [x], ldef.name, size=size, alpha=float(p.get("scale", 0.0)),
                    beta=float(p.get("pow", 0.0)), bias=float(p.get("minDiv", 1.0)))
    h = size // 2
    offset = np.arange(channels)[None, :] - np.arange(channels)[:, None]  # k - c
    band = ((offset >= -h) & (offset < size - h)).astype(np.float32) / size
    squares = g.op("Mul", [x, x], f"{ldef.name}_sq")
    mean = g.op("Conv", [squares, g.const(band[:, :, None, None], f"{ldef.name}_band")],
                f"{ldef.name}_mean", kernel_shape=[1, 1])
    return _divide_by_power(g, ldef, x, mean)


def rnorm(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    channels, img = image_of(ldef)
    x = as_image(g, inputs[0], channels, img)
    squares = g.op("Mul", [x, x], f"{ldef.name}_sq")
    return _divide_by_power(g, ldef, x, _window_mean(g, ldef, squares, int(ldef.attrs["size"]),
                                                     count_pad=True))


def cnorm(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    channels, img = image_of(ldef)
    size = int(ldef.attrs["size"])
    x = as_image(g, inputs[0], channels, img)
    centred = g.op("Sub", [x, _window_mean(g, ldef, x, size, count_pad=False)],
                   f"{ldef.name}_centred")
    squares = g.op("Mul", [centred, centred], f"{ldef.name}_sq")
    return _divide_by_power(g, ldef, x, _window_mean(g, ldef, squares, size, count_pad=True))


# ------------------------------------------------------------------ the others

def softmax(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    return g.op("Softmax", [as_flat(g, inputs[0])], ldef.name, axis=1)


def dropout(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    return inputs[0][0]


def dropout2(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    keep = float(ldef.params.get("keep", 0.5))
    return g.op("Mul", [inputs[0][0], g.const(keep, "keep")], ldef.name)


def concat(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    if len(inputs) == 1:
        return inputs[0][0]
    return g.op("Concat", [as_flat(g, t) for t in inputs], ldef.name, axis=1)


def _same_shape(g, inputs: list[Tensor]) -> list[str]:
    shape = inputs[0][1]
    return [name if s == shape else g.reshape(name, shape, "as_first") for name, s in inputs]


def eltsum(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    coeffs = per_input(ldef.attrs.get("coeffs", ldef.params.get("coeffs", 1.0)), len(inputs))
    total = None
    for c, x in zip(coeffs, _same_shape(g, inputs)):
        term = x if float(c) == 1.0 else g.op("Mul", [x, g.const(float(c), "coeff")], "term")
        total = term if total is None else g.op("Add", [total, term], ldef.name)
    return total


def eltmax(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    return g.op("Max", _same_shape(g, inputs), ldef.name)


def channel_sum(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    """``sum``: channels added in consecutive groups of ``stride``."""
    name, shape = inputs[0]
    channels, pixels = shape[0], math.prod(shape[1:])
    stride = int(ldef.attrs.get("stride") or channels)
    grouped = g.reshape(name, (channels // stride, stride, pixels), f"{ldef.name}_grouped")
    return g.op("ReduceSum", [grouped, g.const([2], "axes", np.int64)], ldef.name, keepdims=0)


def bnorm(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    """BatchNormalization with the running averages, per channel of the input as
    (channels, pixels) (an image's own shape; a flat input's features as channels)."""
    name, shape = inputs[0]
    input_shape = tuple(int(d) for d in ldef.input_shapes[0])
    x = name if shape == input_shape else g.reshape(name, input_shape, f"{ldef.name}_in")
    arrays = [g.const(weights[k], f"{ldef.name}_{k}") for k in ("W0", "b", "mean", "var")]
    return g.op("BatchNormalization", [x] + arrays, ldef.name,
                epsilon=float(ldef.attrs.get("epsilon", 1e-5)),
                momentum=float(ldef.attrs.get("decay", 0.9)))


def neuron_layer(g, ldef, inputs: list[Tensor], weights: dict) -> str:
    return inputs[0][0]  # the neuron itself is applied as every layer's inline one


#: type -> translation of the layer's own arithmetic (before its inline neuron).
TRANSLATIONS = {"conv": conv, "local": local, "fc": fc, "pool": pool, "cmrnorm": cmrnorm, "rnorm": rnorm,
                "cnorm": cnorm, "softmax": softmax, "dropout": dropout, "dropout2": dropout2,
                "pass": concat, "concat": concat, "eltsum": eltsum, "eltmax": eltmax, "sum": channel_sum,
                "neuron": neuron_layer, "bnorm": bnorm}


# ---------------------------------------------------------------------- neurons

def neuron(g, spec, x: str, hint: str) -> str:
    """``x`` through a neuron of :data:`convnet.kernels.neurons.NEURONS` (spec: name, args)."""
    name, a = spec.name, [float(v) for v in spec.args]

    def c(value):
        return g.const(value, "neuron_arg")

    if name == "ident":
        return x
    simple = {"logistic": "Sigmoid", "abs": "Abs", "relu": "Relu", "nrelu": "Relu",
              "softrelu": "Softplus", "sqrt": "Sqrt"}
    if name in simple:
        return g.op(simple[name], [x], hint)
    if name == "square":
        return g.op("Mul", [x, x], hint)
    if name == "log":
        return g.op("Log", [g.op("Add", [x, c(a[0])], hint + "_shift")], hint)
    if name in ("tanh", "abstanh"):
        t = g.op("Tanh", [g.op("Mul", [x, c(a[1] if name == "tanh" else abs(a[1]))],
                               hint + "_in")], hint + "_tanh")
        if name == "abstanh":
            t = g.op("Abs", [t], hint + "_abs")
        return g.op("Mul", [t, c(a[0])], hint)
    if name == "brelu":
        return g.op("Clip", [x, c(0.0), c(a[0])], hint)
    if name == "linear":
        return g.op("Add", [g.op("Mul", [x, c(a[0])], hint + "_mul"), c(a[1])], hint)
    if name == "drelu":
        t = g.op("Tanh", [g.op("Div", [x, c(a[0])], hint + "_in")], hint + "_tanh")
        return g.op("Sub", [x, g.op("Mul", [t, c(a[0])], hint + "_mul")], hint)
    raise ValueError(f"neuron {name!r} has no ONNX translation")


def translate(g, ldef, inputs: list[Tensor], weights: dict) -> Tensor:
    """The layer's test-mode output (its own arithmetic, the test-time scale of a
    ``dropout=`` key, its inline neuron) as (tensor, per-case shape)."""
    rule = TRANSLATIONS.get(ldef.type)
    if rule is None:
        raise refuse(ldef, "has no ONNX translation")
    y = rule(g, ldef, inputs, weights)
    keep = 1.0 - float(ldef.params.get("dropout", 0.0)) if ldef.type in ("conv", "fc") else 1.0
    # (local layers have no dropout= key: they do not drop outputs in the engine either)
    if keep != 1.0:
        y = g.op("Mul", [y, g.const(keep, "keep")], f"{ldef.name}_kept")
    if ldef.neuron is not None:
        y = neuron(g, ldef.neuron, y, f"{ldef.name}_neuron")
    shape = tuple(int(d) for d in ldef.output_shape)
    if ldef.type in IMAGE_OUTPUT:
        made = shape
    elif ldef.type == "sum":
        made = (shape[0], math.prod(shape[1:]))  # (groups, pixels)
    elif ldef.type in FLAT_OUTPUT and (len(inputs) > 1 or ldef.type not in ("pass", "concat")):
        made = (math.prod(shape),)
    else:
        made = inputs[0][1]
    return (y, made) if made == shape else (g.reshape(y, shape, f"{ldef.name}_shaped"), shape)


#: Types whose translation gives (N, C, H, W) of the layer's output shape (bnorm: the
#: output shape, flat or not) ...
IMAGE_OUTPUT = ("conv", "local", "pool", "cmrnorm", "rnorm", "cnorm", "bnorm")
#: ... and (N, features); the others keep their first input's shape.
FLAT_OUTPUT = ("fc", "softmax", "pass", "concat")
