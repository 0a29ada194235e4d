"""CUDA ``cost.logreg``: the per-case cost and both error counts in one kernel, and
its gradient in one pass.

The generic kernels gather ``p[label]`` with fancy indexing, then compare,
reduce and take logs in separate launches (and the gradient zero-fills,
gathers and scatters).  ``cvn_logreg_cost`` runs one thread per case (the
loop over the classes is short next to a launch); ``cvn_logreg_grad`` one
thread per element of the gradient.  fc layers, softmax and the other costs
keep the generic kernels: they are cuBLAS GEMMs or a few passes over arrays
of N x classes, which is small next to the conv layers.
"""

from __future__ import annotations

from .kernel_set import contiguous, current


def logreg_cost(labels, probs, topk: int = 1):
    ks = current()
    xp = ks.xp
    n = probs.shape[0]
    probs = contiguous(probs).reshape(n, -1)
    labels = contiguous(labels).reshape(-1)
    if labels.dtype != probs.dtype:
        labels = labels.astype(probs.dtype)
    cost = xp.empty(n, dtype=probs.dtype)
    err1 = xp.empty(n, dtype=probs.dtype)
    errk = xp.empty(n, dtype=probs.dtype)
    ks.kernel("cvn_logreg_cost")(probs, labels, probs.shape[1], int(topk), cost, err1, errk)
    return cost, err1, errk


def logreg_grad(labels, probs, coeff: float):
    ks = current()
    xp = ks.xp
    n = probs.shape[0]
    shape = probs.shape
    probs = contiguous(probs).reshape(n, -1)
    labels = contiguous(labels).reshape(-1)
    if labels.dtype != probs.dtype:
        labels = labels.astype(probs.dtype)
    g = xp.empty(probs.shape, dtype=probs.dtype)
    ks.kernel("cvn_logreg_grad")(probs, labels, probs.shape[1], -float(coeff), g)
    return g.reshape(shape)
