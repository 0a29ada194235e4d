"""CUDA source of the dropout masks' uniforms, bit for bit those of :mod:`convnet.kernels.random`.

Used by :mod:`convnet.kernels.cuda.dropout`.
"""

from __future__ import annotations

from .registry import spec

# kernels.random.uniform_like: splitmix64 of key + (base + i) * golden, top 53 bits.
spec("cvn_uniform",
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
