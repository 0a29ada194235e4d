"""What ``--precision`` changes in a step (docs/PRECISION.md).

The modes (:data:`convnet.plan.precisions.PRECISIONS`):

* ``fp32`` (the default): float32 throughout; every bitwise promise holds.
* ``tf32``: float32 arrays, with the GEMMs and convolutions of CUDA devices on
  TF32 tensor cores (inputs rounded to 10 mantissa bits, float32 sums); a GPU
  mode (:func:`convnet.kernels.cuda.precision.use_tf32`), refused on CPU devices.
* ``bf16`` and ``fp16``: mixed precision.  The master weights and momentum stay
  float32 and every update is a float32 update; each layer computes in bfloat16
  or float16 (its inputs, and its weights cast from the master copy at each call),
  except softmax and the cost layers, which compute in float32 as autocast does;
  activations and their gradients are stored in the compute dtype, and weight
  gradients are widened to float32 before they are summed.  ``fp16`` also scales
  the loss (:class:`LossScale`): the cost gradients are multiplied by S, the
  updates divide by it, and a step whose gradients overflow is not applied (the
  weights and momentum are put back as they were before it, :class:`StepBackup`)
  while S halves.

:class:`Precision` is what the executor's task actions ask: the dtype a layer
computes in, and the casts at a layer's inputs, weights and gradients.  Under
``fp32`` and ``tf32`` it is never asked (``mixed`` is False), so those steps run
exactly the code they ran before the option existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from convnet.plan.precisions import PRECISIONS, computes_in_float32

#: Weight arrays cast to the compute dtype (``C<i>``, randSparse's channel tables, stay
#: float32: they hold indices, which bfloat16 would round).
CAST_PREFIXES = ("W", "b")


def compute_dtype(name: str):
    """The dtype layers compute in under mode ``name`` (None: float32).  bfloat16 comes
    from ml_dtypes, which numpy and CuPy both use for it; ImportError without it."""
    if name == "fp16":
        return np.dtype(np.float16)
    if name == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return None


@dataclass
class LossScale:
    """Dynamic loss scaling (fp16): S starts at 2^16; a step whose gradients overflow
    halves it and is skipped; ``growth_interval`` steps in a row without overflow
    double it (at most :data:`MAX`).  Below :data:`MIN` the gradients overflow float16
    unscaled, which scaling cannot help: the executor reports divergence."""

    scale: float = 2.0 ** 16
    good_steps: int = 0
    growth_interval: int = 2000

    MIN = 1.0
    MAX = 2.0 ** 24

    @property
    def exhausted(self) -> bool:
        """Whether halving the scale once more would take it below :data:`MIN`."""
        return self.scale / 2 < self.MIN

    def update(self, overflowed: bool) -> None:
        if overflowed:
            self.scale /= 2
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale = min(self.scale * 2, self.MAX)
            self.good_steps = 0

    def state(self) -> dict:
        """What a checkpoint keeps (JSON)."""
        return {"scale": self.scale, "good_steps": self.good_steps}

    @classmethod
    def from_state(cls, state) -> "LossScale":
        """A saved state, checked (a checkpoint is untrusted): ValueError if damaged."""
        if not isinstance(state, dict):
            raise ValueError(state)
        scale, good = state.get("scale"), state.get("good_steps")
        if type(scale) not in (int, float) or not cls.MIN / 2 <= scale <= cls.MAX \
                or np.log2(scale) != int(np.log2(scale)):
            raise ValueError(scale)
        if type(good) is not int or not 0 <= good < cls.growth_interval:
            raise ValueError(good)
        return cls(float(scale), good)


#: What each mode computes in, in a line (--print-plan; docs/PRECISION.md has the rest).
DESCRIPTIONS = {
    "fp32": "float32 throughout; the bitwise promises hold",
    "tf32": "float32 arrays, CUDA GEMMs and convolutions on TF32 tensor cores (inputs "
            "rounded to 10 mantissa bits); not bitwise reproducible against fp32",
    "bf16": "layers in bfloat16 (softmax and costs in float32), float32 master weights "
            "and updates",
    "fp16": "layers in float16 (softmax and costs in float32), float32 master weights and "
            "updates, dynamic loss scaling (a step whose gradients overflow is undone and "
            "the scale halves)",
}


def precision_text(name: str) -> str:
    """The line --print-plan gives a run's ``--precision``."""
    return f"Precision: {name}: {DESCRIPTIONS[name]}."


class Precision:
    """One run's ``--precision`` (see the module docstring)."""

    def __init__(self, name: str = "fp32"):
        if name not in PRECISIONS:
            raise ValueError(f"--precision is one of {', '.join(PRECISIONS)}, not {name!r}")
        self.name = name
        self.dtype = compute_dtype(name)
        self.loss_scale = LossScale() if name == "fp16" else None

    @property
    def mixed(self) -> bool:
        """Whether layers compute in another dtype than the float32 master weights."""
        return self.dtype is not None

    def layer_dtype(self, ldef):
        """The dtype ``ldef`` computes in."""
        if computes_in_float32(ldef, self.name):
            return np.dtype(np.float32)
        return self.dtype

    def layer_inputs(self, ldef, inputs: list) -> list:
        dtype = self.layer_dtype(ldef)
        return [x.astype(dtype, copy=False) for x in inputs]

    def layer_weights(self, ldef, weights: dict) -> dict:
        """The layer's weights as it computes with them (a cast copy per call)."""
        dtype = self.layer_dtype(ldef)
        return {k: w.astype(dtype, copy=False) if k.startswith(CAST_PREFIXES) else w
                for k, w in weights.items()}

    def stored_output(self, ldef, output):
        """A layer's output as it is kept: in the dtype the layer computes in."""
        return output.astype(self.layer_dtype(ldef), copy=False)

    @staticmethod
    def like(grad, array):
        """``grad`` in the dtype of the activation it is the gradient of (None stays)."""
        return None if grad is None else grad.astype(array.dtype, copy=False)

    @staticmethod
    def master_gradients(grads: dict) -> dict:
        """Weight gradients widened to float32, for the sums, all-reduces and updates."""
        return {k: g.astype(np.float32, copy=False) for k, g in grads.items()}


class StepBackup:
    """The weights and momentum of a :class:`~convnet.runtime.step.weights.WeightStore`
    before a loss-scaled step (:meth:`take`), to put back if its gradients overflow:
    one copy of every local array (an array the replicas share, once), into buffers
    kept from step to step.  Taken anew each step from the arrays the replicas hold
    then (``wball`` and a loaded checkpoint replace arrays with new ones), and put back
    in place into whatever array each replica holds at :meth:`restore`."""

    def __init__(self, store, devices: list):
        self._store, self._devices = store, devices
        self._buffers: dict[tuple, object] = {}  # (group, layer, replica, key) -> copy
        self._saved: list = []  # (device, the replica's dict, key, the copy)

    def take(self) -> None:
        self._saved = []
        copies: dict[int, object] = {}  # an array the replicas share: one copy
        for group, arrays_of in enumerate((self._store.weights, self._store.momentum)):
            for layer, replicas in arrays_of.items():
                placement = self._store.plan.layers[layer].devices
                for replica, arrays in enumerate(replicas):
                    if arrays is None:  # another process's replica
                        continue
                    device = self._devices[placement[replica]]
                    for key, array in arrays.items():
                        if id(array) not in copies:
                            with device.scope():
                                copies[id(array)] = self._copy((group, layer, replica, key),
                                                               array)
                        self._saved.append((device, arrays, key, copies[id(array)]))

    def _copy(self, slot: tuple, array):
        kept = self._buffers.get(slot)
        if kept is None or kept.shape != array.shape or kept.dtype != array.dtype:
            kept = self._buffers[slot] = array.copy()
        else:
            kept[...] = array
        return kept

    def restore(self) -> None:
        for device, arrays, key, copy in self._saved:
            with device.scope():
                arrays[key][...] = copy


__all__ = ["DESCRIPTIONS", "LossScale", "Precision", "StepBackup", "compute_dtype",
           "precision_text"]
