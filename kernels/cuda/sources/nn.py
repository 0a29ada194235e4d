"""CUDA source of the ``cost.logreg`` kernels: per-case cost and errors, and the gradient.

Used by :mod:`convnet.kernels.cuda.nn`.
"""

from __future__ import annotations

from .registry import spec

# One thread per case: cost -log(max(p[label], 1e-30)), top-1 and top-k errors
# (a case is right at k when fewer than k classes beat the label's probability).
# A label outside [0, classes) gives a NaN cost, which the executor reports.
spec("cvn_logreg_cost",
     "raw T probs, raw T labels, int32 classes, int32 topk",
     "T cost, T err1, T errk",
     r"""
const long long r = i;
const long long lab = (long long)labels[r];
if (lab < 0 || lab >= classes) {
  const T zero = 0;
  cost = zero / zero;
  err1 = 1;
  errk = 1;
} else {
  const T pt = probs[r * classes + lab];
  int above = 0;
  for (int k = 0; k < classes; ++k) {
    above += probs[r * classes + k] > pt ? 1 : 0;
  }
  const T fl = (pt > (T)1e-30 || pt != pt) ? pt : (T)1e-30;
  cost = -log(fl);
  err1 = above >= 1 ? (T)1 : (T)0;
  errk = above >= topk ? (T)1 : (T)0;
}
""")

spec("cvn_logreg_grad",
     "raw T probs, raw T labels, int32 classes, T neg_coeff",
     "T g",
     r"""
const long long idx = i;
const long long r = idx / classes;
const long long k = idx - r * classes;
const long long lab = (long long)labels[r];
const T p = probs[idx];
const T fl = (p > (T)1e-30 || p != p) ? p : (T)1e-30;
g = (k == lab) ? neg_coeff / fl : (T)0;
""")
