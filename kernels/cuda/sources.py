"""CUDA source of the element-wise kernels that replace numpy kernels on CuPy, as plain data.

Every kernel is a ``cupy.ElementwiseKernel`` body: ``i`` is the flat index
of the output element the thread computes, ``raw`` arrays are indexed with
flat (C-order) indices, non-raw outputs are references to element ``i``.
Keeping the sources here, apart from CuPy, lets the test suite compile them
on the host and run them element by element (``tests/support/cuda_emulation.py``)
on machines without a GPU, and compare them with the numpy kernels.

Rules the bodies follow so that the same text compiles with NVRTC (in CuPy)
and with a host C++ compiler (the emulator):

* only ``raw`` array inputs, scalar inputs and outputs; arrays are passed
  C-contiguous, and raw outputs are only used with an explicit ``size``;
* helpers in the preamble are templates (the element type ``T`` is a
  typedef CuPy emits per call) and marked ``__device__``;
* ``min``/``max`` only on two operands of one type; index arithmetic in
  ``long long`` where a product can pass 2^31;
* no ``NAN``/``INFINITY`` macros (not defined under NVRTC).

Each body mirrors the operation order of the numpy kernel it replaces
(window sums in the same order, the same roundings; compiled without FMA
contraction), so many of them agree with numpy bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..neurons import NEURONS


@dataclass(frozen=True)
class KernelSpec:
    """One element-wise kernel: CuPy's ``ElementwiseKernel`` arguments."""

    name: str
    in_params: str
    out_params: str
    body: str
    preamble: str = ""
    arrays: tuple = ()  # non-raw inputs that are arrays (element i); other non-raw are scalars
    options: tuple = field(default=("--fmad=false",))


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

SPECS: dict[str, KernelSpec] = {}


def _spec(name: str, in_params: str, out_params: str, body: str, preamble: str = HELPERS,
          arrays: tuple = ()):
    SPECS[name] = KernelSpec(name, in_params, out_params, body, preamble, arrays)


# ----------------------------------------------------------------- conv / local
# cols (C*fs*fs, N*M*M): row (c, ky, kx), column (n, oy, ox).
_spec("cvn_conv_im2col",
      "raw T x, int32 n_img, int32 channels, int32 img, int32 fs, int32 pad, int32 stride, "
      "int32 mods",
      "T cols",
      r"""
const long long idx = i;
const long long ncol = (long long)n_img * mods * mods;
const long long row = idx / ncol;
const long long col = idx - row * ncol;
const int kx = (int)(row % fs);
const int ky = (int)((row / fs) % fs);
const long long c = row / ((long long)fs * fs);
const int ox = (int)(col % mods);
const int oy = (int)((col / mods) % mods);
const long long n = col / ((long long)mods * mods);
const int iy = oy * stride - pad + ky;
const int ix = ox * stride - pad + kx;
cols = (iy >= 0 && iy < img && ix >= 0 && ix < img)
    ? x[((n * channels + c) * img + iy) * img + ix] : (T)0;
""")

# Adjoint of cvn_conv_im2col: dx (N, C, S, S).  Contributions are added in the
# order kernels.conv._col2im_conv adds them (ky, then kx ascending).
_spec("cvn_conv_col2im",
      "raw T dcols, int32 n_img, int32 channels, int32 img, int32 fs, int32 pad, int32 stride, "
      "int32 mods",
      "T dx",
      r"""
const long long idx = i;
const int ix = (int)(idx % img);
const int iy = (int)((idx / img) % img);
const long long c = (idx / ((long long)img * img)) % channels;
const long long n = idx / ((long long)img * img * channels);
const long long ncol = (long long)n_img * mods * mods;
const int ty = iy + pad;
const int tx = ix + pad;
const int oy_hi = min(mods - 1, ty / stride);
const int ox_hi = min(mods - 1, tx / stride);
const int oy_lo = ty < fs ? 0 : (ty - fs) / stride + 1;
const int ox_lo = tx < fs ? 0 : (tx - fs) / stride + 1;
T sum = 0;
for (int oy = oy_hi; oy >= oy_lo; --oy) {
  const int ky = ty - oy * stride;
  for (int ox = ox_hi; ox >= ox_lo; --ox) {
    const int kx = tx - ox * stride;
    sum += dcols[((c * fs + ky) * fs + kx) * ncol + ((n * mods + oy) * mods + ox)];
  }
}
dx = sum;
""")

# cols (M*M, C*fs*fs, N) of a locally-connected layer.
_spec("cvn_local_im2col",
      "raw T x, int32 n_img, int32 channels, int32 img, int32 fs, int32 pad, int32 stride, "
      "int32 mods",
      "T cols",
      r"""
const long long idx = i;
const long long kk = (long long)channels * fs * fs;
const long long n = idx % n_img;
const long long row = (idx / n_img) % kk;
const long long q = idx / ((long long)n_img * kk);
const int ox = (int)(q % mods);
const int oy = (int)(q / mods);
const int kx = (int)(row % fs);
const int ky = (int)((row / fs) % fs);
const long long c = row / ((long long)fs * fs);
const int iy = oy * stride - pad + ky;
const int ix = ox * stride - pad + kx;
cols = (iy >= 0 && iy < img && ix >= 0 && ix < img)
    ? x[((n * channels + c) * img + iy) * img + ix] : (T)0;
""")

_spec("cvn_local_col2im",
      "raw T dcols, int32 n_img, int32 channels, int32 img, int32 fs, int32 pad, int32 stride, "
      "int32 mods",
      "T dx",
      r"""
const long long idx = i;
const int ix = (int)(idx % img);
const int iy = (int)((idx / img) % img);
const long long c = (idx / ((long long)img * img)) % channels;
const long long n = idx / ((long long)img * img * channels);
const long long kk = (long long)channels * fs * fs;
const int ty = iy + pad;
const int tx = ix + pad;
const int oy_hi = min(mods - 1, ty / stride);
const int ox_hi = min(mods - 1, tx / stride);
const int oy_lo = ty < fs ? 0 : (ty - fs) / stride + 1;
const int ox_lo = tx < fs ? 0 : (tx - fs) / stride + 1;
T sum = 0;
for (int oy = oy_hi; oy >= oy_lo; --oy) {
  const int ky = ty - oy * stride;
  for (int ox = ox_hi; ox >= ox_lo; --ox) {
    const int kx = tx - ox * stride;
    const long long q = (long long)oy * mods + ox;
    sum += dcols[(q * kk + (c * fs + ky) * fs + kx) * n_img + n];
  }
}
dx = sum;
""")

# y (N, F, P) = acc (F, N*P) + bias, bias (F,) when shared else (F, P).
_spec("cvn_conv_bias_out",
      "raw T acc, raw T bias, int32 n_img, int32 filters, int32 npix, int32 shared",
      "T y",
      r"""
const long long idx = i;
const long long q = idx % npix;
const long long f = (idx / npix) % filters;
const long long n = idx / ((long long)npix * filters);
y = acc[(f * n_img + n) * npix + q] + bias[shared ? f : f * npix + q];
""")

# y (N, F, P) = acc (P, F, N) + bias (F, P).
_spec("cvn_local_bias_out",
      "raw T acc, raw T bias, int32 n_img, int32 filters, int32 npix",
      "T y",
      r"""
const long long idx = i;
const long long q = idx % npix;
const long long f = (idx / npix) % filters;
const long long n = idx / ((long long)npix * filters);
y = acc[(q * filters + f) * n_img + n] + bias[f * npix + q];
""")

# ------------------------------------------------------------------------ pool
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

_spec("cvn_pool_max_fwd",
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

_spec("cvn_pool_avg_fwd",
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
_spec("cvn_pool_maxabs_fwd",
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
_spec("cvn_pool_bwd",
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
for (int oy = oy_hi; oy >= oy_lo; --oy) {
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

# ----------------------------------------------------------------------- norms
# cmrnorm forward: d = minDiv + alpha * sum of squares over the channel window
# [c - size/2, c - size/2 + size), y = x * d^-p.
_spec("cvn_cmr_fwd",
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
_spec("cvn_cmr_bwd",
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
_spec("cvn_rnorm_fwd",
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
_spec("cvn_cnorm_mean_diff",
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
_spec("cvn_rnorm_bwd",
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
_spec("cvn_cnorm_bwd",
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

# ----------------------------------------------------------------------- costs
# One thread per case: cost -log(max(p[label], 1e-30)), top-1 and top-k errors
# (a case is right at k when fewer than k classes beat the label's probability).
# A label outside [0, classes) gives a NaN cost, which the executor reports.
_spec("cvn_logreg_cost",
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

_spec("cvn_logreg_grad",
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

# --------------------------------------------------------------------- dropout
# kernels.random.uniform_like: splitmix64 of key + (base + i) * golden, top 53 bits.
_spec("cvn_uniform",
      "uint64 key, uint64 base",
      "float64 u",
      r"""
unsigned long long z = ((unsigned long long)base + (unsigned long long)i)
    * 0x9E3779B97F4A7C15ULL;
z += (unsigned long long)key;
z ^= z >> 30;
z *= 0xBF58476D1CE4E5B9ULL;
z ^= z >> 27;
z *= 0x94D049BB133111EBULL;
z ^= z >> 31;
u = (double)(z >> 11) * 1.1102230246251565e-16;
""", preamble="")

# --------------------------------------------------------------------- neurons
# The CUDA expressions of each neuron of the one table, kernels.neurons.NEURONS:
# name -> (forward expression of x, a, b; backward expression of g, x, y, a, b, c)
# with the operation order of kernels.neurons; c is a constant the caller
# computes in double precision where numpy does (abstanh: a * |b|).
NEURON_EXPRS: dict[str, tuple[str, str]] = {
    "ident": ("x", "g"),
    "logistic": ("((T)1 + tanh(x * (T)0.5)) * (T)0.5", "g * y * ((T)1 - y)"),
    "abs": ("cvn_abs(x)", "(x > (T)0 ? g : -g)"),
    "relu": ("(x < (T)0 ? (T)0 : x)", "g * (T)(y > (T)0)"),
    "nrelu": ("(x < (T)0 ? (T)0 : x)", "g * (T)(y > (T)0)"),
    "softrelu": ("(x > (T)0 ? x + log1p(exp(-x)) : log1p(exp(x)))", "g * -expm1(-y)"),
    "square": ("x * x", "(T)2 * g * x"),
    "sqrt": ("sqrt(x)", "g / ((T)2 * y)"),
    "log": ("log(x + a)", "g / (x + a)"),
    "tanh": ("tanh(x * b) * a", "(a == (T)0 ? (T)0 : g * (b * (a - y * y / a)))"),
    "abstanh": ("cvn_abs(tanh(x * cvn_abs(b))) * a",
                "g * c * ((T)1 - tanh(cvn_abs(b) * x) * tanh(cvn_abs(b) * x))"
                " * (T)((x > (T)0) - (x < (T)0))"),
    "brelu": ("((x < (T)0 ? (T)0 : x) > a ? a : (x < (T)0 ? (T)0 : x))",
              "g * (T)(y > (T)0 && y < a)"),
    "linear": ("x * a + b", "g * a"),
    "drelu": ("x - tanh(x / a) * a", "g * (tanh(x / a) * tanh(x / a))"),
}
_missing, _unknown = NEURONS.keys() - NEURON_EXPRS.keys(), NEURON_EXPRS.keys() - NEURONS.keys()
if _missing or _unknown:
    raise RuntimeError("the CUDA neuron expressions must match kernels.neurons.NEURONS: "
                       f"missing {sorted(_missing)}, unknown {sorted(_unknown)}")

for _name in NEURONS:
    _fwd, _bwd = NEURON_EXPRS[_name]
    _spec(f"cvn_neuron_fwd_{_name}", "T x, T a, T b", "T y", f"y = {_fwd};", arrays=("x",))
    # in place: the output holds x on entry
    _spec(f"cvn_neuron_fwd_inplace_{_name}", "T a, T b", "T y",
          f"const T x = y;\ny = {_fwd};")
    _spec(f"cvn_neuron_bwd_{_name}", "T g, T x, T y, T a, T b, T c", "T dx",
          f"dx = {_bwd};", arrays=("g", "x", "y"))


def neuron_backward_constant(name: str, args) -> float:
    """The ``c`` argument of a neuron's backward kernel (see NEURON_EXPRS)."""
    if name == "abstanh":
        return float(args[0]) * abs(float(args[1]))
    return 0.0


def parse_params(params: str) -> list[tuple[bool, str, str]]:
    """``'raw T x, int32 n'`` -> [(raw, type, name), ...] (CuPy's parameter syntax)."""
    out = []
    for part in params.split(","):
        words = part.split()
        if not words:
            continue
        if len(words) < 2:
            raise ValueError(f"bad kernel parameter {part!r}")
        raw = False
        for w in words[:-2]:
            if w != "raw":
                raise ValueError(f"unknown keyword {w!r} in kernel parameter {part!r}")
            raw = True
        out.append((raw, words[-2], words[-1]))
    return out


__all__ = ["KernelSpec", "SPECS", "HELPERS", "NEURON_EXPRS", "neuron_backward_constant",
           "parse_params"]
