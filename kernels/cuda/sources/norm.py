"""CUDA source of the response- and contrast-normalisation kernels.

Used by :mod:`convnet.kernels.cuda.norm`; windows and the order of additions
follow :mod:`convnet.kernels.norm`.
"""

from __future__ import annotations

from .registry import spec

# cmrnorm forward: d = minDiv + alpha * sum of squares over the channel window
# [c - size/2, c - size/2 + size), y = x * d^-p.
spec("cvn_cmr_fwd",
     "raw T x, int32 channels, int32 npix, int32 size, T alpha, T min_div, int32 mode, T p",
     "T y, T d",
     r"""
const long long idx = i;
const long long q = idx % npix;
const int c = (int)((idx / npix) % channels);
const long long n = idx / ((long long)npix * channels);
const int lo = c - size / 2;
const int k0 = lo < 0 ? 0 : lo;
const int k1 = lo + size < channels ? lo + size : channels;
T s = 0;
for (int k = k0; k < k1; ++k) {
  const T v = x[(n * channels + k) * npix + q];
  s += v * v;
}
T dd = s * alpha;
dd = dd + min_div;
d = dd;
y = x[idx] * cvn_pow_neg(dd, mode, p);
""")

# cmrnorm backward: dx = gy * d^-p + coef * x * sum_j (gy_j y_j / d_j) over the
# channels j whose window holds c; coef = -2 alpha p.
spec("cvn_cmr_bwd",
     "raw T gy, raw T x, raw T y, raw T d, int32 channels, int32 npix, int32 size, T coef, "
     "int32 mode, T p",
     "T dx",
     r"""
const long long idx = i;
const long long q = idx % npix;
const int c = (int)((idx / npix) % channels);
const long long n = idx / ((long long)npix * channels);
const int lo = c + size / 2 - size + 1;
const int k0 = lo < 0 ? 0 : lo;
const int k1 = lo + size < channels ? lo + size : channels;
T s = 0;
for (int k = k0; k < k1; ++k) {
  const long long j = (n * channels + k) * npix + q;
  T t = gy[j] * y[j];
  t = t / d[j];
  s += t;
}
T back = s * x[idx];
back = back * coef;
dx = back + gy[idx] * cvn_pow_neg(d[idx], mode, p);
""")

# Spatial window of a pixel: rows/columns [pos + lo, pos + lo + size) clipped,
# summed column by column (rows innermost) as kernels.norm._window_sum_2d does.
_WIN_HEAD = r"""
const long long idx = i;
const int px = (int)(idx % img);
const int py = (int)((idx / img) % img);
const long long base = idx - ((long long)py * img + px);
const int wy0 = py + lo < 0 ? 0 : py + lo;
const int wy1 = py + lo + size < img ? py + lo + size : img;
const int wx0 = px + lo < 0 ? 0 : px + lo;
const int wx1 = px + lo + size < img ? px + lo + size : img;
"""

# rnorm (and cnorm's second half) forward: d = minDiv + alpha * window sum of
# src^2, y = x * d^-p (rnorm: src = x; cnorm: src = x - local mean).
spec("cvn_rnorm_fwd",
     "raw T src, raw T x, int32 img, int32 size, T alpha, T min_div, int32 mode, T p",
     "T y, T d",
     "const int lo = -(size / 2);\n" + _WIN_HEAD + r"""
T s = 0;
for (int xx = wx0; xx < wx1; ++xx) {
  T col = 0;
  for (int yy = wy0; yy < wy1; ++yy) {
    const T v = src[base + (long long)yy * img + xx];
    col += v * v;
  }
  s += col;
}
T dd = s * alpha;
dd = dd + min_div;
d = dd;
y = x[idx] * cvn_pow_neg(dd, mode, p);
""")

# cnorm: u = x - (window sum of x) / (pixels in the window).
spec("cvn_cnorm_mean_diff",
     "raw T x, int32 img, int32 size",
     "T md",
     "const int lo = -(size / 2);\n" + _WIN_HEAD + r"""
T s = 0;
for (int xx = wx0; xx < wx1; ++xx) {
  T col = 0;
  for (int yy = wy0; yy < wy1; ++yy) {
    col += x[base + (long long)yy * img + xx];
  }
  s += col;
}
const int cnt = cvn_clip_count(py - size / 2, size, img) * cvn_clip_count(px - size / 2, size, img);
const T mean = s / (T)cnt;
md = x[idx] - mean;
""")

# rnorm/cnorm backward, first part: back = coef * mul * transposed window sum of
# gy*y/d (mul = x for rnorm, the mean difference for cnorm); with add_own the
# gy * d^-p term is added too (rnorm's whole gradient).
spec("cvn_rnorm_bwd",
     "raw T gy, raw T mul, raw T y, raw T d, int32 img, int32 size, T coef, int32 mode, T p, "
     "int32 add_own",
     "T dx",
     "const int lo = size / 2 - size + 1;\n" + _WIN_HEAD + r"""
T s = 0;
for (int xx = wx0; xx < wx1; ++xx) {
  T col = 0;
  for (int yy = wy0; yy < wy1; ++yy) {
    const long long j = base + (long long)yy * img + xx;
    T t = gy[j] * y[j];
    t = t / d[j];
    col += t;
  }
  s += col;
}
T back = s * mul[idx];
back = back * coef;
if (add_own) {
  back = back + gy[idx] * cvn_pow_neg(d[idx], mode, p);
}
dx = back;
""")

# cnorm backward, second part: dx = back - transposed window sum of back/count
# + gy * d^-p (the dependence of the local mean on x).
spec("cvn_cnorm_bwd",
     "raw T back, raw T gy, raw T d, int32 img, int32 size, int32 mode, T p",
     "T dx",
     "const int lo = size / 2 - size + 1;\n" + _WIN_HEAD + r"""
const int h = size / 2;
T s = 0;
for (int xx = wx0; xx < wx1; ++xx) {
  T col = 0;
  const int cx = cvn_clip_count(xx - h, size, img);
  for (int yy = wy0; yy < wy1; ++yy) {
    const int cnt = cvn_clip_count(yy - h, size, img) * cx;
    col += back[base + (long long)yy * img + xx] / (T)cnt;
  }
  s += col;
}
T out = back[idx] - s;
dx = out + gy[idx] * cvn_pow_neg(d[idx], mode, p);
""")
