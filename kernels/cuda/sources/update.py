"""CUDA source of the gated momentum update (:mod:`convnet.kernels.update`).

Used by :mod:`convnet.kernels.cuda.update`.
"""

from __future__ import annotations

from .registry import spec

# One thread per weight: the generic update's operations in its order (no FMA), where
# the device flag ok[0] is true (gated is 0: always).
spec("cvn_momentum_update",
     "T grad, raw bool ok, int32 gated, T eps, T mom, T wc, T num_cases",
     "T w, T inc",
     r"""
if (!gated || ok[0]) {
  T step = grad / num_cases;
  if (wc != (T)0) {
    step = step + wc * w;
  }
  const T next = inc * mom - eps * step;
  inc = next;
  w = w + next;
}
""", arrays=("grad",))
