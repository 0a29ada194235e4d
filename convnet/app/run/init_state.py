"""What a new run takes from another run's checkpoint (``--init-from``): the layers that fit.

Fine-tuning starts from a trained (or imported) net and changes part of it: a new
classifier, other data, other devices.  Weights are kept per layer, whatever devices
or ``gpu=`` lines the saved run had, so every layer of this net whose name the
checkpoint holds with arrays of the same shapes takes them: its weights, biases and
any other state a layer keeps (every group of the checkpoint but the optimizer's,
:data:`~convnet.app.run.resume_state.OPTIMIZER_GROUPS`).  A layer that is new, or
whose shapes differ, keeps its initial weights (``initW``, ``initB``).  The optimizer
state (momentum), the step and epoch counters and so the learning-rate schedules
start afresh: it is a new run, where ``--load-file`` continues the saved one exactly.

The checkpoint is untrusted input, read as a resume reads it: only the arrays that
are loaded are decompressed, as float32, and connectivity tables are checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convnet.app.checkpoint import CheckpointReader
from convnet.app.run.resume_state import (OPTIMIZER_GROUPS, check_tables, state_layout,
                                          unused_layers)
from convnet.config.model import NetConfig
from convnet.errors import CheckpointError
from convnet.plan.ops import Plan


@dataclass
class LayerMatch:
    """How the net's weight layers met the checkpoint's, layer by layer."""

    loaded: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    #: layer -> (array key, shape saved or None where the checkpoint lacks it, shape here)
    differs: dict[str, list[tuple[str, tuple | None, tuple]]] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)  # saved layers this net does not have

    def table(self, checkpoint: Path) -> list[str]:
        """The short table a run prints: loaded / new / shape differs / not in this net."""
        counts = [f"{len(self.loaded)} layer(s) loaded", f"{len(self.new)} new",
                  f"{len(self.differs)} with other shapes"]
        lines = [f"--init-from {checkpoint}: {', '.join(counts)}"]
        rows = [("loaded", ", ".join(self.loaded)), ("new", ", ".join(self.new))]
        rows += [("shape differs" if i == 0 else "", f"{name}: " + "; ".join(
            f"{key} {'absent' if saved is None else saved} saved, {here} here"
            for key, saved, here in arrays)) for i, (name, arrays)
            in enumerate(self.differs.items())]
        rows.append(("not in this net", ", ".join(self.unused)))
        width = max(len(label) for label, _ in rows)
        lines += [f"  {label:<{width}}  {text}" for label, text in rows if text]
        return lines


def _layer_keys(net: NetConfig, plan: Plan) -> dict[str, dict[str, tuple[int, ...]]]:
    """Layer -> its state arrays (all but the optimizer's) and their shapes."""
    by_layer: dict[str, dict[str, tuple[int, ...]]] = {}
    for key, shape in state_layout(net, plan).items():
        group, name, _ = key.split("/", 2)
        if group not in OPTIMIZER_GROUPS:
            by_layer.setdefault(name, {})[key] = tuple(shape)
    return by_layer


def read_init_state(checkpoint: Path, net: NetConfig,
                    plan: Plan) -> tuple[dict[str, np.ndarray], LayerMatch]:
    """The arrays of the layers that fit (float32), and how every layer fared; a
    checkpoint none of whose layers fits is refused (it names another net)."""
    match, arrays = LayerMatch(), {}
    with CheckpointReader(checkpoint) as reader:
        saved = set(reader.keys)
        saved_layers = {key.split("/")[1] for key in saved if key.count("/") >= 2
                        and key.split("/")[0] not in OPTIMIZER_GROUPS}
        for name, keys in _layer_keys(net, plan).items():
            if name not in saved_layers:
                match.new.append(name)
                continue
            shapes = {key: reader.shape(key) if key in saved else None for key in keys}
            if any(shapes[key] != shape for key, shape in keys.items()):
                match.differs[name] = [(key.split("/", 2)[2], shapes[key], shape)
                                       for key, shape in keys.items()
                                       if shapes[key] != shape]
                continue
            match.loaded.append(name)
            arrays.update({key: reader.read(key, shape, np.float32)
                           for key, shape in keys.items()})
        match.unused = unused_layers(reader.keys, net, plan)
    if not match.loaded:
        raise CheckpointError(f"{checkpoint}: no layer of this net ({net.layer_def_file}) is "
                              "in the checkpoint with the same name and shapes, so "
                              "--init-from has nothing to start from")
    check_tables(checkpoint, arrays, net)
    return arrays, match
