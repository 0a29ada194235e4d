"""The CUDA conversion of stored images, run on the host: bitwise the numpy conversion.

``cvn_images_u8`` and ``cvn_images_f32`` (:mod:`convnet.kernels.cuda.images`) are
compiled for the host and run element by element (:mod:`tests.support.cuda_emulation`).
What is compared: their float32 images against the generic kernel's, bit for bit, over
both pixel layouts and dtypes, per-pixel and scalar means, mirrored cases, and with and
without colour noise; and through the load path of a step
(:class:`~convnet.runtime.step.uploads.Uploads` on a device whose kernels are the CUDA
ones) for a training batch of the ``image`` provider, against its ``get_batch``.
"""

from __future__ import annotations

import numpy as np
import pytest

from convnet.data import DataOptions, make_provider
from convnet.kernels import images as kimages
from convnet.kernels.cuda import images as cimages
from convnet.kernels.cuda.kernel_set import using
from convnet.runtime.devices.cpu import CpuDevice
from convnet.runtime.step.uploads import Uploads
from tests.support.cuda_emulation import (compiler_available, emulated_kernel_set,
                                          overrides_for_numpy)
from tests.support.jpeg_batches import write_image_set

pytestmark = pytest.mark.skipif(not compiler_available(),
                                reason="needs a host C++ compiler to emulate the kernels")


@pytest.mark.parametrize("dtype, last", [(np.uint8, True), (np.uint8, False),
                                         (np.float32, True), (np.float32, False)])
def test_the_kernel_is_bitwise_the_numpy_conversion(dtype, last):
    rng = np.random.default_rng(4)
    n, c, h, w = 5, 3, 6, 7
    pixels = rng.integers(0, 256, (n, h, w, c) if last else (n, c, h, w)).astype(dtype)
    if dtype == np.float32:
        pixels += rng.random(pixels.shape, dtype=np.float32)
    offsets = rng.integers(0, 4, (n, 2)).astype(np.int32)
    flips = rng.integers(0, 2, n).astype(bool)
    shifts = rng.standard_normal((n, c)).astype(np.float32)
    for mean, noise in (((rng.random((c, 9, 10)) * 255).astype(np.float32), True),
                        (np.asarray(np.float32(117.3)), False)):
        args = (pixels, mean, offsets, flips, shifts if noise else None,
                np.float32(1 / 1.3) if noise else None, last)
        with using(emulated_kernel_set()):
            got = cimages.images_to_float(*args)
        want = kimages.images_to_float.generic(*args)
        assert got.dtype == np.float32 and got.shape == (n, c, h, w)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_a_training_batch_made_float_by_the_kernel_in_a_load_is_get_batchs(tmp_path):
    write_image_set(tmp_path, [0, 1], cases=7, size=16)
    provider = make_provider("image", str(tmp_path), DataOptions(
        train_range=[0], test_range=[1], inner_size=12, color_noise=0.4, seed=9))
    column = provider.load_batch(0, train=True, epoch=2)[0]
    with overrides_for_numpy():
        got = Uploads([CpuDevice(0, 0)]).to_device(0, column, 2, 7)
    want = provider.get_batch(0, train=True, epoch=2)[0][2:7]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    provider.close()
