"""Cutting a data batch into the minibatches a step trains on."""

from __future__ import annotations

from convnet.errors import DataError


def minibatch_bounds(n: int, mini: int, shards: int,
                     batch: int | None = None) -> list[tuple[int, int]]:
    """(start, stop) of each minibatch of a batch of ``n`` cases (data batch ``batch``,
    where known, for the error): ``mini`` cases each; a tail too short to give every
    piece (``shards``: every shard's micro-batches) a case joins the minibatch before it."""
    if n < shards:
        which = f"data batch {batch}" if batch is not None else "a data batch"
        raise DataError(f"{which} holds {n} case(s), too few for the {shards} shards of a "
                        f"minibatch (a case each): give batches of at least {shards} cases")
    starts = list(range(0, n, mini))
    if len(starts) > 1 and n - starts[-1] < shards:
        starts.pop()
    return list(zip(starts, starts[1:] + [n]))


def minibatches(batch: list, mini: int, shards: int):
    """The minibatches of ``batch`` (its columns cut alike), by :func:`minibatch_bounds`."""
    for start, stop in minibatch_bounds(len(batch[0]), mini, shards):
        yield [column[start:stop] for column in batch]
