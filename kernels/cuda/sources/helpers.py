"""Device helpers every kernel's preamble includes unless it names its own.

Templates over the element type (``U``) and marked ``__device__``, so that
the same text compiles with NVRTC and with the host compiler of the tests'
emulator (see :mod:`convnet.kernels.cuda.sources`).
"""

from __future__ import annotations

# Shared device helpers.  ``cvn_pow_neg`` reproduces kernels.norm._pow_neg:
# mode 0: p = 0.75 as 1 / (sqrt(d) * sqrt(sqrt(d))), 1: p = 0.5, 2: p = 1, 3: pow.
HELPERS = r"""
template <typename U>
__device__ U cvn_pow_neg(U d, int mode, U p) {
  if (mode == 0) {
    U r = sqrt(d);
    r = r * sqrt(r);
    return (U)1 / r;
  }
  if (mode == 1) {
    return (U)1 / sqrt(d);
  }
  if (mode == 2) {
    return (U)1 / d;
  }
  return pow(d, -p);
}

__device__ long long cvn_floor_div(long long a, long long b) {
  long long q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) {
    q -= 1;
  }
  return q;
}

template <typename U>
__device__ U cvn_abs(U v) {
  return v < (U)0 ? -v : v;
}

__device__ int cvn_clip_count(int lo, int size, int n) {
  int a = lo < 0 ? 0 : lo;
  int b = lo + size < n ? lo + size : n;
  return b > a ? b - a : 0;
}
"""
