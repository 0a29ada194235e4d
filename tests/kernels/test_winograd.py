"""Winograd convolutions: the transforms, the tile choice, agreement with the direct
convolution (float64 exactly, float32 within its rounding), and ``--no-winograd``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convnet.app.command_line.main import main
from convnet.kernels import conv as kconv
from convnet.kernels.conv import choice as conv_choice
from convnet.kernels.conv import winograd


@pytest.mark.parametrize("m,r", [(m, r) for r in range(1, 7) for m in range(1, 8)
                                 if 2 <= m + r - 1 <= winograd.MAX_TILE])
def test_transforms_compute_a_correlation(m, r):
    """A^T [(G g) * (B^T d)] is y_i = sum_k g_k d_(i+k), for every tile up to MAX_TILE."""
    at, g, bt = (np.array(t) for t in winograd.transforms(m, r))
    rng = np.random.default_rng(m * 10 + r)
    for _ in range(5):
        filt, tile = rng.standard_normal(r), rng.standard_normal(m + r - 1)
        expected = np.array([filt @ tile[i:i + r] for i in range(m)])
        np.testing.assert_allclose(at @ ((g @ filt) * (bt @ tile)), expected, rtol=1e-12,
                                   atol=1e-12)


def test_input_transform_is_integer():
    """B^T's rows are scaled to integers, so the input transform adds exact multiples."""
    for m, r in [(4, 3), (3, 5), (2, 3), (2, 5)]:
        bt = np.array(winograd.transforms(m, r)[2])
        assert np.array_equal(bt, np.round(bt))


def test_tile_choice():
    assert winograd.output_tile(7, 3) == 4     # 2 x 2 tiles of 6: 144 products, not 256 (m=2)
    assert winograd.output_tile(15, 5) == 3    # 5 x 5 tiles of 7
    assert winograd.output_tile(12, 5) == 3
    assert winograd.output_tile(10, 7) == 0    # no tile of at most MAX_TILE for 7x7 filters
    assert winograd.gain(7, 3) == pytest.approx(9 * 49 / 144)
    assert winograd.gain(15, 5) == pytest.approx(25 * 225 / (49 * 25))
    with pytest.raises(ValueError):
        winograd.transforms(4, 5)


def _geometry(xs, ws, pads):
    r = ws[0].shape[2]
    img = [x.shape[2] for x in xs]
    return dict(filter_sizes=[r] * len(xs), paddings=list(pads), strides=[1] * len(xs),
                channels=[x.shape[1] for x in xs],
                groups=[x.shape[1] // w.shape[1] for x, w in zip(xs, ws)], img_sizes=img,
                modules=img[0] + 2 * pads[0] - r + 1)


def _both_passes(layout, xs, ws, b, pads, shared, monkeypatch):
    monkeypatch.setattr(conv_choice, "LAYOUT", layout)
    geom = _geometry(xs, ws, pads)
    assert kconv.conv_layout(ws[0].shape[0], geom["modules"], geom["filter_sizes"],
                             geom["paddings"], geom["strides"], geom["channels"],
                             geom["groups"]) == layout
    y, cache = kconv.conv_forward(xs, ws, b, **geom)
    gy = np.random.default_rng(7).standard_normal(y.shape).astype(y.dtype)
    dxs, dws, db = kconv.conv_backward(gy, xs, ws, cache, [True] * len(xs),
                                       shared_biases=shared, **geom)
    return [y, *dxs, *dws, db]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3), r=st.integers(2, 5), img=st.integers(2, 9),
       groups=st.sampled_from([1, 2]),
       per_group=st.integers(1, 3), filters_per_group=st.integers(1, 3),
       pad_frac=st.floats(0, 1), two_inputs=st.booleans(), shared=st.booleans(),
       seed=st.integers(0, 1000))
def test_winograd_equals_the_direct_conv(n, r, img, groups, per_group, filters_per_group,
                                         pad_frac, two_inputs, shared, seed):
    """Any stride-1 geometry with a tile: outputs and all gradients equal the direct
    (nchw) convolution's in float64, bias shared or per pixel, one or two inputs."""
    pad = min(r - 1, int(pad_frac * r))
    if img + 2 * pad < r:
        img = r
    rng = np.random.default_rng(seed)
    c, f = groups * per_group, groups * filters_per_group
    xs = [rng.standard_normal((n, c, img, img))]
    ws = [rng.standard_normal((f, per_group, r, r))]
    pads = [pad]
    m = img + 2 * pad - r + 1
    if two_inputs and pad > 0:  # a second input of another size and padding, same map
        xs.append(rng.standard_normal((n, 2, img + 2, img + 2)))
        ws.append(rng.standard_normal((f, 2, r, r)))
        pads.append(pad - 1)
    b = rng.standard_normal(f) if shared else rng.standard_normal((f, m, m))
    with pytest.MonkeyPatch.context() as mp:
        direct = _both_passes("nchw", xs, ws, b, pads, shared, mp)
        fast = _both_passes("winograd", xs, ws, b, pads, shared, mp)
    for got, want in zip(fast, direct):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


def test_float32_rounding_stays_small(monkeypatch):
    """F(4x4, 3x3) and F(3x3, 5x5) in float32: within 1e-4 of the largest element of each
    result (the direct float32 convolution: about 1e-6)."""
    rng = np.random.default_rng(0)
    for c, f, img, r in [(32, 48, 7, 3), (24, 32, 15, 5)]:
        pad = r // 2
        x = np.maximum(rng.standard_normal((4, c, img, img)), 0)
        w = rng.standard_normal((f, c, r, r)) * 0.05
        b = np.zeros(f)
        exact = _both_passes("nchw", [x], [w], b, [pad], True, monkeypatch)
        fast = _both_passes("winograd", [x.astype(np.float32)], [w.astype(np.float32)],
                            b.astype(np.float32), [pad], True, monkeypatch)
        for got, want in zip(fast[:3], exact[:3]):  # y, dx, dW
            assert got.dtype == np.float32
            assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


def test_reference_imagenet_convs_take_winograd():
    """The stride-1 conv layers of the ImageNet nets at 128 px; conv1 (stride 4) does not."""
    assert kconv.conv_layout(64, 31, [11], [0], [4], [3], [1]) == "cases"
    for filters, modules, fs, channels in [(192, 15, 5, 64), (384, 7, 3, 192), (256, 7, 3, 384),
                                           (256, 7, 3, 256), (96, 15, 5, 32)]:
        assert kconv.conv_layout(filters, modules, [fs], [fs // 2], [1], [channels],
                                 [1]) == "winograd"


def _plan_json(capsys, *args):
    assert main(["--print-plan=json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_no_winograd_option(capsys, monkeypatch):
    """--no-winograd turns the kernels' choice off for the process; the memory estimate
    follows: the digits net's conv2 (32 channels, 8x8, F(4x4, 3x3)) keeps its
    transformed tiles, 2 x 2 tiles of 6 x 6 per channel and case, where the direct
    (chwn) conv keeps its padded 10 x 10 input."""
    monkeypatch.setattr(conv_choice, "WINOGRAD", True)
    fast = _plan_json(capsys)
    assert conv_choice.WINOGRAD
    direct = _plan_json(capsys, "--no-winograd")
    assert not conv_choice.WINOGRAD
    assert all(d["activation_bytes"] < f["activation_bytes"]
               for f, d in zip(fast["totals"], direct["totals"]))


def test_print_plan_names_the_winograd_layers(capsys, monkeypatch):
    """--print-plan says which conv layers the CPU kernels compute by Winograd (the
    digits net's conv2: 32 channels; conv1 has one), and none under --no-winograd."""
    monkeypatch.setattr(conv_choice, "WINOGRAD", True)
    assert _plan_json(capsys)["winograd_layers"] == ["conv2"]
    assert main(["--print-plan"]) == 0
    assert "Convolutions by Winograd's algorithm" in capsys.readouterr().out
    assert _plan_json(capsys, "--no-winograd")["winograd_layers"] == []
    assert main(["--print-plan", "--no-winograd"]) == 0
    assert "Winograd's algorithm" not in capsys.readouterr().out
