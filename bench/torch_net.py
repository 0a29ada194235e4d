"""The engine's net as PyTorch ops, built from the parsed config: the reference side of
every benchmark (CPU in bench_training.py and bench_imagenet.py, CUDA in bench_cuda.py).

:func:`build` walks the layers of a :class:`~convnet.config.model.NetConfig` in order
and writes each as the torch op that computes the same function, from weights in the
engine's layouts (``{layer: {"W0": ..., "b": ...}}``).  Everything is generic in the
config: no layer name, size or net is special-cased.

* conv: ``conv2d`` with ``groups``; the right/bottom padding is what the ceiling rule
  (``modulesX``) needs, so an input that the rule pads unevenly (e.g. an 11x11 stride-4
  conv1 on 128x128 images) is padded explicitly.  A conv over several inputs with the
  same geometry (the model-parallel towers' ``inputs=pool2a,pool2b``) is one conv of
  the inputs and weights concatenated along the channels, which is what a PyTorch user
  would write; otherwise a sum of one conv per input.  Biases shared (F,) or per
  position (F, M, M).
* local: no PyTorch layer; ``unfold`` of the padded input and a batched matmul over
  the output positions.
* fc: ``x @ W`` per input, summed, plus the bias.
* pool: max with ``start=0`` is ``max_pool2d(ceil_mode=True)``; other starts and avg
  pooling pad explicitly (``-inf`` for max, counted-pixel division for avg).
* cmrnorm: ``local_response_norm(size, alpha=scale, beta=pow, k=minDiv)`` (PyTorch
  divides alpha by size, as cmrnorm does).  rnorm: the size x size window sum of x^2
  as ``avg_pool2d`` of the zero-padded square (x size^2 / size^2 = cmrnorm's
  ``scale / size^2``), then ``x * (minDiv + ...)^-pow``.
* dropout / dropout2: ``keep`` and ``enable`` as the engine reads them (dropout
  scales kept values by 1/keep at train time; dropout2 does not, and multiplies by
  ``keep`` when disabled).  At train time the mask comes from ``masks(layer, shape)``
  when given (the agreement check passes the engine's own masks, so both nets drop
  the same units), else from PyTorch's RNG (``F.dropout``, for timing).
* softmax feeding only ``cost.logreg``: fused into ``cross_entropy`` (log-softmax
  and the mean negative log likelihood in one op, the fast way in PyTorch); a softmax
  read by anything else is ``softmax`` and ``cost.logreg`` is ``-log p[label]``.
* concat / pass: ``cat`` of the flattened inputs; eltsum: ``sum coeffs[i] * x_i``;
  inline ``neuron=`` after the op.
* bnorm: ``batch_norm`` in training mode (the minibatch's statistics over every case,
  PyTorch's ``momentum`` = 1 - ``decay``) with the engine's ``W0`` and ``b`` as its
  weight and bias and its running averages as buffers (:attr:`TorchNet.buffers`, which
  the step moves as the engine's forward moves ``mean`` and ``var``).

The loss is the sum over cost layers of ``coeff`` x the mean cost over the cases:
the engine's gradients are sums over the cases divided by the number of cases in the
update, so one ``torch.optim.SGD`` step with the per-layer groups of
:func:`param_groups` (lr = epsW/epsB at progress 0, momentum, weight decay = wc on
weights only) is one engine step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from convnet.config.layer_types.weight_shapes import RUNNING_KEYS


@dataclass
class TorchNet:
    """A built net: ``loss(images, labels)``, its parameter tensors and SGD groups."""

    loss: Callable
    tensors: dict  # layer -> {key: tensor} of the arrays that learn
    groups: list   # torch.optim.SGD parameter groups, one per tensor
    buffers: dict  # layer -> {key: tensor} of the rest (bnorm's running mean and var)

    def optimizer(self, torch):
        return torch.optim.SGD(self.groups, lr=self.groups[0]["lr"] if self.groups else 0.0)

    def trainer(self, torch, images, labels):
        """A function that runs one SGD step of the net on these numpy arrays."""
        opt = self.optimizer(torch)
        x, y = torch.from_numpy(images), torch.from_numpy(labels)

        def step():
            opt.zero_grad(set_to_none=False)
            self.loss(x, y).backward()
            opt.step()
        return step

    def key_of(self, tensor) -> str:
        """'layer/key' of a parameter tensor."""
        for name, ts in self.tensors.items():
            for k, t in ts.items():
                if t is tensor:
                    return f"{name}/{k}"
        raise KeyError("not a parameter of this net")


def param_groups(net, tensors: dict) -> list[dict]:
    """One SGD group per tensor with the layer's learning rate (at progress 0),
    momentum and weight decay (weights only, as the engine's ``wc``)."""
    groups = []
    for name, ts in tensors.items():
        p = net[name].params
        for k, tensor in ts.items():
            if k == "b":
                lr, mom, wc = p["epsB"].value(0.0), p["momB"], 0.0
            else:
                i = int(k[1:])
                lr, mom, wc = p["epsW"][i].value(0.0), p["momW"][i], p["wc"][i]
            groups.append({"params": [tensor], "lr": lr, "momentum": mom, "weight_decay": wc})
    return groups


def _neuron(torch, y, spec):
    F = torch.nn.functional
    if spec is None or spec.name == "ident":
        return y
    a = spec.args
    table = {"relu": lambda: F.relu(y), "logistic": lambda: torch.sigmoid(y),
             "tanh": lambda: a[0] * torch.tanh(a[1] * y), "abs": lambda: y.abs(),
             "softrelu": lambda: F.softplus(y), "square": lambda: y * y,
             "sqrt": lambda: torch.sqrt(y), "linear": lambda: a[0] * y + a[1],
             "brelu": lambda: y.clamp(0, a[0])}
    if spec.name not in table:
        raise NotImplementedError(f"neuron {spec.name} in the PyTorch model")
    return table[spec.name]()


def _padded(F, x, fs: int, pad: int, stride: int, modules: int, value: float = 0.0):
    """x padded as the ceiling rule wants: ``pad`` left/top, the rest right/bottom."""
    right = (modules - 1) * stride + fs - x.shape[-1] - pad
    if pad == right == 0:
        return x
    return F.pad(x, (pad, right, pad, right), value=value)


def _conv(torch, xs, w, a, n: int, modules: int):
    """The conv's output, bias included (passed to ``conv2d`` when shared)."""
    F = torch.nn.functional
    geoms = [(a["filterSize"][i], a["padding"][i], a["stride"][i], a["groups"][i])
             for i in range(len(xs))]
    images = [x.reshape(n, a["channels"][i], a["imgSize"][i], a["imgSize"][i])
              for i, x in enumerate(xs)]
    shared = w["b"] if w["b"].dim() == 1 else None
    if len(set(geoms)) == 1 and geoms[0][3] == 1 and len(set(a["imgSize"])) == 1:
        fs, pad, st, _ = geoms[0]
        x = torch.cat(images, 1) if len(images) > 1 else images[0]
        weight = torch.cat([w[f"W{i}"] for i in range(len(xs))], 1) if len(xs) > 1 else w["W0"]
        right = (modules - 1) * st + fs - x.shape[-1] - pad
        if right == pad:
            y = F.conv2d(x, weight, shared, stride=st, padding=pad)
        else:
            y = F.conv2d(_padded(F, x, fs, pad, st, modules), weight, shared, stride=st)
    else:
        y = 0
        for i, x in enumerate(images):
            fs, pad, st, g = geoms[i]
            y = y + F.conv2d(_padded(F, x, fs, pad, st, modules), w[f"W{i}"],
                             shared if i == 0 else None, stride=st, groups=g)
    return y if shared is not None else y + w["b"].view(1, -1, modules, modules)


def _local(torch, xs, w, a, n: int, modules: int):
    F = torch.nn.functional
    y = 0
    for i, x in enumerate(xs):
        fs, pad, st, g = a["filterSize"][i], a["padding"][i], a["stride"][i], a["groups"][i]
        x = _padded(F, x.reshape(n, a["channels"][i], a["imgSize"][i], a["imgSize"][i]),
                    fs, pad, st, modules)
        cols = F.unfold(x, fs, stride=st).permute(2, 0, 1)  # (P, N, K)
        wl = w[f"W{i}"].reshape(modules * modules, w[f"W{i}"].shape[1], -1)  # (P, F, K)
        fg, kg = wl.shape[1] // g, cols.shape[2] // g
        parts = [torch.bmm(cols[:, :, j * kg:(j + 1) * kg],
                           wl[:, j * fg:(j + 1) * fg].transpose(1, 2)) for j in range(g)]
        out = parts[0] if g == 1 else torch.cat(parts, 2)  # (P, N, F)
        y = y + out.permute(1, 2, 0).reshape(n, -1, modules, modules)
    return y


def _pool(torch, x, a):
    F = torch.nn.functional
    size, stride, start = a["sizeX"], a["stride"], a["start"]
    s = x.shape[-1]
    outs = a["outputsX"] or 1 + math.ceil((s - start - size) / stride)
    if a["pool"] == "max" and start == 0:
        y = F.max_pool2d(x, size, stride, ceil_mode=True)
        if y.shape[-1] == outs:
            return y
    left = max(0, -start)
    right = max(0, start + (outs - 1) * stride + size - s)
    if a["pool"] == "max":
        xp = F.pad(x, (left, right, left, right), value=-math.inf)
        return F.max_pool2d(xp[..., left + start:, left + start:], size, stride)[..., :outs, :outs]
    if a["pool"] == "avg":
        xp = F.pad(x, (left, right, left, right))
        ones = F.pad(torch.ones_like(x[:1, :1]), (left, right, left, right))
        total = F.avg_pool2d(xp[..., left + start:, left + start:], size, stride)
        count = F.avg_pool2d(ones[..., left + start:, left + start:], size, stride)
        return (total / count.clamp_min(1e-30))[..., :outs, :outs]
    raise NotImplementedError(f"pool={a['pool']} in the PyTorch model")


def _rnorm(torch, x, size: int, scale: float, power: float, min_div: float):
    """cuda-convnet2's rnorm: x * (minDiv + scale/size^2 * window sum of x^2)^-pow over
    the size x size pixels from -size//2, zero outside the image."""
    F = torch.nn.functional
    h = size // 2
    sq = F.pad(x * x, (h, size - 1 - h, h, size - 1 - h))
    return x * (min_div + scale * F.avg_pool2d(sq, size, 1)) ** -power


def build(torch, net, weights: dict, device: str = "cpu",
          masks: Callable | None = None) -> TorchNet:
    """``net`` as torch ops on ``device``, from ``weights`` ({layer: {key: array}}).

    ``masks(layer, shape)``, where given, returns the train-time keep mask (bool numpy
    array) of a dropout layer; without it PyTorch draws its own.
    """
    F = torch.nn.functional
    dev = torch.device(device)
    tensors = {name: {k: torch.tensor(np.asarray(v), device=dev, requires_grad=True)
                      for k, v in ws.items() if k not in RUNNING_KEYS}
               for name, ws in weights.items()}
    buffers = {name: {k: torch.tensor(np.asarray(v), device=dev) for k, v in ws.items()
                      if k in RUNNING_KEYS} for name, ws in weights.items()}
    readers: dict[str, list[str]] = {}
    for ldef in net:
        for i in ldef.inputs:
            readers.setdefault(i, []).append(ldef.type)
    fused = {ldef.name for ldef in net if ldef.type == "softmax" and ldef.neuron is None
             and readers.get(ldef.name) and set(readers[ldef.name]) == {"cost.logreg"}}

    def dropout(ldef, x):
        keep, enabled = float(ldef.params["keep"]), bool(ldef.params["enable"])
        scaled = ldef.type == "dropout"
        if not enabled:
            return x if scaled else x * keep
        if masks is None:
            y = F.dropout(x, 1 - keep, training=True)
            return y if scaled else y * keep
        m = torch.from_numpy(np.asarray(masks(ldef.name, tuple(x.shape)), np.float32)).to(dev)
        return x * m / keep if scaled else x * m

    def loss(images, labels):
        acts, total, n = {}, 0.0, images.shape[0]
        for ldef in net:
            a, name, t = ldef.attrs, ldef.name, ldef.type
            if ldef.is_data:
                acts[name] = images if a["dataIdx"] == 0 else labels
                continue
            xs = [acts[i] for i in ldef.inputs]
            w = tensors.get(name, {})
            if any(a.get("randSparse") or ()):
                raise NotImplementedError("randSparse in the PyTorch model")
            if t == "conv":
                y = _conv(torch, xs, w, a, n, a["modulesX"])
            elif t == "local":
                m = a["modulesX"]
                y = _local(torch, xs, w, a, n, m) + w["b"].view(1, -1, m, m)
            elif t == "fc":
                if ldef.params.get("dropout"):
                    raise NotImplementedError("the dropout fork's fc dropout= in the PyTorch model")
                y = sum(x.reshape(n, -1) @ w[f"W{i}"] for i, x in enumerate(xs)) + w["b"]
            elif t == "pool":
                y = _pool(torch, xs[0].reshape((n,) + tuple(ldef.input_shapes[0])), a)
            elif t in ("cmrnorm", "rnorm"):
                p = ldef.params
                x = xs[0].reshape((n,) + tuple(ldef.input_shapes[0]))
                if t == "cmrnorm":
                    y = F.local_response_norm(x, a["size"], alpha=p["scale"], beta=p["pow"],
                                              k=p["minDiv"])
                else:
                    y = _rnorm(torch, x, a["size"], p["scale"], p["pow"], p["minDiv"])
            elif t == "softmax":
                x = xs[0].reshape(n, -1)
                y = x if name in fused else F.softmax(x, dim=1)
            elif t in ("pass", "concat"):
                y = torch.cat([x.reshape(n, -1) for x in xs], 1) if len(xs) > 1 else xs[0]
            elif t in ("dropout", "dropout2"):
                y = dropout(ldef, xs[0])
            elif t == "eltsum":
                coeffs = a.get("coeffs", 1.0)
                coeffs = coeffs if isinstance(coeffs, (list, tuple)) else [coeffs] * len(xs)
                y = sum(float(c) * x.reshape(xs[0].shape) for c, x in zip(coeffs, xs))
            elif t == "bnorm":
                x = xs[0].reshape((n,) + tuple(ldef.input_shapes[0]))
                run = buffers[name]
                y = F.batch_norm(x, run["mean"], run["var"], w["W0"], w["b"], training=True,
                                 momentum=1.0 - float(a["decay"]), eps=float(a["epsilon"]))
            elif t == "cost.logreg":
                lab = xs[0].reshape(-1).long()
                if ldef.inputs[1] in fused:
                    cost = F.cross_entropy(xs[1], lab)
                else:
                    p = xs[1].reshape(n, -1).gather(1, lab.view(-1, 1)).clamp_min(1e-30)
                    cost = -torch.log(p).mean()
                total = total + float(ldef.params["coeff"]) * cost
                continue
            else:
                raise NotImplementedError(f"layer type {t} in the PyTorch model")
            acts[name] = _neuron(torch, y, ldef.neuron)
        return total

    return TorchNet(loss, tensors, param_groups(net, tensors), buffers)
