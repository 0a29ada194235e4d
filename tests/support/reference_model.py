"""An independent reference for the parallel semantics (shards, passes, updates; docs/DESIGN.md).

It computes a training step with the layer library alone: no plan, no
devices, no copies, no all-reduce.  Each layer activation works on one
contiguous range of the minibatch (the cases its replicas cover together),
activations and gradients are full-minibatch arrays, and the update rule is
written out again from the update rule (inc = mom*inc - eps*(grad/numCases + wc*W)).  With every period 1 and one pass it is
plain single-device training on the whole minibatch.
"""

from __future__ import annotations

import zlib

import numpy as np

from convnet.layers import build_layer
from convnet.layers.base import Context


def split_bounds(num_cases: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous near-equal parts, larger ones first (how a short minibatch is cut)."""
    sizes = [num_cases // parts + (1 if i < num_cases % parts else 0) for i in range(parts)]
    starts = np.cumsum([0] + sizes[:-1])
    return [(int(s), int(s + z)) for s, z in zip(starts, sizes)]


class ReferenceTrainer:
    """Single-process training of ``net`` under a given pass structure.

    ``replicas`` maps layer name -> replica count (default 1 for all: one
    device).  Shards = max count, passes = max/min.
    """

    def __init__(self, net, seed: int = 0, replicas: dict[str, int] | None = None):
        self.net = net
        self.seed = seed
        self.step_count = 0
        self.order = [l for l in net if not l.is_data]
        counts = {l.name: (replicas or {}).get(l.name, 1) for l in self.order}
        self.counts = counts
        self.rmax, self.rmin = max(counts.values()), min(counts.values())
        self.passes = self.rmax // self.rmin
        self.layers = {l.name: build_layer(l) for l in self.order}
        self.weights, self.momentum = {}, {}
        for l in self.order:
            rng = np.random.default_rng([seed, zlib.crc32(l.name.encode())])
            self.weights[l.name] = self.layers[l.name].init_params(rng)
            self.momentum[l.name] = {k: np.zeros_like(v) for k, v in self.weights[l.name].items()}
        self.trainable = {}
        for l in net:
            self.trainable[l.name] = l.has_weights or any(self.trainable[i] for i in l.inputs)
        self.to_cost = {}
        for l in reversed(list(net)):
            self.to_cost[l.name] = l.is_cost or any(self.to_cost[c] for c in net.consumers(l.name))

    def period(self, name: str) -> int:
        return self.counts[name] // self.rmin

    def update_period(self, ldef) -> int:
        """updatePeriod as written; with one pass (one device) every layer updates once."""
        if self.passes == 1:
            return 1
        return int(ldef.params.get("updatePeriod", 0) or 0) or self.period(ldef.name)

    def step(self, batch: list[np.ndarray], progress: float = 0.0) -> dict[str, float]:
        n = len(batch[0])
        shards = split_bounds(n, self.rmax)
        acts: dict[str, np.ndarray] = {}
        for l in self.net:
            if l.is_data:
                acts[l.name] = batch[l.attrs["dataIdx"]].reshape((n,) + tuple(l.output_shape))
        grads: dict[str, np.ndarray] = {}
        states = {}
        wgrads = {l.name: {} for l in self.order if l.has_weights}
        cost_sums: dict[str, float] = {}

        def case_range(first_pass: int, num_passes: int) -> tuple[int, int]:
            return (shards[first_pass * self.rmin][0],
                    shards[(first_pass + num_passes) * self.rmin - 1][1])

        for p in range(self.passes):
            for l in self.order:
                t = self.period(l.name)
                if p % t:
                    continue
                lo, hi = case_range(p, t)
                ctx = Context(train=True, seed=self.seed, step=self.step_count, case_offset=lo)
                inputs = [acts[i][lo:hi] for i in l.inputs]
                out, state = self.layers[l.name].forward(inputs, self.weights[l.name], ctx)
                if l.name not in acts:
                    acts[l.name] = np.zeros((n,) + out.shape[1:], out.dtype)
                acts[l.name][lo:hi] = out
                states[(l.name, lo)] = state
                if l.is_cost:
                    sums = self.layers[l.name].metrics(inputs, out)
                    cost_sums[l.name] = cost_sums.get(l.name, 0.0) + float(sums["cost"])
            for l in reversed(self.order):
                t = self.period(l.name)
                if (p + 1) % t or not (self.to_cost[l.name] and self.trainable[l.name]):
                    continue
                first = p - t + 1
                lo, hi = case_range(first, t)
                ctx = Context(train=True, seed=self.seed, step=self.step_count, case_offset=lo)
                need = [self.trainable[i] and not self.net[i].is_data for i in l.inputs]
                grad_out = None if l.is_cost else grads[l.name][lo:hi]
                in_grads, p_grads = self.layers[l.name].backward(
                    grad_out, [acts[i][lo:hi] for i in l.inputs], acts[l.name][lo:hi],
                    self.weights[l.name], states.pop((l.name, lo)), ctx, need)
                for inp, wanted, g in zip(l.inputs, need, in_grads):
                    if wanted:
                        if inp not in grads:
                            grads[inp] = np.zeros_like(acts[inp])
                        grads[inp][lo:hi] += g
                for k, g in p_grads.items():
                    wgrads[l.name][k] = wgrads[l.name].get(k, 0) + g
                u = self.update_period(l) if l.has_weights else 0
                if l.has_weights and (p + 1) % u == 0:
                    w_lo, w_hi = case_range(p - u + 1, u)
                    self._apply(l, wgrads[l.name], w_hi - w_lo, progress)
                    wgrads[l.name] = {}
        self.step_count += 1
        return {name: total / n for name, total in cost_sums.items()}

    def _apply(self, ldef, grads: dict, num_cases: int, progress: float) -> None:
        """The update rule, written out: inc = mom*inc - eps*(grad/numCases + wc*W); W += inc."""
        prm = ldef.params
        for k, g in grads.items():
            if k == "b":
                eps, mom, wc = prm["epsB"].value(progress), prm["momB"], 0.0
            else:
                i = int(k[1:])
                eps, mom, wc = prm["epsW"][i].value(progress), prm["momW"][i], prm["wc"][i]
            w = self.weights[ldef.name][k]
            inc = mom * self.momentum[ldef.name][k] - eps * (g / num_cases + wc * w)
            self.momentum[ldef.name][k] = inc
            self.weights[ldef.name][k] = w + inc
