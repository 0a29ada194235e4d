"""The modes of ``--precision`` and the size of what each stores, per layer.

The executor's side (the casts, the loss scale) is
:mod:`convnet.runtime.step.precision`; this module is what both it and the plan's
memory estimate (:mod:`convnet.plan.memory`) read: which modes there are, which
layers compute in float32 under a mixed mode, and so how many bytes an element of
a layer's activations and gradients takes (docs/PRECISION.md).
"""

from __future__ import annotations

#: The modes of ``--precision``, the default first.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: Modes that compute on GPU tensor cores only (no meaning on CPU devices).
GPU_ONLY = ("tf32",)
#: Modes whose layers compute in a 16-bit float (bfloat16, float16).
MIXED = ("bf16", "fp16")
#: Layer types that compute in float32 under a mixed mode (autocast's float32 list):
#: the probabilities and, with them, the costs, whose logs and sums lose too much in
#: 8 or 11 bits; and batch normalisation, whose statistics do (as cuDNN's and
#: PyTorch's, which keep them in float32).
FLOAT32_LAYERS = ("softmax", "bnorm")


def computes_in_float32(ldef, precision: str) -> bool:
    """Whether layer ``ldef`` computes (and stores its output) in float32."""
    return precision not in MIXED or ldef.is_cost or ldef.type in FLOAT32_LAYERS


def element_bytes(ldef, precision: str) -> int:
    """Bytes of one element of the layer's activations, gradients and kept state."""
    return 4 if computes_in_float32(ldef, precision) else 2


__all__ = ["PRECISIONS", "GPU_ONLY", "MIXED", "FLOAT32_LAYERS", "computes_in_float32",
           "element_bytes"]
