"""CUDA source of the conv and local layers' kernels: im2col, col2im, bias-and-transpose.

Used by :mod:`convnet.kernels.cuda.conv`; each mirrors the generic kernel of
:mod:`convnet.kernels.conv.im2col` or :mod:`convnet.kernels.conv.local`.
"""

from __future__ import annotations

from .registry import spec

# cols (C*fs*fs, N*M*M): row (c, ky, kx), column (n, oy, ox).
spec("cvn_conv_im2col",
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
# order kernels.conv.im2col._col2im_conv adds them (ky, then kx ascending).
spec("cvn_conv_col2im",
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
spec("cvn_local_im2col",
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

spec("cvn_local_col2im",
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
spec("cvn_conv_bias_out",
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
spec("cvn_local_bias_out",
     "raw T acc, raw T bias, int32 n_img, int32 filters, int32 npix",
     "T y",
     r"""
const long long idx = i;
const long long q = idx % npix;
const long long f = (idx / npix) % filters;
const long long n = idx / ((long long)npix * filters);
y = acc[(q * filters + f) * n_img + n] + bias[f * npix + q];
""")
