"""Winograd minimal filtering F(m x m, r x r) for stride-1 convolutions.

A stride-1 conv of an r x r filter over a tile of ``a = m + r - 1`` input
pixels gives an m x m block of outputs.  Winograd's algorithm (Lavin and
Gray, "Fast Algorithms for Convolutional Neural Networks", 2016) computes the
block as ``A^T [(G g G^T) * (B^T d B)] A``: the filter g and the input tile d
are transformed to a x a, multiplied element by element, and transformed
back.  Over a whole layer the element-wise products of one tile position are
a GEMM (filters x channels) @ (channels x tiles*cases), so a conv becomes a^2
GEMMs of ``a^2 / (m^2 r^2)`` the direct conv's multiply-adds: 2.25x fewer for
F(2x2, 3x3), 4x for F(4x4, 3x3), 4.6x for F(3x3, 5x5).  The transforms are a
few passes over memory.

The matrices come from Toom-Cook polynomial multiplication at the points
:data:`POINTS` (and infinity), computed exactly in rationals: the transposed
Toom-Cook product of an r-term and an m-term polynomial is the correlation
``y_i = sum_k g_k d_(i+k)``.  Rows of ``B^T`` are scaled to integers (the
scale goes into ``G``, applied once per step to the weights), so the input
transform multiplies by small integers only.  Larger tiles need points farther
from 0, whose powers grow the rounding error; :data:`MAX_TILE` keeps float32
results within about 1e-5 of the output scale (1e-6 for the direct conv).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

MAX_TILE = 7  # a = m + r - 1 at most this (the points below, 0, +-1, +-2, 1/2)
POINTS = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2))
MIN_CHANNELS = 16  # channels and filters per group: fewer make the GEMMs too thin to gain
MIN_GAIN = 1.5  # direct multiply-adds / Winograd multiply-adds, at least


def _invert(matrix: list[list[Fraction]]) -> list[list[Fraction]]:
    """Exact inverse by Gauss-Jordan elimination (the matrices are at most 7 x 7)."""
    n = len(matrix)
    rows = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = next(i for i in range(col, n) if rows[i][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        rows[col] = [v / lead for v in rows[col]]
        for i in range(n):
            if i != col and rows[i][col] != 0:
                f = rows[i][col]
                rows[i] = [u - f * v for u, v in zip(rows[i], rows[col])]
    return [row[n:] for row in rows]


@functools.cache
def transforms(m: int, r: int) -> tuple[tuple[tuple[float, ...], ...], ...]:
    """``(A^T, G, B^T)`` of F(m, r), shapes (m, a), (a, r), (a, a), as float tuples.

    Evaluation at ``a - 1`` points and infinity: G evaluates the filter, A^T's
    columns the output polynomial's basis; B^T is the transposed inverse of the
    a-point Vandermonde matrix (the interpolation), its rows scaled to integers.
    """
    a = m + r - 1
    if not 2 <= a <= MAX_TILE or m < 1 or r < 1:
        raise ValueError(f"no Winograd transform F({m}, {r}) with tiles of at most {MAX_TILE}")
    points = POINTS[:a - 1]

    def rows(length):
        at_infinity = [Fraction(0)] * (length - 1) + [Fraction(1)]
        return [[p ** k for k in range(length)] for p in points] + [at_infinity]

    g, am, vandermonde = rows(r), rows(m), rows(a)
    inverse = _invert(vandermonde)
    bt = [[inverse[j][i] for j in range(a)] for i in range(a)]
    at = [[am[j][i] for j in range(a)] for i in range(m)]
    for j in range(a):
        scale = math.lcm(*(v.denominator for v in bt[j]))
        bt[j] = [v * scale for v in bt[j]]
        g[j] = [v / scale for v in g[j]]

    def floats(matrix):
        return tuple(tuple(float(v) for v in row) for row in matrix)

    return floats(at), floats(g), floats(bt)


@functools.cache
def kronecker(m: int, r: int) -> tuple[tuple[float, ...], ...]:
    """``G (x) G`` (a*a, r*r): row (i, j), column (k, l) is ``G[i][k] * G[j][l]``, so
    ``G w G^T`` of an r x r filter is this matrix times its r*r weights, and
    ``G^T dU G`` of a weight gradient its transpose times dU's a*a entries."""
    g = transforms(m, r)[1]
    return tuple(tuple(gi[k] * gj[l] for k in range(r) for l in range(r)) for gi in g for gj in g)


def tiles(modules: int, m: int) -> int:
    """Tiles along a side: the last one may reach past the output (its extra outputs are
    computed on zeros and dropped)."""
    return -(-modules // m)


def output_tile(modules: int, r: int) -> int:
    """The m of F(m, r) with the fewest multiply-adds per output map (a^2 per tile, the
    tiles covering ``modules``), tiles up to :data:`MAX_TILE`; 0 when none fits."""
    best, best_work = 0, math.inf
    for m in range(2, MAX_TILE - r + 2):
        work = (m + r - 1) ** 2 * tiles(modules, m) ** 2
        if work < best_work:
            best, best_work = m, work
    return best


def gain(modules: int, r: int) -> float:
    """Direct multiply-adds over Winograd's for one output map (1.0 when none fits)."""
    m = output_tile(modules, r)
    if not m:
        return 1.0
    return (r * modules) ** 2 / ((m + r - 1) * tiles(modules, m)) ** 2


__all__ = ["MAX_TILE", "MIN_CHANNELS", "MIN_GAIN", "POINTS", "gain", "kronecker", "output_tile",
           "tiles", "transforms"]
