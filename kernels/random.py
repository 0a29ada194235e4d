"""Counter-based uniforms for dropout masks.

A mask bit must depend only on (seed, step, layer, case index in the
minibatch, feature index) so that it does not change with the device count
or the shard split (docs/DESIGN.md).  Each element gets the counter
``case * features + feature`` and its uniform is the splitmix64 finaliser of
``key + counter * golden`` where ``key`` mixes seed, step and layer name.
Everything is integer arithmetic in uint64 (wrapping), so numpy and CuPy
produce the same bits.
"""

from __future__ import annotations

import hashlib

import numpy as np

from . import array_module, kernel

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def _mix_int(z: int) -> int:
    """splitmix64 finaliser on a Python int (64-bit)."""
    z &= _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def name_key(name: str) -> int:
    """A 64-bit value for a layer name, stable across processes and platforms."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little")


def stream_key(seed: int, step: int, name: str) -> int:
    """The key of one (seed, step, layer) stream."""
    z = _mix_int(int(seed) * _GOLDEN + 1)
    z = _mix_int(z ^ (int(step) * _M1 + 2))
    return _mix_int(z ^ name_key(name))


@kernel
def uniform_like(x, key: int, case_offset: int):
    """Uniforms in [0, 1) (float64) of x's shape (cases first), for cases starting
    at global index ``case_offset`` of the minibatch."""
    xp = array_module(x)
    shape = x.shape
    n = int(shape[0])
    features = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
    u64 = xp.uint64
    counter = xp.arange(n * features, dtype=u64)
    counter += u64((int(case_offset) * features) & _MASK)
    z = counter * u64(_GOLDEN)
    z += u64(key & _MASK)
    z ^= z >> u64(30)
    z *= u64(_M1)
    z ^= z >> u64(27)
    z *= u64(_M2)
    z ^= z >> u64(31)
    z >>= u64(11)
    u = z.astype(xp.float64)
    u *= 2.0 ** -53
    return u.reshape(shape)


def keep_mask(x, keep: float, key: int, case_offset: int):
    """Boolean mask of x's shape: True with probability ``keep``, per (case, feature)."""
    return uniform_like(x, key, case_offset) < keep
