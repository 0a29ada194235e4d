"""The benchmarks' check that the engine and the PyTorch net compute the same training
step: both start from the engine's initial weights, take one step on the same
minibatch, and every weight's first momentum increment is compared element by element
(engine ``inc = -eps * (grad / N + wc * W)``, PyTorch ``-lr * momentum_buffer``).

Float32 sums in a different order differ by rounding, and now and then a
pre-activation within rounding of zero lands on the other side of a relu (or two
inputs of a max-pool window tie): that element's gradient takes the other branch.
One such flip in a conv layer's output changes that filter's whole weight update
(every channel and tap) and, a little, everything below it.  So the check counts
the elements that differ by more than ``REL_TOL`` of their value plus ``ABS_TOL`` of
their tensor's largest element, per tensor and in total, and passes when the costs
agree to ``COST_TOL``, at most ``MAX_FRACTION`` of all elements differ and no tensor
has more than ``MAX_TENSOR_FRACTION`` of its elements differing.  Measured: the
CIFAR-10 net, minibatch 128, seed-0 batch: two relu flips in conv2 give 796 of
3,672,906 elements (2.2e-4; 680 in two filters of conv2, 116 in conv1, largest
difference 7e-3 of conv1's largest update); every other case tried gives 0 or 1.  A
net that computes something else (tests/test_bench_agreement.py: PyTorch drawing its
own dropout masks, a changed norm constant) differs in most elements of every tensor
below the change.  The worst relative difference is reported, not judged.

Dropout: the PyTorch net is given the engine's own masks for the step (a function of
seed, step, layer and case, :func:`convnet.layers.dropout.keep_mask`), so the check
covers dropout with the same units dropped in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import torch_net

REL_TOL = 1e-3
ABS_TOL = 1e-3
MAX_FRACTION = 1e-3
MAX_TENSOR_FRACTION = 0.1
COST_TOL = 1e-4


@dataclass
class TensorDiff:
    key: str
    differing: int
    size: int
    worst_rel: float  # max |engine - torch| / max |torch|


@dataclass
class Agreement:
    engine_cost: float
    torch_cost: float
    tensors: list[TensorDiff] = field(default_factory=list)

    @property
    def differing(self) -> int:
        return sum(t.differing for t in self.tensors)

    @property
    def size(self) -> int:
        return sum(t.size for t in self.tensors)

    @property
    def cost_rel(self) -> float:
        return abs(self.engine_cost - self.torch_cost) / max(abs(self.torch_cost), 1e-30)

    @property
    def worst(self) -> TensorDiff:
        return max(self.tensors, key=lambda t: t.worst_rel)

    @property
    def passed(self) -> bool:
        return (self.cost_rel <= COST_TOL and self.differing <= MAX_FRACTION * self.size
                and all(t.differing <= MAX_TENSOR_FRACTION * t.size for t in self.tensors))

    def text(self) -> str:
        where = ", ".join(f"{t.key} {t.differing}" for t in self.tensors if t.differing)
        worst = self.worst
        verdict = ("same computation" + (" (isolated differences: relu or max-pool ties)"
                                         if self.differing else "")
                   if self.passed else "WARNING: the two nets do not compute the same thing")
        return (f"cost {self.engine_cost:.6f} (engine) vs {self.torch_cost:.6f} (PyTorch); "
                f"weight updates: {self.differing:,} of {self.size:,} elements differ by more "
                f"than {REL_TOL:g} of their value + {ABS_TOL:g} of their tensor's largest"
                + (f" ({where})" if where else "")
                + f"; largest difference {worst.worst_rel:.1e} of its tensor's largest element "
                f"({worst.key}).  {verdict}")

    def as_json(self) -> dict:
        return {"engine_cost": self.engine_cost, "torch_cost": self.torch_cost,
                "differing": self.differing, "size": self.size, "passed": self.passed,
                "text": self.text()}


def compare(key: str, ours: np.ndarray, theirs: np.ndarray) -> TensorDiff:
    """Elements of ``ours`` beyond the tolerance of ``theirs``, and the worst difference."""
    diff = np.abs(ours.astype(np.float64) - theirs)
    scale = float(np.abs(theirs).max()) if theirs.size else 0.0
    bad = diff > REL_TOL * np.abs(theirs) + ABS_TOL * scale
    return TensorDiff(key, int(bad.sum()), int(theirs.size),
                      float(diff.max() / (scale + 1e-30)) if theirs.size else 0.0)


def engine_weights(state: dict) -> dict:
    """{layer: {key: array}} of the ``weights/...`` entries of ``Executor.state_arrays()``."""
    weights: dict = {}
    for name, value in state.items():
        group, layer, k = name.split("/")
        if group == "weights":
            weights.setdefault(layer, {})[k] = value.copy()
    return weights


def engine_masks(net, seed: int = 0, step: int = 0):
    """``masks(layer, shape)``: the engine's train-time dropout masks of one step
    over the whole minibatch (case offset 0)."""
    from convnet.layers.base import Context
    from convnet.layers.dropout import keep_mask

    ctx = Context(train=True, seed=seed, step=step, case_offset=0)

    def masks(name: str, shape):
        return keep_mask(np.zeros(shape, np.float32), float(net[name].params["keep"]), name,
                         ctx)
    return masks


def initial_weights(net, gpus: tuple, mini: int) -> dict:
    """The engine's initial weights (seed 0) of ``net`` on ``gpus``, {layer: {key: array}}."""
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices import make_devices
    from convnet.runtime.executor import Executor

    ex = Executor(net, make_plan(net, tuple(gpus), mini), make_devices(tuple(gpus), "cpu"),
                  seed=0, parallel=False)
    try:
        return engine_weights(ex.state_arrays())
    finally:
        ex.close()


def one_step(torch, net, gpus: tuple, batch: list) -> Agreement:
    """One training step of the engine (on ``gpus``, the reference walk) and of the
    PyTorch net from the engine's initial weights, compared."""
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices import make_devices
    from convnet.runtime.executor import Executor

    mini = batch[0].shape[0]
    ex = Executor(net, make_plan(net, tuple(gpus), mini), make_devices(tuple(gpus), "cpu"),
                  seed=0, parallel=False)
    try:
        initial = engine_weights(ex.state_arrays())
        cost_layer = next(ldef.name for ldef in net if ldef.is_cost)
        engine_cost = ex.step(batch).costs[cost_layer]["cost"]
        after = ex.state_arrays()
    finally:
        ex.close()
    tnet = torch_net.build(torch, net, initial, masks=engine_masks(net))
    opt = tnet.optimizer(torch)
    opt.zero_grad()
    images, labels = torch.from_numpy(batch[0]), torch.from_numpy(batch[1])
    loss = tnet.loss(images, labels)
    loss.backward()
    opt.step()
    result = Agreement(engine_cost, float(loss.detach()))
    for group in opt.param_groups:
        (t,) = group["params"]
        key = tnet.key_of(t)
        theirs = -group["lr"] * opt.state[t]["momentum_buffer"].numpy()
        result.tensors.append(compare(key, after[f"momentum/{key}"], theirs))
    return result
