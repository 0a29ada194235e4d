"""Carrying out the sends and receives between processes (see :mod:`convnet.runtime.step.rank_tasks`).

What a transfer carries lives in a step's buffers or in the weight store on
the sending side, and goes to the same place on the receiving side, as the
in-process pull it replaces would have put it:

* ``act``: an activation shard, into the receiver's activations;
* ``grad``: a consumer's gradient for an input, added into the input's gradient;
* ``grad-slice`` / ``avg-slice`` / ``weight-slice``: one slice of every
  gradient or weight array of a layer (keys in sorted order, concatenated
  into one message; the arrays that learn, except for an average of all),
  kept for the reduce, average or gather task that waits for it;
* ``stats``: one replica's statistics for a BatchStats operation, kept for the
  combination that waits for it.

Arrays travel through the host as float32 (batch statistics as float64, their bits
sent as twice as many float32 words).  Receive buffers are made with
the shape both sides derive from the plan (piece bounds, output shapes,
slice bounds), so no shape is ever sent.  Pending sends are completed when
the step ends (:meth:`Transfers.finish_sends`): until then each request
keeps its array alive, and every send carries an array that nothing writes
in place (activations are replaced, popped gradients and concatenated
slices are fresh copies).
"""

from __future__ import annotations

import numpy as np


def float32(array: np.ndarray) -> np.ndarray:
    """What travels: float32 (activations of a lower ``--precision`` are widened; the
    receiver's next layer casts them back)."""
    return array.astype(np.float32, copy=False)


def accumulate(store: dict, key, value) -> None:
    """Sum into ``store[key]`` without writing into ``value``, which a layer may
    have handed out as a view shared with another gradient."""
    store[key] = store[key] + value if key in store else value


class Transfers:
    """The SEND and RECV actions of one process's executor."""

    def __init__(self, comm, net, devices: list, store, collective_of, reads):
        self.reads = reads  # the executor's HostReads: a send waits for its array
        self.comm = comm
        self.net = net
        self.devices = devices
        self.store = store
        self.collective_of = collective_of  # layer -> its ChunkedAllReduce (slice bounds)

    # ------------------------------------------------------------------ sends
    def send(self, task, buffers) -> None:
        transfer = task.transfer
        array = self._outgoing(task, buffers)
        buffers.sends.append(self.comm.isend(array, transfer.peer, transfer.tag))

    def _outgoing(self, task, buffers) -> np.ndarray:
        op, transfer, device = task.op, task.transfer, self.devices[task.device]
        read = self.reads.read
        if transfer.what == "act":
            return float32(read(device, buffers.acts[(op.layer, op.shard, op.src)]))
        if transfer.what == "grad":
            return float32(read(device,
                                buffers.gouts.pop((op.consumer, op.layer, op.shard, op.src))))
        if transfer.what == "stats":  # float64 bits, sent as twice as many float32 words
            stats = read(device, buffers.own_statistics[(op.index, transfer.source_replica)])
            return np.ascontiguousarray(stats, np.float64).view(np.float32)
        source = (self.store.grads if transfer.what == "grad-slice" else self.store.weights)
        arrays = source[op.layer][transfer.source_replica]
        parts = [read(device, arrays[k].reshape(-1)[lo:hi])
                 for k, lo, hi in self._slice_layout(task)]
        return np.concatenate(parts).astype(np.float32, copy=False)

    def finish_sends(self, buffers) -> None:
        """Wait until every send of the step has left (its buffer may then be freed)."""
        if buffers.sends:
            self.comm.wait_all(buffers.sends)
            buffers.sends.clear()

    # --------------------------------------------------------------- receives
    def recv(self, task, buffers) -> None:
        op, transfer, device = task.op, task.transfer, self.devices[task.device]
        if transfer.what in ("act", "grad"):
            start, stop = buffers.pieces[op.shard]
            out = np.empty((stop - start,) + tuple(self.net[op.layer].output_shape), np.float32)
            self.comm.recv(out, transfer.peer, transfer.tag, _described(task))
            key = (op.layer, op.shard, op.dst)
            if transfer.what == "act":
                buffers.acts[key] = device.to_device(out)
            else:
                accumulate(buffers.grads, key, device.to_device(out))
            return
        if transfer.what == "stats":  # one replica's statistics, op.nbytes of float64
            out = np.empty(op.nbytes // 4, np.float32)
            self.comm.recv(out, transfer.peer, transfer.tag, _described(task))
            buffers.received[("stats", op.index, transfer.target_replica,
                              transfer.source_replica)] = device.copy_from(out.view(np.float64))
            return
        layout = self._slice_layout(task)
        out = np.empty(sum(hi - lo for _, lo, hi in layout), np.float32)
        self.comm.recv(out, transfer.peer, transfer.tag, _described(task))
        parts, offset = {}, 0
        for k, lo, hi in layout:
            parts[k] = device.to_device(out[offset:offset + hi - lo])
            offset += hi - lo
        buffers.received[received_key(task)] = parts

    def _slice_layout(self, task) -> list[tuple[str, int, int]]:
        """(key, lo, hi) of the slice a slice transfer carries, for every weight array of
        its layer, in key order (shapes from a local replica's weights)."""
        transfer, layer = task.transfer, task.op.layer
        weights = self.store.weights[layer]
        local = weights[transfer.source_replica] or weights[transfer.target_replica]
        part = (transfer.source_replica if transfer.what == "weight-slice"
                else transfer.target_replica)
        bounds = self.collective_of(layer).bounds
        # gradients, and the updates gathered, exist for the arrays that learn only
        keys = sorted(local) if transfer.what == "avg-slice" else self.store.learned[layer]
        return [(k, *bounds(local[k].size, part)) for k in keys]


_KINDS = {"act": "activation", "grad": "gradient", "stats": "batch statistics",
          "grad-slice": "gradient slice",
          "avg-slice": "weight slice to average", "weight-slice": "updated weight slice"}


def _described(task) -> str:
    """What a receive waits for, in words, for the error if it never comes."""
    return (f"receiving layer {task.op.layer}'s "
            f"{_KINDS.get(task.transfer.what, task.transfer.what)}")


def received_key(task) -> tuple:
    """Where a received slice waits in the step's buffers for its reduce or gather."""
    transfer, op = task.transfer, task.op
    return (transfer.what, op.layer, op.pass_index, transfer.target_replica,
            transfer.source_replica)


__all__ = ["Transfers", "accumulate", "received_key"]
