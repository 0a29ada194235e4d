"""What a resumed run takes from its checkpoint, each value checked before use.

A checkpoint is untrusted input (it may be edited, damaged or made by someone
else), and what it holds steers the run: a string or complex weight array
would train to nonsense, ``log_rows: 10**12`` would make the log reader
believe in rows that never were.  So the weights are read for exactly the
layout the net needs (``weights/<layer>/<key>`` and ``momentum/<layer>/<key>``,
float32, the shapes of :meth:`convnet.config.model.LayerDef.param_shapes`) and
nothing else is decompressed; the counters (and ``--precision fp16``'s loss
scale) must be numbers of the right kind in a sane range, and the data's class names
must be those the net was trained on.  (The saved options are checked by
:func:`convnet.app.saved_options.read_resume`.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convnet.app.checkpoint import CheckpointReader
from convnet.config.layer_types.weight_shapes import is_connection_key
from convnet.config.model import NetConfig
from convnet.data.ranges import MAX_BATCHES
from convnet.errors import CheckpointError, DataError
from convnet.layers.connectivity import table_error
from convnet.plan.ops import Plan
from convnet.runtime.step.precision import LossScale

STATE_GROUPS = ("weights", "momentum")
#: The groups that are the optimizer's: a run started from another's weights
#: (``--init-from``) starts them afresh; every other group is the layers' own state.
OPTIMIZER_GROUPS = ("momentum",)
#: What a refusal to resume says when the checkpoint's net is not this one.
INIT_FROM_HINT = ("; to start a new run from the weights of the layers that fit (a new "
                  "head, say), give --init-from instead of --load-file")
#: Far beyond any real run; larger saved counters are damage.
MAX_STEPS = 10**12
MAX_EPOCHS = 10**9
MAX_SECONDS = 10**10  # about 300 years


def state_layout(net: NetConfig, plan: Plan) -> dict[str, tuple[int, ...]]:
    """The arrays the executor saves for this net and plan, and their shapes: one
    weights and one momentum array per parameter of every layer the plan runs."""
    layout = {}
    for name in plan.layers:
        for key, shape in net[name].param_shapes().items():
            for group in STATE_GROUPS:
                layout[f"{group}/{name}/{key}"] = tuple(shape)
    return layout


def read_state(checkpoint: Path, net: NetConfig, plan: Plan) -> dict[str, np.ndarray]:
    """The net's weights and momentum from ``checkpoint``, float32 and shaped exactly
    as the net needs; arrays of other layers are left unread."""
    layout = state_layout(net, plan)
    with CheckpointReader(checkpoint) as reader:
        missing = sorted(set(layout) - set(reader.keys))
        if missing:
            raise CheckpointError(f"{checkpoint}: does not fit this net "
                                  f"({net.layer_def_file}): the checkpoint has no "
                                  f"'{missing[0]}': it was saved from another net"
                                  + INIT_FROM_HINT)
        for key, shape in layout.items():
            saved = reader.shape(key)
            if saved != tuple(shape):
                raise CheckpointError(f"{checkpoint}: does not fit this net: '{key}' has "
                                      f"shape {saved}, the net needs {tuple(shape)}"
                                      + INIT_FROM_HINT)
        state = {key: reader.read(key, shape, np.float32) for key, shape in layout.items()}
    check_tables(checkpoint, state, net)
    return state


def check_tables(checkpoint: Path, state: dict[str, np.ndarray], net: NetConfig) -> None:
    """:func:`check_table` of every connectivity table among the arrays ``state``."""
    for key, array in state.items():
        group, name, array_key = key.split("/", 2)
        if is_connection_key(array_key):
            check_table(checkpoint, key, group, array, net[name].attrs, int(array_key[1:]))


def saved_tables(checkpoint: Path, net: NetConfig, plan: Plan) -> dict[str, dict[int, np.ndarray]]:
    """Layer -> input -> the randSparse connectivity table ``checkpoint`` holds (what a
    run resumed from it uses, whatever its seed), checked."""
    tables: dict[str, dict[int, np.ndarray]] = {}
    with CheckpointReader(checkpoint) as reader:
        for key, shape in state_layout(net, plan).items():
            group, name, array_key = key.split("/", 2)
            if group == "weights" and is_connection_key(array_key) and key in reader.keys:
                index = int(array_key[1:])
                table = reader.read(key, shape, np.float32)
                check_table(checkpoint, key, group, table, net[name].attrs, index)
                tables.setdefault(name, {})[index] = table.astype(np.int64)
    return tables


def check_table(checkpoint: Path, key: str, group: str, array: np.ndarray, attrs: dict,
                 index: int) -> None:
    """A saved connectivity table must be whole permutations of the input's channels,
    and its momentum zero (it never learns; the async exchange adds momentum as
    increments)."""
    if group == "momentum":
        why = None if not np.any(array) else "is not zero (a connectivity table never learns)"
    else:
        why = table_error(array, attrs["channels"][index], attrs["filterChannels"][index])
    if why is not None:
        raise CheckpointError(f"{checkpoint}: damaged checkpoint: '{key}' {why}")


def unused_layers(keys, net: NetConfig, plan: Plan) -> list[str]:
    """Layers whose state the checkpoint holds but this net does not run."""
    saved = {key.split("/")[1] for key in keys if key.count("/") >= 2}
    return sorted(saved - {name for name in plan.layers if net[name].param_shapes()})


@dataclass(frozen=True)
class Counters:
    """Where the saved run stood."""

    step: int
    epoch: int
    batch_index: int
    cumulative_time: float
    log_rows: int


def _count(value, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(value)
    return value


def read_counters(checkpoint: Path, meta: dict,
                  batches_per_epoch: int | None = None) -> Counters:
    """The step/epoch/batch counters, time and log rows of ``meta``, checked; with
    ``batches_per_epoch`` (a run that trains on), the batch index must lie within an
    epoch of it (equal to it at an epoch's end)."""
    counters = _read_counters(checkpoint, meta)
    if batches_per_epoch is not None and counters.batch_index > batches_per_epoch:
        raise CheckpointError(f"{checkpoint}: its batch_index {counters.batch_index} is "
                              f"beyond the {batches_per_epoch} batches of an epoch of the "
                              "train range: the checkpoint is damaged, or was saved with "
                              "other data or another --train-range" + INIT_FROM_HINT)
    return counters


def _read_counters(checkpoint: Path, meta: dict) -> Counters:
    counters = meta.get("counters")
    try:
        if not isinstance(counters, dict):
            raise ValueError(counters)
        step = _count(counters["step"], 0, MAX_STEPS)
        seconds = counters.get("cumulative_time", 0.0)
        if type(seconds) not in (int, float) or not (math.isfinite(seconds)
                                                     and 0 <= seconds <= MAX_SECONDS):
            raise ValueError(seconds)
        rows = counters.get("log_rows")
        return Counters(step=step, epoch=_count(counters["epoch"], 1, MAX_EPOCHS),
                        batch_index=_count(counters["batch_index"], 0, MAX_BATCHES),
                        cumulative_time=float(seconds),
                        # every logged row follows at least one training step
                        log_rows=0 if rows is None else _count(rows, 0, step))
    except (KeyError, ValueError, TypeError):
        raise CheckpointError(f"{checkpoint}: damaged checkpoint: its step, epoch and log "
                              "counters are missing or out of range") from None


def classes_meta(provider) -> dict:
    """What a checkpoint keeps of the data: its class names in label order, what the
    net's outputs mean."""
    return {"label_names": [str(name) for name in provider.label_names]}


def check_classes(checkpoint: Path, meta: dict, provider) -> None:
    """Refuse a saved net on data whose classes are not those it was trained on: a
    class folder added, removed or renamed since shifts the labels under the net, which
    would then train on (or name its predictions by) the wrong classes without a sign.
    A checkpoint that predates the record is not checked, nor one of or on ``dummy``
    data, whose classes are made-up numbers (a dummy-trained net may be tested on the
    digits, say, to try the machinery)."""
    saved = meta.get("label_names")
    options = meta.get("options") if isinstance(meta.get("options"), dict) else {}
    if saved is None or "dummy" in (options.get("data_provider"), provider.name):
        return
    if not isinstance(saved, list) or not all(isinstance(name, str) for name in saved):
        raise CheckpointError(f"{checkpoint}: damaged checkpoint: its class names are "
                              "not a list of names")
    now = [str(name) for name in provider.label_names]
    if saved == now:
        return
    first = next(k for k in range(max(len(saved), len(now))) if saved[k:k + 1] != now[k:k + 1])
    change = f"class {first} was {_quoted(saved, first)}, now {_quoted(now, first)}"
    if len(saved) != len(now):
        change += f"; {len(saved)} classes then, {len(now)} now"
    raise DataError(f"{checkpoint}: the data's classes are not those the net was trained "
                    f"on ({change}): its labels would mean other classes; give --data-path "
                    "the data it was trained on, or start a new run from its weights with "
                    "--init-from")


def _quoted(names: list[str], index: int) -> str:
    return repr(names[index]) if index < len(names) else "none"


def loss_scale_meta(executor) -> dict:
    """What a checkpoint keeps of ``--precision fp16``'s loss scale (nothing otherwise):
    resumed, the run goes on with the scale it had reached."""
    scaling = getattr(getattr(executor, "precision", None), "loss_scale", None)
    return {"loss_scale": scaling.state()} if scaling is not None else {}


def restore_loss_scale(checkpoint: Path, meta: dict, executor) -> None:
    """Put a checkpoint's loss scale on ``executor`` (if it scales the loss and the
    checkpoint has one; a run resumed in another precision starts afresh)."""
    precision = getattr(executor, "precision", None)
    if precision is None or precision.loss_scale is None or "loss_scale" not in meta:
        return
    try:
        precision.loss_scale = LossScale.from_state(meta["loss_scale"])
    except ValueError:
        raise CheckpointError(f"{checkpoint}: damaged checkpoint: its loss scale "
                              f"{meta['loss_scale']!r:.80} is not a power of two in range "
                              "with a step count") from None
