"""Which columns bench/bench_cuda.py measures, in which order, and the budget that cuts
the list short.

A GPU machine is often lent for minutes, so the columns are measured in the order of
what they decide, each step for every net before the next, and ``--budget`` stops
starting columns when the time runs out; what it leaves out is recorded:

1. ``default`` against PyTorch ``fp32``: the headline ratio, and the memory target
   (the CuPy pool against ``max_memory_allocated``);
2. ``tf32`` and ``bf16`` against PyTorch in the same mode: the precision targets;
3. the hybrid config on four logical devices of the GPU (AlexNet only): its target;
4. the switches that wait for a GPU run to become defaults: ``cudnn``, ``cuda graph``;
5. ``fp16`` against ``fp16 autocast`` (bf16 already answers the mixed-precision
   target), ``checks off`` (what the guarding checks cost), ``cudnn + graph``, and the
   ``generic kernels`` (``--generic``).
"""

from __future__ import annotations

import time

#: engine column -> (Executor keywords, environment switches)
ENGINE = {
    "default": ({}, {}),
    "checks off": ({"check_finite": False}, {}),
    "tf32": ({"precision": "tf32"}, {}),
    "bf16": ({"precision": "bf16"}, {}),
    "fp16": ({"precision": "fp16"}, {}),
}
#: the engine columns of ``--switches``
SWITCHES = {
    "cudnn": ({}, {"CONVNET_CUDNN": "1"}),
    "cuda graph": ({}, {"CONVNET_CUDA_GRAPH": "1"}),
    "cudnn + graph": ({}, {"CONVNET_CUDNN": "1", "CONVNET_CUDA_GRAPH": "1"}),
}
#: the engine column of ``--generic`` (the fused CUDA kernels uninstalled around it)
GENERIC = "generic kernels"
TORCH = ("fp32", "tf32", "bf16 autocast", "fp16 autocast")
#: the hybrid's one column (side ``hybrid``, net ``alexnet``)
HYBRID = "four logical devices"

#: (side, column) groups in the order of the module docstring
ORDER = ((("engine", "default"), ("torch", "fp32")),
         (("engine", "tf32"), ("torch", "tf32")),
         (("engine", "bf16"), ("torch", "bf16 autocast")),
         (("hybrid", HYBRID),),
         (("engine", "cudnn"),),
         (("engine", "cuda graph"),),
         (("engine", "fp16"), ("torch", "fp16 autocast")),
         (("engine", "checks off"),),
         (("engine", "cudnn + graph"),),
         (("engine", GENERIC),))


def columns(nets, engine, torch_modes, hybrid: bool) -> list[tuple[str, str, str]]:
    """(net, side, column) in measuring order, for the ``engine`` columns and PyTorch
    modes asked for; the hybrid (AlexNet's) where ``hybrid``."""
    out = []
    for group in ORDER:
        for net in nets:
            for side, column in group:
                wanted = {"engine": column in engine, "torch": column in torch_modes,
                          "hybrid": hybrid and net == "alexnet"}[side]
                if wanted:
                    out.append((net, side, column))
    return out


class Budget:
    """``--budget``: a column starts only while the time left covers the longest column
    of its net so far (a net's first column, while any time is left), so a run ends
    within about one column of its budget.  ``seconds`` None: no limit."""

    def __init__(self, seconds: float | None, clock=time.monotonic, start: float | None = None):
        self.seconds, self.clock = seconds, clock
        self.start = clock() if start is None else start
        self.longest: dict[str, float] = {}

    def refuses(self, net: str) -> str:
        """Why a column of ``net`` does not start now ('' when it does)."""
        if self.seconds is None:
            return ""
        left = self.seconds - (self.clock() - self.start)
        need = self.longest.get(net, 0.0)
        if left > 0 and left >= need:
            return ""
        return (f"the {self.seconds:g} s budget: {max(left, 0):.0f} s left"
                + (f", a column of {net} took {need:.0f} s" if need else ""))

    def took(self, net: str, seconds: float) -> None:
        self.longest[net] = max(self.longest.get(net, 0.0), seconds)
