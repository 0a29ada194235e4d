"""CUDA source of the batch-normalisation kernels (``bnorm``).

Used by :mod:`convnet.kernels.cuda.batch_norm`; the arithmetic is that of
:mod:`convnet.kernels.batch_norm` on (N, C, P) arrays: per-case, per-channel sums over
the pixels accumulated in double (the numpy kernel's BLAS dot products sum them in
blocks of float, so those agree to rounding), and the element-wise forward and input
gradient with the numpy kernel's operations in its order (bitwise the same).
"""

from __future__ import annotations

from .registry import spec

# One thread per (case, channel): the sum over the pixels, in double, of a (mode 0),
# (a - mean[c])^2 (mode 1) or b (a - mean[c]) (mode 2); the differences in T, as the
# numpy kernel rounds them.
spec("cvn_bn_case_sums",
     "raw T a, raw T b, raw T mean, int32 mode, int32 channels, int32 npix",
     "float64 s",
     r"""
const long long idx = i;
const int c = (int)(idx % channels);
const long long base = idx * npix;
const T m = mean[c];
double acc = 0;
for (int q = 0; q < npix; ++q) {
  const T v = a[base + q];
  if (mode == 0) {
    acc += (double)v;
  } else {
    const T d = v - m;
    acc += mode == 1 ? (double)(d * d) : (double)(b[base + q] * d);
  }
}
s = acc;
""")

# y = x a[c] + beta[c], two roundings as the numpy kernel's two passes.
spec("cvn_bn_affine",
     "T x, raw T a, raw T beta, int32 channels, int32 npix",
     "T y",
     r"""
const int c = (int)((i / npix) % channels);
T t = x * a[c];
y = t + beta[c];
""", arrays=("x",))

# dx = g a[c] + (x - mean[c]) slope[c] + offset[c], rounded as the numpy kernel's passes.
spec("cvn_bn_input_grad",
     "T g, T x, raw T a, raw T mean, raw T slope, raw T offset, int32 channels, int32 npix",
     "T dx",
     r"""
const int c = (int)((i / npix) % channels);
const T ga = g * a[c];
T d = x - mean[c];
d = d * slope[c];
const T s = ga + d;
dx = s + offset[c];
""", arrays=("g", "x"))
