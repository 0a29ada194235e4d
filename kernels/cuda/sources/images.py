"""CUDA source of the float conversion of stored images (:mod:`convnet.kernels.images`).

Used by :mod:`convnet.kernels.cuda.images`.
"""

from __future__ import annotations

from .registry import spec

# One thread per output element (n, c, y, x): the generic conversion's operations in its
# order (no FMA), reading the stored pixel channels-first or channels-last, mirrored
# where flips[n], and the mean at the case's window, mirrored alike.
_BODY = r"""
const long long x = i % width;
long long rest = i / width;
const long long y = rest % height;
rest /= height;
const long long c = rest % channels;
const long long n = rest / channels;
const long long sx = flips[n] ? width - 1 - x : x;
const long long p = channels_last ? ((n * height + y) * width + sx) * channels + c
                                  : ((n * channels + c) * height + y) * width + sx;
float v = (float)pix[p];
if (per_pixel_mean) {
  v = v - mean[(c * mean_height + offsets[2 * n] + y) * mean_width + offsets[2 * n + 1] + sx];
} else {
  v = v - mean[0];
}
if (has_shift) {
  v = v + shifts[n * channels + c];
}
if (has_scale) {
  v = v * scale;
}
out = v;
"""

#: The stored pixel types the kernel is compiled for: spec name suffix -> CuPy type.
PIXEL_TYPES = {"u8": "uint8", "f32": "float32"}

for _suffix, _type in PIXEL_TYPES.items():
    spec(f"cvn_images_{_suffix}",
         f"raw {_type} pix, raw float32 mean, raw int32 offsets, raw bool flips, "
         "raw float32 shifts, float32 scale, int32 channels, int32 height, int32 width, "
         "int32 mean_height, int32 mean_width, int32 channels_last, int32 per_pixel_mean, "
         "int32 has_shift, int32 has_scale",
         "float32 out", _BODY)
