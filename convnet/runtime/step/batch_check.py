"""Refuse a minibatch the plan cannot run, with a message that names the data column."""

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
    num_cases = sizes.pop()
    if num_cases < plan.num_pieces:
        pieces = (f"{plan.num_shards} shards" if plan.micro_batches == 1 else
                  f"{plan.num_shards} shard(s) of {plan.micro_batches} micro-batches")
        raise DataError(f"a minibatch of {num_cases} case(s) cannot be split into {pieces}")
    return num_cases
