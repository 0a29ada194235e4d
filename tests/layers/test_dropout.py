"""Dropout masks: deterministic, independent of the shard split."""

from __future__ import annotations

import numpy as np
import pytest

from convnet.layers import build_layer
from convnet.layers.base import Context

from tests.support.layers import simple_def


def _layer(type_="dropout", keep=0.5, enable=True, name="drop"):
    return build_layer(simple_def(type_, [(3, 4, 4)], name=name,
                                  params={"keep": keep, "enable": enable}))


def _x(n=16, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 3, 4, 4)).astype(np.float32) + 5


@pytest.mark.parametrize("type_", ["dropout", "dropout2"])
@pytest.mark.parametrize("splits", [[16], [8, 8], [4, 4, 4, 4], [5, 11], [1, 15]])
def test_mask_does_not_depend_on_the_shard_split(type_, splits):
    layer = _layer(type_)
    x = _x()
    whole, _ = layer.forward([x], {}, Context(train=True, seed=7, step=3, case_offset=0))
    parts, lo = [], 0
    for size in splits:
        ctx = Context(train=True, seed=7, step=3, case_offset=lo)
        parts.append(layer.forward([x[lo:lo + size]], {}, ctx)[0])
        lo += size
    np.testing.assert_array_equal(np.concatenate(parts), whole)


def test_mask_changes_with_seed_step_and_layer():
    x = _x()
    base = _layer().forward([x], {}, Context(seed=1, step=1))[0] != 0
    for ctx, name in [(Context(seed=2, step=1), "drop"), (Context(seed=1, step=2), "drop"),
                      (Context(seed=1, step=1), "other")]:
        other = _layer(name=name).forward([x], {}, ctx)[0] != 0
        assert (other != base).mean() > 0.3  # about half the bits differ
    again = _layer().forward([x], {}, Context(seed=1, step=1))[0] != 0
    np.testing.assert_array_equal(again, base)


def test_mask_is_pinned():
    """The mask of a given (seed, step, layer, case) never changes between versions,
    so that runs stay reproducible."""
    layer = build_layer(simple_def("dropout", [(8,)], name="fc6drop", params={"keep": 0.5}))
    y, _ = layer.forward([np.ones((4, 8))], {}, Context(seed=123, step=45, case_offset=6))
    bits = "".join("1" if v else "0" for v in (y != 0).ravel())
    assert bits == PINNED_BITS


PINNED_BITS = "10001001001100101010000010000110"


@pytest.mark.parametrize("keep", [0.2, 0.5, 0.9])
def test_keep_rate_and_scaling(keep):
    x = np.ones((200, 3, 4, 4), dtype=np.float32)
    y, mask = _layer(keep=keep).forward([x], {}, Context(seed=5))
    kept = y != 0
    assert abs(kept.mean() - keep) < 0.03
    np.testing.assert_allclose(y[kept], 1 / keep, rtol=1e-6)
    y2, _ = _layer("dropout2", keep=keep).forward([x], {}, Context(seed=5))
    np.testing.assert_array_equal(y2 != 0, kept)  # same stream for the same layer name
    np.testing.assert_array_equal(y2[y2 != 0], 1.0)


def test_test_mode_and_disabled():
    x = _x()
    y, _ = _layer("dropout", keep=0.7).forward([x], {}, Context(train=False))
    assert y is x or np.array_equal(y, x)
    y, _ = _layer("dropout", keep=0.7, enable=False).forward([x], {}, Context(train=True))
    np.testing.assert_array_equal(y, x)
    y, _ = _layer("dropout2", keep=0.7).forward([x], {}, Context(train=False))
    np.testing.assert_allclose(y, 0.7 * x, rtol=1e-6)
    y, _ = _layer("dropout2", keep=0.7, enable=False).forward([x], {}, Context(train=True))
    np.testing.assert_allclose(y, 0.7 * x, rtol=1e-6)


@pytest.mark.parametrize("type_", ["dropout", "dropout2"])
def test_backward_uses_the_forward_mask(type_):
    layer = _layer(type_, keep=0.6)
    x = _x()
    ctx = Context(train=True, seed=9, step=2, case_offset=32)
    y, st = layer.forward([x], {}, ctx)
    g = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    (dx,), _ = layer.backward(g, [x], y, {}, st, ctx, [True])
    np.testing.assert_allclose(dx, g * (y / x), rtol=1e-5)
