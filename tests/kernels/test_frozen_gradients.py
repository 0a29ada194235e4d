"""A frozen layer's backward pass (``need_dw=False``): the kernels skip its weight
gradients and give the same input and bias gradients, in every convolution layout."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.kernels import conv as kconv
from convnet.kernels import nn as knn
from convnet.kernels.conv import choice

GEOMETRY = dict(filter_sizes=[3], paddings=[1], strides=[1], channels=[8], groups=[2],
                img_sizes=[6], modules=6)


@pytest.mark.parametrize("layout", ["winograd", "cases", "chwn", "nchw"])
def test_conv_without_weight_gradients(monkeypatch, layout):
    monkeypatch.setattr(choice, "LAYOUT", layout)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8, 6, 6)).astype(np.float32)
    w = rng.standard_normal((16, 4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    y, cache = kconv.conv_forward([x], [w], b, **GEOMETRY)
    gy = rng.standard_normal(y.shape).astype(np.float32)
    full = kconv.conv_backward(gy, [x], [w], cache, [True], **GEOMETRY)
    frozen = kconv.conv_backward(gy, [x], [w], cache, [True], need_dw=False, **GEOMETRY)
    assert full[1][0] is not None and frozen[1] == [None]
    np.testing.assert_array_equal(frozen[0][0], full[0][0])
    np.testing.assert_array_equal(frozen[2], full[2])


def test_local_and_fc_without_weight_gradients():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 5, 5)).astype(np.float32)
    geometry = dict(filter_sizes=[3], paddings=[0], strides=[1], channels=[4], groups=[1],
                    img_sizes=[5], modules=3)
    w = rng.standard_normal((9, 6, 36)).astype(np.float32)
    y, cache = kconv.local_forward([x], [w], np.zeros((6, 3, 3), np.float32), **geometry)
    gy = rng.standard_normal(y.shape).astype(np.float32)
    full = kconv.local_backward(gy, [x], [w], cache, [True], **geometry)
    frozen = kconv.local_backward(gy, [x], [w], cache, [True], need_dw=False, **geometry)
    assert frozen[1] == [None]
    np.testing.assert_array_equal(frozen[0][0], full[0][0])
    fw = rng.standard_normal((100, 7)).astype(np.float32)
    gf = rng.standard_normal((3, 7)).astype(np.float32)
    full = knn.fc_backward(gf, [x], [fw], [True])
    frozen = knn.fc_backward(gf, [x], [fw], [True], need_dw=False)
    assert frozen[1] == [None]
    np.testing.assert_array_equal(frozen[0][0], full[0][0])
