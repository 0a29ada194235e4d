"""The normalisation kernels' window sums (kernels/norm.py): the band-matrix GEMM along
the columns of a map against plain shifted adds, for odd and even windows, both
directions (forward and the transposed window of the backward pass) and windows
larger than the map."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from convnet.kernels import norm


def _reference(a, size: int, transpose: bool):
    """Shifted adds along rows, then columns (the order the kernel keeps)."""
    h = size // 2
    lo = (h - size + 1) if transpose else -h
    return norm._shift_sum(np, norm._shift_sum(np, a, 2, lo, size), 3, lo, size)


@settings(max_examples=40, deadline=None)
@given(side=st.integers(1, 17), size=st.integers(1, 7), transpose=st.booleans(),
       cases=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_window_sum_is_the_shifted_add_sum(side, size, transpose, cases, seed):
    a = np.random.default_rng(seed).standard_normal((cases, 2, side, side)).astype(np.float32)
    out = np.full_like(a, np.nan)  # every element must be written
    got = norm._window_sum_2d(np, a, size, transpose, out=out)
    assert got is out
    np.testing.assert_allclose(got, _reference(a, size, transpose), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(norm._window_sum_2d(np, a, size, transpose),
                               _reference(a, size, transpose), rtol=1e-6, atol=1e-6)


def test_band_matrix_of_a_clipped_window():
    # a window of 3 centred on each of 4 positions: rows j feed outputs i with |i - j| <= 1
    band = norm._band(np, 4, -1, 3, np.float32)
    assert band.tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
