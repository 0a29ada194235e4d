"""Layer micro-benchmark: forward + backward of every layer of the CIFAR-10
reference net (cuda-convnet2's layers-cifar10-11pct.cfg), this engine's numpy
kernels against the same operations in PyTorch on the CPU.

    python bench/bench_layers.py [--size 24|32] [--batch 128] [--repeat 10] [--threads N]
                                 [--stat min|median] [--no-torch]

Each row times one layer: its forward pass and its backward pass (input and
weight gradients) on a minibatch, in float32.  The PyTorch column builds the
same computation from torch ops (conv2d on an explicitly padded input, so
that the ceiling-rule output size matches; max_pool2d with ceil_mode;
local_response_norm; a locally-connected layer as unfold + batched matmul;
linear; softmax; -log p[label]) and runs autograd.  Times are the minimum
(``--stat median``: the median) of ``--repeat`` runs after one warm-up; the
minimum is the least disturbed by other processes on a shared machine.
ratio = engine / PyTorch (below 1 means the engine is faster).  Both
libraries are limited to the same thread count, and are timed in two
separate phases so that one's idle worker threads do not slow the other.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REF = ROOT / "examples" / "cuda-convnet2"
DEFAULT_DEF = REF / "layers-cifar10-11pct.cfg"
DEFAULT_PARAMS = REF / "layer-params-cifar10-11pct.cfg"


def _timeit(fn, repeat: int, stat: str = "min") -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return (min(times) if stat == "min" else statistics.median(times)) * 1e3


def _engine_case(ldef, layer, params, inputs, ctx):
    need = [layer.input_differentiable(i) and not (ldef.is_cost and i == 0)
            for i in range(len(inputs))]

    def run():
        out, state = layer.forward(inputs, params, ctx)
        g = None if ldef.is_cost else np.ones_like(out)
        layer.backward(g, inputs, out, params, state, ctx, need)
    return run


def _torch_case(torch, ldef, params, inputs):
    """A closure running the same layer forward+backward with torch ops."""
    F = torch.nn.functional
    a = ldef.attrs
    t = ldef.type
    x = torch.from_numpy(np.ascontiguousarray(inputs[-1])).requires_grad_(not ldef.is_cost
                                                                         or t == "cost.logreg")
    w = {k: torch.from_numpy(v).requires_grad_() for k, v in params.items()}

    def neuron(y):
        if ldef.neuron is None:
            return y
        if ldef.neuron.name == "relu":
            return F.relu(y)
        raise NotImplementedError(ldef.neuron.name)

    if t == "conv":
        fs, p, s = a["filterSize"][0], a["padding"][0], a["stride"][0]
        m, img = a["modulesX"], a["imgSize"][0]
        right = (m - 1) * s + fs - img - p

        def op():
            y = F.conv2d(F.pad(x, (p, right, p, right)), w["W0"], None, stride=s,
                         groups=a["groups"][0])
            b = w["b"]
            y = y + (b.view(1, -1, 1, 1) if b.dim() == 1 else b.unsqueeze(0))
            return neuron(y)
    elif t == "local":
        fs, p, s = a["filterSize"][0], a["padding"][0], a["stride"][0]
        m, img = a["modulesX"], a["imgSize"][0]
        right = (m - 1) * s + fs - img - p
        wl = w["W0"]
        n = x.shape[0]

        def op():
            cols = F.unfold(F.pad(x, (p, right, p, right)), fs, stride=s)  # (N, K, P)
            cols = cols.permute(2, 1, 0)                                      # (P, K, N)
            y = torch.bmm(wl.reshape(m * m, wl.shape[1], -1), cols)          # (P, F, N)
            y = y.permute(2, 1, 0).reshape(n, -1, m, m) + w["b"].unsqueeze(0)
            return neuron(y)
    elif t == "pool":
        assert a["pool"] == "max" and a["start"] == 0

        def op():
            y = F.max_pool2d(x, a["sizeX"], a["stride"], ceil_mode=True)
            assert y.shape[-1] == a["outputsX"]
            return neuron(y)
    elif t == "cmrnorm":
        pr = ldef.params

        def op():
            return neuron(F.local_response_norm(x, a["size"], alpha=pr["scale"], beta=pr["pow"],
                                                k=pr.get("minDiv", 1.0)))
    elif t == "fc":
        def op():
            return neuron(F.linear(x.reshape(x.shape[0], -1), w["W0"].t(), w["b"]))
    elif t == "softmax":
        def op():
            return F.softmax(x, dim=1)
    elif t == "cost.logreg":
        labels = torch.from_numpy(inputs[0].reshape(-1).astype(np.int64))

        def op():
            return -torch.log(x.gather(1, labels.view(-1, 1)).clamp_min(1e-30)).view(-1)
    else:
        raise NotImplementedError(t)

    def run():
        for v in [x] + list(w.values()):
            v.grad = None
        y = op()
        if ldef.is_cost:
            y.sum().backward()
        else:
            y.backward(torch.ones_like(y))
    return run, op


def _inputs_for(ldef, batch: int, rng, num_classes: int):
    out = []
    for i, shape in enumerate(ldef.input_shapes):
        if ldef.type == "cost.logreg" and i == 0:
            out.append(rng.integers(0, num_classes, size=(batch, 1)).astype(np.float32))
        elif ldef.type == "cost.logreg":
            z = rng.standard_normal((batch,) + tuple(shape)).astype(np.float32)
            z = np.exp(z - z.max(axis=1, keepdims=True))
            out.append((z / z.sum(axis=1, keepdims=True)).astype(np.float32))
        else:
            out.append(rng.standard_normal((batch,) + tuple(shape)).astype(np.float32))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer-def", default=str(DEFAULT_DEF))
    ap.add_argument("--layer-params", default=str(DEFAULT_PARAMS))
    ap.add_argument("--size", type=int, default=24, help="image side (24: cuda-convnet2's crop)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--stat", choices=["min", "median"], default="min")
    ap.add_argument("--no-torch", action="store_true", help="time the engine only")
    args = ap.parse_args(argv)

    from threadpoolctl import threadpool_limits

    from convnet.config import load_net
    from convnet.layers import build_layer
    from convnet.layers.base import Context

    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(args.threads)
        except ImportError:
            print("PyTorch is not installed: timing the engine only (pip install '.[bench]')")

    net = load_net(args.layer_def, args.layer_params,
                   data_dims={0: (3, args.size, args.size), 1: (1,)}, num_classes=10)
    rng = np.random.default_rng(0)
    ctx = Context(train=True)
    print(f"layers of {Path(args.layer_def).name}, input 3x{args.size}x{args.size}, "
          f"minibatch {args.batch}, float32, {args.threads} thread(s), {args.stat} of {args.repeat}")
    print(f"numpy {np.__version__}" + (f", torch {torch.__version__}" if torch else "") +
          f", {platform.processor() or platform.machine()}")
    header = f"{'layer':<10} {'type':<12} {'output':<12} {'engine ms':>10}"
    if torch:
        header += f" {'torch ms':>9} {'ratio':>6}"
    print(header)
    cases = []
    for ldef in net:
        if ldef.is_data:
            continue
        layer = build_layer(ldef)
        params = layer.init_params(np.random.default_rng(1))
        cases.append((ldef, layer, params, _inputs_for(ldef, args.batch, rng, net.num_classes)))
    # The engine's and PyTorch's thread pools spin for a while after each parallel
    # region and slow each other down when interleaved: time them in two phases.
    engine_ms = {}
    with threadpool_limits(args.threads):
        for ldef, layer, params, inputs in cases:
            engine_ms[ldef.name] = _timeit(_engine_case(ldef, layer, params, inputs, ctx),
                                           args.repeat, args.stat)
    torch_ms, differs = {}, set()
    if torch:
        time.sleep(1.0)
        for ldef, layer, params, inputs in cases:
            run, op = _torch_case(torch, ldef, params, inputs)
            with threadpool_limits(args.threads):
                ours = layer.forward(inputs, params, ctx)[0]
            with torch.no_grad():
                ref = op().numpy()
            if not np.allclose(ours.reshape(ref.shape), ref, rtol=1e-3, atol=1e-4):
                differs.add(ldef.name)
            torch_ms[ldef.name] = _timeit(run, args.repeat, args.stat)
    tot_e = tot_t = 0.0
    for ldef, layer, params, inputs in cases:
        te = engine_ms[ldef.name]
        tot_e += te
        shape = "x".join(map(str, ldef.output_shape))
        line = f"{ldef.name:<10} {ldef.type:<12} {shape:<12} {te:10.2f}"
        if torch:
            tt = torch_ms[ldef.name]
            tot_t += tt
            line += f" {tt:9.2f} {te / tt:6.2f}"
            if ldef.name in differs:
                line += "  (outputs differ!)"
        print(line)
    total = f"{'total':<10} {'':<12} {'':<12} {tot_e:10.2f}"
    if torch:
        total += f" {tot_t:9.2f} {tot_e / tot_t:6.2f}"
    print(total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
