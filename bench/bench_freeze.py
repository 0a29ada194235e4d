"""What freezing layers saves in a training step: the CIFAR-10 reference net with every
layer learning, against the same net with layers frozen (``epsW=0``, ``epsB=0``), in
this engine and, as the reference, in PyTorch (the frozen tensors' ``requires_grad``
off, which is how a PyTorch user freezes them).

    python bench/bench_freeze.py [--rounds 5] [--steps 5] [--mini 128] [--no-torch]

Three nets, each on one CPU device:

* ``all learn``: cuda-convnet2's ``layers-cifar10-11pct.cfg`` as it is;
* ``head only``: conv1, conv2, local3 and local4 frozen, fc10 learning (fine-tuning a
  new head): no backward pass at all below fc10, no updates of the frozen layers;
* ``conv2 frozen``: only conv2 frozen, between learning layers: its input gradient is
  still needed (conv1 learns), so only its update and the accumulation of its weight
  gradients go (the kernels still compute them).

The step is ``Executor.step`` (forward, backward, updates) on 3x32x32 random images;
the nets take turns in rounds (one warm-up round), and the table gives the median
step time and its ratio to ``all learn`` of the same library, measured in the same
process.  The machine may be shared: take the ratios, and rerun on a quiet machine
for the absolute figures.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

REF = ROOT / "examples" / "cuda-convnet2"
LAYER_DEF = REF / "layers-cifar10-11pct.cfg"
LAYER_PARAMS = REF / "layer-params-cifar10-11pct.cfg"
VARIANTS = {"all learn": (), "head only": ("conv1", "conv2", "local3", "local4"),
            "conv2 frozen": ("conv2",)}


def frozen_params(layers: tuple[str, ...], folder: Path) -> Path:
    """The reference params file with ``epsW`` and ``epsB`` 0 in ``layers``' sections."""
    text = LAYER_PARAMS.read_text()
    for layer in layers:
        start = text.index(f"[{layer}]\n")
        end = text.find("\n[", start + 1)
        end = len(text) if end < 0 else end
        section = re.sub(r"(?m)^(epsW|epsB)=.*$", r"\1=0", text[start:end])
        text = text[:start] + section + text[end:]
    path = folder / f"params-{'-'.join(layers) or 'none'}.cfg"
    path.write_text(text)
    return path


def engine_step(net, mini: int, batch):
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    ex = Executor(net, make_plan(net, (0,), mini), make_devices((0,), "cpu"), seed=0)
    return (lambda: ex.step(batch)), ex.close


def torch_step(net, mini: int, batch, frozen: tuple[str, ...]):
    import agreement
    import torch
    import torch_net

    tnet = torch_net.build(torch, net, agreement.initial_weights(net, (0,), mini))
    for layer in frozen:
        for tensor in tnet.tensors[layer].values():
            tensor.requires_grad_(False)
    return tnet.trainer(torch, *batch), (lambda: None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--mini", type=int, default=128)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)
    import numpy as np

    from convnet.config import load_net

    rng = np.random.default_rng(0)
    batch = [rng.standard_normal((args.mini, 3, 32, 32), dtype=np.float32),
             rng.integers(0, 10, (args.mini, 1)).astype(np.float32)]
    steps, closers = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, layers in VARIANTS.items():
            net = load_net(LAYER_DEF, frozen_params(layers, Path(tmp)),
                           {0: (3, 32, 32), 1: (1,)}, 10)
            steps[("engine", name)], close = engine_step(net, args.mini, batch)
            closers.append(close)
            if not args.no_torch:
                steps[("PyTorch", name)], close = torch_step(net, args.mini, batch, layers)
    times = {key: [] for key in steps}
    try:
        for round_index in range(args.rounds + 1):
            order = list(steps) if round_index % 2 else list(reversed(steps))
            for key in order:
                for _ in range(args.steps):
                    started = time.perf_counter()
                    steps[key]()
                    if round_index:  # the first round warms up
                        times[key].append(time.perf_counter() - started)
    finally:
        for close in closers:
            close()
    print(f"CIFAR-10 11pct net, minibatch {args.mini}, one CPU device, "
          f"{args.rounds} rounds of {args.steps} steps")
    print(f"{'library':<8}  {'net':<13}  {'step (ms)':>9}  {'vs all learn':>12}")
    for library in ("engine", "PyTorch"):
        if (library, "all learn") not in times:
            continue
        base = statistics.median(times[(library, "all learn")])
        for name in VARIANTS:
            median = statistics.median(times[(library, name)])
            print(f"{library:<8}  {name:<13}  {1000 * median:9.1f}  {median / base:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
