"""The momentum update of one weight array, gated by a device flag.

cuda-convnet2's rule, ``inc = mom * inc - eps * (grad / numCases + wc * W);
W += inc``, applied in place where ``ok`` (a 0-d boolean array of the weights'
array module, or None for always) is true.  The flag is the update's finite
check, computed on the device (:mod:`convnet.runtime.step.device_results`): the
update is skipped there without the host reading the flag, so a step does not
wait for its device at every update.

On numpy the flag lives in host memory, so it is simply tested; on CuPy the
CUDA kernel (:mod:`convnet.kernels.cuda.update`) reads it in every thread, and
the generic form, which runs where the fused kernels are switched off, computes
the new values and copies them where the flag is true.  Every form makes the
same operations in the same order as :class:`convnet.runtime.step.optimizer.MomentumSGD`'s
blocked CPU loop, so the results are bitwise those of the ungated update.
"""

from __future__ import annotations

import numpy as np

from . import array_module, kernel


def host_flag(ok) -> bool:
    """A numpy flag's value: it is host memory, so reading it waits for nothing (the
    array is taken as a plain ndarray, which the tests' watched arrays allow)."""
    return bool(np.asarray(ok).item())


@kernel
def momentum_update(w, inc, grad, ok, eps: float, mom: float, wc: float, num_cases) -> None:
    """Update ``w`` and ``inc`` in place from ``grad`` (a sum over ``num_cases``) where
    ``ok`` is true (see the module docstring)."""
    xp = array_module(w)
    if ok is not None and xp is np:
        if not host_flag(ok):
            return
        ok = None
    if ok is None:
        inc *= mom
        step = grad / num_cases
        if wc:
            step += wc * w
        inc -= eps * step
        w += inc
        return
    masked_update(xp, w, inc, grad, ok, eps, mom, wc, num_cases)


def masked_update(xp, w, inc, grad, ok, eps, mom, wc, num_cases) -> None:
    """The update computed apart and copied into ``w`` and ``inc`` where the device flag
    ``ok`` is true: the generic form on GPU arrays (no host read of the flag)."""
    new_inc = inc * mom
    step = grad / num_cases
    if wc:
        step += wc * w
    new_inc -= eps * step
    xp.copyto(w, w + new_inc, where=ok)
    xp.copyto(inc, new_inc, where=ok)
