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

#: An ungated update's flag (which the kernel does not read), one per array module and
#: device, so that the update allocates and fills nothing every step.
_UNGATED: dict = {}


def momentum_update(w, inc, grad, ok, eps, mom, wc, num_cases) -> None:
    ks = current()
    if not (w.dtype == inc.dtype == grad.dtype and w.flags.c_contiguous
            and inc.flags.c_contiguous and grad.flags.c_contiguous):
        _generic.generic(w, inc, grad, ok, eps, mom, wc, num_cases)
        return
    flag = ok if ok is not None else _ungated_flag(ks, w)
    t = w.dtype.type
    ks.kernel("cvn_momentum_update")(grad, flag, int(ok is not None), t(eps), t(mom), t(wc),
                                     t(num_cases), w, inc)


def _ungated_flag(ks, w):
    key = (ks.name, str(getattr(w, "device", "")))
    flag = _UNGATED.get(key)
    if flag is None:
        flag = _UNGATED[key] = ks.xp.ones((), dtype=bool)
    return flag
