"""The benchmarks' check that the engine and the PyTorch net compute the same training
step: both start from the engine's initial weights and take one step on the same
minibatch, and every element of every weight's first momentum increment is compared
(engine ``inc = -eps * (grad / N + wc * W)``, PyTorch ``-lr * momentum_buffer``), and
so are the running averages of bnorm layers after it.

Float32 sums in a different order differ by rounding, and now and then two inputs of
a max-pool window within rounding of each other swap places, or a pre-activation
within rounding of zero lands on the other side of a relu: the gradient takes the
other branch there.  One such switch in a conv layer changes that filter's whole
weight update (every channel and tap) by a little, and everything below it.  On the
big nets there are many windows, so PyTorch and the engine, both in float32, differ
in thousands of elements by more than 1e-3 of the value, the worst by a few percent
of the tensor's largest update; neither is the wrong one.

So the check has a referee: the same PyTorch step in float64 (the "exact" step,
from the same weights, batch and dropout masks).  An element is *off* when it
differs from the exact one by more than ``REL_TOL`` of its value plus ``ABS_TOL`` of
its tensor's largest element.  The engine passes when its cost agrees with the exact
one to ``COST_TOL`` and, in every tensor, it has at most twice as many elements off
as PyTorch's float32 step has, plus ``SLACK`` elements or ``SLACK_FRACTION`` of the
tensor (for tensors where PyTorch happens to have none): as close to the exact step
as PyTorch's own float32.  A net that computes something else is off in most
elements of every tensor below the difference (tests/bench/test_agreement.py:
PyTorch drawing its own dropout masks, a changed norm constant).

Batch normalisation couples every case of a channel, so one relu tie that falls the
other way moves every weight update above it a little: on a ResNet the counts of
either float32 step swing by 10x from one minibatch to the next (16 to 337 elements
for PyTorch float32, 57 to 3,883 for the engine, over three minibatches of 128), and
say nothing about which is closer.  So the engine also takes the step in float64
(:func:`engine_step` on float64 arrays) where the float32 counts do not pass; that
step has no tie to fall otherwise, and the engine passes when it is the exact one to
``FLOAT64_TOL`` of each tensor's largest element: the same arithmetic, up to float64
rounding.  The report gives
the counts per tensor and in total for the engine, for PyTorch float32, and between
the two, and the engine's largest difference.

Winograd: the engine computes stride-1 convolutions with 3x3 to 6x6 filters by
Winograd's algorithm on CPU devices, whose float32 rounding is about ten times a direct
convolution's, so more ties switch than in PyTorch's float32 step.  The check of
the net therefore runs the engine with direct convolutions (``--no-winograd``), and
:func:`same_net` adds the counts of the same step with the Winograd convolutions the
benchmarks time, next to the direct step's.

Dropout: every step gets the engine's own masks for the step (a function of seed,
step, layer and case, :func:`convnet.layers.dropout.keep_mask`), so the check covers
dropout with the same units dropped everywhere.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import numpy as np

import torch_net

REL_TOL = 1e-3
ABS_TOL = 1e-3
COST_TOL = 1e-4
FLOAT64_TOL = 1e-9
SLACK = 16
SLACK_FRACTION = 1e-4


@dataclass
class TensorDiff:
    """One weight's update: elements off the exact step (engine, PyTorch float32),
    elements where the two float32 steps differ, and the engine's largest difference
    from the exact step over the tensor's largest element."""

    key: str
    size: int
    engine_off: int
    torch_off: int
    between: int
    worst_rel: float

    @property
    def passed(self) -> bool:
        return self.engine_off <= 2 * self.torch_off + max(SLACK, SLACK_FRACTION * self.size)


@dataclass
class Agreement:
    engine_cost: float
    torch_cost: float
    exact_cost: float
    tensors: list[TensorDiff] = field(default_factory=list)
    #: the engine's float64 step against PyTorch's, taken where the float32 counts do not
    #: pass: the largest difference over its tensor's largest element (inf: not taken)
    float64_rel: float = float("inf")

    def total(self, what: str) -> int:
        return sum(getattr(t, what) for t in self.tensors)

    @property
    def size(self) -> int:
        return self.total("size")

    @property
    def cost_rel(self) -> float:
        return abs(self.engine_cost - self.exact_cost) / max(abs(self.exact_cost), 1e-30)

    @property
    def float32_passed(self) -> bool:
        return all(t.passed for t in self.tensors)

    @property
    def passed(self) -> bool:
        return self.cost_rel <= COST_TOL and (self.float32_passed
                                              or self.float64_rel <= FLOAT64_TOL)

    def text(self) -> str:
        def where(what):
            listed = [f"{t.key} {getattr(t, what)}" for t in self.tensors if getattr(t, what)]
            return f" ({', '.join(listed)})" if listed else ""

        worst = max(self.tensors, key=lambda t: t.worst_rel)
        failed = [t.key for t in self.tensors if not t.passed]
        if self.passed and self.float32_passed:
            verdict = ("same computation (the engine is as close to the float64 step as "
                       "PyTorch float32)")
        elif self.passed:
            verdict = (f"same computation (the engine's float64 step is PyTorch's to "
                       f"{self.float64_rel:.0e}; in float32 relu ties fall otherwise, in "
                       f"{', '.join(failed)})")
        else:
            verdict = ("WARNING: the two nets do not compute the same thing"
                       + (" (cost off)" if self.cost_rel > COST_TOL else "")
                       + (f" (off in {', '.join(failed)}; float64 steps "
                          f"{self.float64_rel:.0e} apart)" if failed else ""))
        return (f"cost {self.engine_cost:.6f} (engine), {self.torch_cost:.6f} (PyTorch), "
                f"{self.exact_cost:.6f} (float64); of {self.size:,} weight-update elements, off "
                f"the float64 step by more than {REL_TOL:g} of the value + {ABS_TOL:g} of the "
                f"tensor's largest: engine {self.total('engine_off'):,}{where('engine_off')}, "
                f"PyTorch float32 {self.total('torch_off'):,}; engine vs PyTorch "
                f"{self.total('between'):,}; engine's largest difference {worst.worst_rel:.1e} "
                f"of its tensor's largest element ({worst.key}).  {verdict}")

    def as_json(self) -> dict:
        return {"engine_cost": self.engine_cost, "torch_cost": self.torch_cost,
                "exact_cost": self.exact_cost,
                "float64_rel": None if math.isinf(self.float64_rel) else self.float64_rel,
                "size": self.size,
                "engine_off": self.total("engine_off"), "torch_off": self.total("torch_off"),
                "between": self.total("between"), "passed": self.passed, "text": self.text()}


def off(ours: np.ndarray, exact: np.ndarray) -> tuple[int, float]:
    """Elements of ``ours`` beyond the tolerance of ``exact``, and the largest
    difference over ``exact``'s largest element."""
    diff = np.abs(ours.astype(np.float64) - exact)
    scale = float(np.abs(exact).max()) if exact.size else 0.0
    bad = diff > REL_TOL * np.abs(exact) + ABS_TOL * scale
    return int(bad.sum()), float(diff.max() / (scale + 1e-300)) if exact.size else 0.0


def compare(key: str, engine: np.ndarray, torch32: np.ndarray, exact: np.ndarray) -> TensorDiff:
    engine_off, worst = off(engine, exact)
    return TensorDiff(key, int(exact.size), engine_off, off(torch32, exact)[0],
                      off(engine, torch32.astype(np.float64))[0], worst)


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
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    ex = Executor(net, make_plan(net, tuple(gpus), mini), make_devices(tuple(gpus), "cpu"),
                  seed=0, parallel=False)
    try:
        return engine_weights(ex.state_arrays())
    finally:
        ex.close()


def torch_step(torch, net, weights: dict, batch: list, dtype) -> tuple[float, dict, dict]:
    """One PyTorch step in ``dtype`` with the engine's dropout masks: its cost, every
    weight's first momentum increment, {'layer/key': array} (a group without momentum:
    its step, which is that increment), and the running averages after the step
    (bnorm's ``mean`` and ``var``, {'layer/key': array})."""
    cast = {layer: {k: v.astype(dtype) for k, v in ws.items()} for layer, ws in weights.items()}
    tnet = torch_net.build(torch, net, cast, masks=engine_masks(net))
    opt = tnet.optimizer(torch)
    opt.zero_grad()
    loss = tnet.loss(torch.from_numpy(batch[0].astype(dtype)),
                     torch.from_numpy(batch[1].astype(dtype)))
    loss.backward()
    opt.step()
    updates = {}
    for group in opt.param_groups:
        (t,) = group["params"]
        state = opt.state[t]
        step = (state["momentum_buffer"] if "momentum_buffer" in state
                else t.grad + group["weight_decay"] * t)
        updates[tnet.key_of(t)] = -group["lr"] * step.detach().numpy()
    running = {f"{layer}/{k}": b.numpy() for layer, bs in tnet.buffers.items()
               for k, b in bs.items()}
    return float(loss.detach()), updates, running


@contextlib.contextmanager
def engine_arrays(dtype):
    """Inside the block the engine's CPU devices hold ``dtype`` arrays (their loads cast
    to float32 otherwise), so that a whole engine step runs in float64."""
    from convnet.runtime.devices.cpu import CpuDevice

    default = CpuDevice.to_device
    CpuDevice.to_device = lambda self, array: np.array(array, dtype, order="C")
    try:
        yield
    finally:
        CpuDevice.to_device = default


def engine_step(net, gpus: tuple, batch: list, dtype=np.float32,
                winograd: bool = True) -> tuple[dict, float, dict]:
    """(initial state, cost, state after it) of one engine training step on ``gpus`` (the
    reference walk) in ``dtype``, with or without its Winograd convolutions."""
    from convnet.kernels.conv import choice as conv_choice
    from convnet.plan.planner import make_plan
    from convnet.runtime.devices.backends import make_devices
    from convnet.runtime.step.executor import Executor

    mini = batch[0].shape[0]
    default, conv_choice.WINOGRAD = conv_choice.WINOGRAD, winograd
    try:
        with engine_arrays(dtype):
            ex = Executor(net, make_plan(net, tuple(gpus), mini),
                          make_devices(tuple(gpus), "cpu"), seed=0, parallel=False)
            try:
                initial = ex.state_arrays()
                cost_layer = next(ldef.name for ldef in net if ldef.is_cost)
                cost = ex.step([b.astype(dtype) for b in batch]).costs[cost_layer]["cost"]
                return initial, cost, ex.state_arrays()
            finally:
                ex.close()
    finally:
        conv_choice.WINOGRAD = default


def one_step(torch, net, gpus: tuple, batch: list, winograd: bool = True) -> Agreement:
    """One training step of the engine (on ``gpus``, the reference walk; with or
    without its Winograd convolutions) in float32 and in float64, of the PyTorch net
    in float32 and of the PyTorch net in float64, from the engine's initial weights,
    compared (see the module docstring)."""
    initial, engine_cost, after = engine_step(net, gpus, batch, winograd=winograd)
    initial = engine_weights(initial)
    torch_cost, torch32, running32 = torch_step(torch, net, initial, batch, np.float32)
    exact_cost, exact, running = torch_step(torch, net, initial, batch, np.float64)
    result = Agreement(engine_cost, torch_cost, exact_cost)
    pairs = [(key, f"momentum/{key}", torch32, exact) for key in exact] + [
        (key, f"weights/{key}", running32, running) for key in running]  # bnorm's averages
    for key, engine_key, torch32_arrays, truth in pairs:
        result.tensors.append(compare(key, after[engine_key], torch32_arrays[key], truth[key]))
    if not result.float32_passed:  # the referee of the referee (see the module docstring)
        _, _, after64 = engine_step(net, gpus, batch, np.float64, winograd)
        result.float64_rel = max(off(after64[engine_key], truth[key])[1]
                                 for key, engine_key, _, truth in pairs)
    return result


def same_net(torch, net, gpus: tuple, batch: list) -> dict:
    """The check of the net (direct convolutions, :func:`one_step`'s verdict) and, where
    the engine uses Winograd convolutions, the same step with them: its counts against
    the direct step's show what their larger float32 rounding does to one step.  JSON:
    the check's, plus ``winograd`` (text, absent without Winograd layers)."""
    from convnet.config.layer_types.memory_rules import winograd_conv_layers

    direct = one_step(torch, net, gpus, batch, winograd=False)
    report = direct.as_json()
    layers = winograd_conv_layers(net)
    if layers:
        fast = one_step(torch, net, gpus, batch, winograd=True)
        worst = max(fast.tensors, key=lambda t: t.worst_rel)
        report["winograd"] = (
            f"with the Winograd convolutions the timed runs use ({', '.join(layers)}): cost "
            f"{fast.engine_cost:.6f}, off the float64 cost by {fast.cost_rel:.1e}; "
            f"{fast.total('engine_off'):,} weight-update elements off the float64 step "
            f"(direct convolutions: {direct.total('engine_off'):,}, PyTorch float32: "
            f"{direct.total('torch_off'):,}); largest difference {worst.worst_rel:.1e} of its "
            f"tensor's largest element ({worst.key}).  Winograd's float32 rounding (about "
            f"1e-5 of a conv output's scale, 1e-6 direct) puts more relu and max-pool ties "
            f"on the other side")
    return report
