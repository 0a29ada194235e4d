"""CUDA source of the pooling kernels: max, avg and maxabs forward, one backward.

Used by :mod:`convnet.kernels.cuda.pool`; windows and the order of additions
follow :mod:`convnet.kernels.pool`.
"""

from __future__ import annotations

from .registry import spec

# Window of output o along an axis: [start + o*stride, start + o*stride + size)
# clipped to [0, img).  Empty windows give 0.
_POOL_HEAD = r"""
const long long idx = i;
const int ox = (int)(idx % outs);
const int oy = (int)((idx / outs) % outs);
const long long plane = idx / ((long long)outs * outs);
const long long base = plane * img * img;
const int y0 = start + oy * stride;
const int x0 = start + ox * stride;
const int ylo = y0 < 0 ? 0 : y0;
const int yhi = y0 + size < img ? y0 + size : img;
const int xlo = x0 < 0 ? 0 : x0;
const int xhi = x0 + size < img ? x0 + size : img;
"""

spec("cvn_pool_max_fwd",
     "raw T x, int32 img, int32 outs, int32 size, int32 stride, int32 start",
     "T y",
     _POOL_HEAD + r"""
T m = 0;
if (ylo < yhi && xlo < xhi) {
  m = x[base + (long long)ylo * img + xlo];
  for (int yy = ylo; yy < yhi; ++yy) {
    for (int xx = xlo; xx < xhi; ++xx) {
      const T v = x[base + (long long)yy * img + xx];
      if (v > m || v != v) {
        m = v;
      }
    }
  }
}
y = m;
""")

spec("cvn_pool_avg_fwd",
     "raw T x, int32 img, int32 outs, int32 size, int32 stride, int32 start",
     "T y",
     _POOL_HEAD + r"""
T s = 0;
for (int yy = ylo; yy < yhi; ++yy) {
  for (int xx = xlo; xx < xhi; ++xx) {
    s += x[base + (long long)yy * img + xx];
  }
}
const int cy = cvn_clip_count(y0, size, img);
const int cx = cvn_clip_count(x0, size, img);
const int area = cy * cx > 0 ? cy * cx : 1;
y = s / (T)area;
""")

# maxabs: the window is scanned over all size*size offsets (pixels outside the
# image read 0), the first offset of strictly largest magnitude wins.
spec("cvn_pool_maxabs_fwd",
     "raw T x, int32 img, int32 outs, int32 size, int32 stride, int32 start",
     "T y, int32 which",
     _POOL_HEAD + r"""
T best_v = 0;
T best_a = 0;
int best_k = 0;
for (int ky = 0; ky < size; ++ky) {
  for (int kx = 0; kx < size; ++kx) {
    const int yy = y0 + ky;
    const int xx = x0 + kx;
    const T v = (yy >= 0 && yy < img && xx >= 0 && xx < img)
        ? x[base + (long long)yy * img + xx] : (T)0;
    const T a = v < (T)0 ? -v : v;
    if (ky == 0 && kx == 0) {
      best_v = v;
      best_a = a;
    } else if (a > best_a) {
      best_v = v;
      best_a = a;
      best_k = ky * size + kx;
    }
  }
}
y = (ylo < yhi && xlo < xhi) ? best_v : (T)0;
which = best_k;
""")

# Gradient of all three pooling kinds, gathered per input pixel (no atomics):
# kind 0 max (every pixel equal to its window's maximum gets the gradient),
# 1 avg, 2 maxabs (the recorded offset gets it).  Outputs are visited in the
# order kernels.pool.pool_backward adds them.
#
# Both loops carry "#pragma unroll 1" (never unrolled): NVRTC 13.0 to 13.2 miscompile
# the unrolled inner loop of the max branch.  Their machine code computes the
# remainder trip count of the unrolled loop from +outs where -outs belongs, so the loop
# runs on into negative ox: every overlapping max pool (size 3, stride 2 in AlexNet and
# the CIFAR-10 net) gets wrong input gradients and reads up to a row before y
# (compute-sanitizer: an invalid read 4 bytes before the allocation, then
# cudaErrorIllegalAddress in training).  The source is right (the host emulation and
# nvcc agree with numpy) and NVRTC 13.5 compiles it correctly; the loops are a handful
# of trips (ceil(size / stride)), so not unrolling them costs nothing measurable.  The
# self-test (convnet.kernels.cuda.self_test) checks this kernel on every GPU it runs on.
spec("cvn_pool_bwd",
     "raw T gy, raw T x, raw T y, raw int32 which, int32 img, int32 outs, int32 size, "
     "int32 stride, int32 start, int32 kind",
     "T dx",
     r"""
const long long idx = i;
const int ix = (int)(idx % img);
const int iy = (int)((idx / img) % img);
const long long plane = idx / ((long long)img * img);
const int ty = iy - start;
const int tx = ix - start;
int oy_hi = (int)cvn_floor_div(ty, stride);
int ox_hi = (int)cvn_floor_div(tx, stride);
int oy_lo = (int)cvn_floor_div(ty - size, stride) + 1;
int ox_lo = (int)cvn_floor_div(tx - size, stride) + 1;
oy_hi = oy_hi < outs - 1 ? oy_hi : outs - 1;
ox_hi = ox_hi < outs - 1 ? ox_hi : outs - 1;
oy_lo = oy_lo > 0 ? oy_lo : 0;
ox_lo = ox_lo > 0 ? ox_lo : 0;
const T xv = x[idx];
T sum = 0;
#pragma unroll 1
for (int oy = oy_hi; oy >= oy_lo; --oy) {
  #pragma unroll 1
  for (int ox = ox_hi; ox >= ox_lo; --ox) {
    const long long o = (plane * outs + oy) * outs + ox;
    if (kind == 0) {
      if (xv == y[o]) {
        sum += gy[o];
      }
    } else if (kind == 1) {
      const int cy = cvn_clip_count(start + oy * stride, size, img);
      const int cx = cvn_clip_count(start + ox * stride, size, img);
      const int area = cy * cx > 0 ? cy * cx : 1;
      sum += gy[o] / (T)area;
    } else {
      const int k = (ty - oy * stride) * size + (tx - ox * stride);
      if (which[o] == k) {
        sum += gy[o];
      }
    }
  }
}
dx = sum;
""")
