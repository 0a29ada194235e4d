"""The bytes of one message between ranks under ``--sync async``: a JSON head, then arrays.

Both asynchronous couriers send a replica's increments to other ranks as one
raw byte message: :mod:`convnet.runtime.processes.rank_courier` with a shard's number
and costs, :mod:`convnet.runtime.processes.increment_link` with a step's number.  A
:class:`MessageLayout` is that message: a JSON head of a fixed size, then
every array as float32, layers and array names in sorted order.  Both sides
make the same layout from the net, so no shape travels and a receive buffer
has the message's exact size (a byte receive needs it in advance).
"""

from __future__ import annotations

import json

import numpy as np


class MessageLayout:
    """Messages of a JSON head of ``head_bytes``, then every array of ``shapes`` (layer ->
    array name -> shape, the same on every rank: one net) as float32."""

    def __init__(self, shapes: dict[str, dict[str, tuple[int, ...]]], head_bytes: int):
        self.fields = [(layer, k, tuple(shapes[layer][k]))
                       for layer in sorted(shapes) for k in sorted(shapes[layer])]
        self.head_bytes = head_bytes
        self.floats = sum(int(np.prod(shape)) for _, _, shape in self.fields)
        self.nbytes = head_bytes + 4 * self.floats

    def pack(self, head: dict, arrays: dict) -> np.ndarray:
        """One message; ``arrays`` holds host arrays (layer -> name -> array)."""
        text = json.dumps(head).encode()
        if len(text) > self.head_bytes:
            raise ValueError(f"the head of a message needs {len(text)} bytes; this message "
                             f"has room for {self.head_bytes}")
        message = np.zeros(self.nbytes, np.uint8)
        message[:len(text)] = np.frombuffer(text, np.uint8)
        np.concatenate([np.asarray(arrays[layer][k], np.float32).reshape(-1)
                        for layer, k, _ in self.fields],
                       out=message[self.head_bytes:].view(np.float32))
        return message

    def unpack(self, message: np.ndarray) -> tuple[dict, dict]:
        """(the JSON head, layer -> name -> array): the arrays are views of ``message``."""
        head = json.loads(message[:self.head_bytes].tobytes().rstrip(b"\0"))
        floats = message[self.head_bytes:].view(np.float32)
        arrays: dict[str, dict[str, np.ndarray]] = {}
        offset = 0
        for layer, k, shape in self.fields:
            size = int(np.prod(shape))
            arrays.setdefault(layer, {})[k] = floats[offset:offset + size].reshape(shape)
            offset += size
        return head, arrays


__all__ = ["MessageLayout"]
