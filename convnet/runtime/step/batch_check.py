"""Refuse a minibatch the plan cannot run, with a message that names the data column.

The minibatch is checked on the host, before any of it is uploaded: its columns
against the data layers, and the class labels that each ``cost.logreg`` layer reads
from a data layer against the width of its probabilities (:func:`check_labels`; the
layer itself would need the device's answer, a wait in every step).
"""

from __future__ import annotations

import math

import numpy as np

from convnet.config.model import NetConfig
from convnet.errors import DataError
from convnet.plan.ops import Plan


def check_batch(net: NetConfig, plan: Plan, batch: list) -> int:
    """The number of cases of ``batch`` (one array per data column, cases first).

    Every data layer the plan places must find its column, with cases of its
    shape (or of the same size, to be reshaped), all columns must have the
    same number of cases, and there must be at least one case per shard.
    """
    sizes = set()
    for ldef in net:
        if ldef.is_data and ldef.name in plan.layers and plan.layers[ldef.name].devices:
            idx = ldef.attrs["dataIdx"]
            if idx >= len(batch):
                raise DataError(f"data layer '{ldef.name}' reads column {idx}, but the data "
                                f"provider gives {len(batch)} column(s)")
            array = batch[idx]
            want = tuple(ldef.output_shape)
            if tuple(array.shape[1:]) != want and int(np.prod(array.shape[1:])) != math.prod(want):
                raise DataError(f"data layer '{ldef.name}' expects cases of shape "
                                f"{'x'.join(map(str, want))}, the data provider gives "
                                f"{'x'.join(map(str, array.shape[1:]))}")
            sizes.add(array.shape[0])
    if len(sizes) != 1:
        raise DataError(f"data columns have different case counts: {sorted(sizes)}")
    check_labels(net, plan, batch)
    num_cases = sizes.pop()
    if num_cases < plan.num_pieces:
        pieces = (f"{plan.num_shards} shards" if plan.micro_batches == 1 else
                  f"{plan.num_shards} shard(s) of {plan.micro_batches} micro-batches")
        raise DataError(f"a minibatch of {num_cases} case(s) cannot be split into {pieces}")
    return num_cases


def labels_checked_on_host(net: NetConfig) -> list[str]:
    """The ``cost.logreg`` layers whose labels come straight from a data layer: those
    :func:`check_labels` checks, so that the layers need not."""
    return [ldef.name for ldef in net
            if ldef.type == "cost.logreg" and net[ldef.inputs[0]].is_data]


def check_labels(net: NetConfig, plan: Plan, batch: list) -> None:
    """Every label a placed ``cost.logreg`` layer reads from a data column is a class
    index of its probabilities (the first bad one, in case order, is named)."""
    for name in labels_checked_on_host(net):
        if name not in plan.layers or not plan.layers[name].devices:
            continue
        ldef = net[name]
        labels = np.asarray(batch[net[ldef.inputs[0]].attrs["dataIdx"]]).reshape(-1)
        classes = math.prod(net[ldef.inputs[1]].output_shape)
        bad = (labels < 0) | (labels >= classes) | np.isnan(labels)
        if bad.any():
            raise DataError(f"layer '{name}': label {float(labels[bad][0]):g} (from "
                            f"'{ldef.inputs[0]}') is not a class index of its {classes}-way "
                            f"input '{ldef.inputs[1]}'")
