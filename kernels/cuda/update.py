"""CUDA momentum update: :func:`convnet.kernels.update.momentum_update` as one kernel.

The generic form is five passes over the weights, plus, when gated by the
update's finite flag, the new values computed apart and copied where the flag
is true; ``cvn_momentum_update`` reads the flag in every thread and makes the
same operations in one pass.  Arrays of another dtype than the weights, or not
contiguous, take the generic form.
"""

from __future__ import annotations

from ..update import momentum_update as _generic
from .kernel_set import current


def momentum_update(w, inc, grad, ok, eps, mom, wc, num_cases) -> None:
    ks = current()
    if not (w.dtype == inc.dtype == grad.dtype and w.flags.c_contiguous
            and inc.flags.c_contiguous and grad.flags.c_contiguous):
        _generic.generic(w, inc, grad, ok, eps, mom, wc, num_cases)
        return
    flag = ok if ok is not None else ks.xp.ones((), dtype=bool)
    t = w.dtype.type
    ks.kernel("cvn_momentum_update")(grad, flag, int(ok is not None), t(eps), t(mom), t(wc),
                                     t(num_cases), w, inc)
