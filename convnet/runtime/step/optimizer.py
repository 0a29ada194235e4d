"""The weight update rule.

An optimizer changes one weight array in place from its summed gradient.
The executor calls it once per array and replica (or per slice of an array,
with a sharded update), with the array's :class:`LearningRule`, the training
progress in [0, 1] that the learning-rate schedule reads, and the number of
cases the gradient sums over (and, where the step checks its gradients, the
update's finite flag on the device: the update is skipped there when it is false,
see :mod:`convnet.kernels.update`).  Each array has one state array of its shape
beside it (the ``momentum`` of checkpoints), which only the optimizer reads
or writes; a rule that needs other state would add it there.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from convnet.kernels.update import host_flag, momentum_update
from convnet.runtime.step.learning_rules import LearningRule

UPDATE_BLOCK = 1 << 17  # elements per block of the CPU update (stays in the L2 cache)


class Optimizer(Protocol):
    def update(self, xp, weights, state, grad, rule: LearningRule, progress: float,
               num_cases: int, ok=None) -> None:
        """Update ``weights`` and ``state`` in place from ``grad``, a sum over ``num_cases``,
        where the device flag ``ok`` (None: always) is true."""


class MomentumSGD:
    """cuda-convnet2's rule: ``inc = mom * inc - eps * (grad / numCases + wc * W); W += inc``.

    The state is ``inc``, the last increment.  On the CPU the passes run block
    by block over the flattened arrays, so each block stays in the cache
    instead of five trips through memory; every element goes through the same
    operations in the same order as the whole-array form of
    :func:`convnet.kernels.update.momentum_update`, which the other cases (GPU
    arrays, mixed dtypes, non-contiguous slices) use.
    """

    def update(self, xp, weights, state, grad, rule: LearningRule, progress: float,
               num_cases: int, ok=None) -> None:
        w, inc = weights, state
        if w.size == 0:
            return
        eps, mom, wc = rule.eps.value(progress), rule.momentum, rule.decay
        same = grad.dtype == w.dtype == inc.dtype
        if xp is not np or not (same and w.flags.c_contiguous and inc.flags.c_contiguous):
            momentum_update(w, inc, grad, ok, eps, mom, wc, num_cases)
            return
        if ok is not None and not host_flag(ok):
            return
        wf, incf, gf = w.reshape(-1), inc.reshape(-1), grad.reshape(-1)
        size = wf.size
        block = min(size, UPDATE_BLOCK)
        step = np.empty(block, dtype=w.dtype)
        decay = np.empty(block, dtype=w.dtype) if wc else None
        for lo in range(0, size, block):
            hi = min(size, lo + block)
            i, s = incf[lo:hi], step[:hi - lo]
            i *= mom
            np.divide(gf[lo:hi], num_cases, out=s)
            if wc:
                t = decay[:hi - lo]
                np.multiply(wf[lo:hi], wc, out=t)
                s += t
            np.multiply(s, eps, out=s)
            i -= s
            wf[lo:hi] += i
