"""The kernel spec type and the one registry of specs the kernel families fill.

Each family module (conv, pool, norm, nn, dropout, neurons) calls :func:`spec`
once per kernel at import; :mod:`convnet.kernels.cuda.sources` imports them
all, so :data:`SPECS` is complete once the package is imported.
:func:`parse_params` reads CuPy's parameter syntax for the emulator and the
tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .helpers import HELPERS


@dataclass(frozen=True)
class KernelSpec:
    """One element-wise kernel: CuPy's ``ElementwiseKernel`` arguments."""

    name: str
    in_params: str
    out_params: str
    body: str
    preamble: str = ""
    arrays: tuple = ()  # non-raw inputs that are arrays (element i); other non-raw are scalars
    options: tuple = field(default=("--fmad=false",))


SPECS: dict[str, KernelSpec] = {}


def spec(name: str, in_params: str, out_params: str, body: str, preamble: str = HELPERS,
         arrays: tuple = ()):
    """Add the kernel ``name`` to :data:`SPECS` (its preamble the shared helpers unless
    given)."""
    SPECS[name] = KernelSpec(name, in_params, out_params, body, preamble, arrays)


def parse_params(params: str) -> list[tuple[bool, str, str]]:
    """``'raw T x, int32 n'`` -> [(raw, type, name), ...] (CuPy's parameter syntax)."""
    out = []
    for part in params.split(","):
        words = part.split()
        if not words:
            continue
        if len(words) < 2:
            raise ValueError(f"bad kernel parameter {part!r}")
        raw = False
        for w in words[:-2]:
            if w != "raw":
                raise ValueError(f"unknown keyword {w!r} in kernel parameter {part!r}")
            raw = True
        out.append((raw, words[-2], words[-1]))
    return out
