"""Loading the next batches in a background thread while the current one trains.

Reading and augmenting a batch takes a noticeable fraction of a training step
(decoding JPEGs runs on the provider's own threads, and numpy releases the GIL for
most of the rest), so one loader thread hides it.  The queue holds at most ``depth``
finished batches: with the one the loader is making and the one the consumer holds,
at most ``depth + 2`` batches are in flight, bounding memory.  The batches may span
epochs (``(epoch, batch)`` pairs), so the training loop makes one prefetcher for
the whole run and the first batch of an epoch is loaded ahead like the others.

With ``buffers`` (a :class:`~convnet.data.host_buffers.HostBuffers`) each batch is
loaded into a lease of the pool's buffers (pinned memory for a GPU), given back when
the consumer asks for the next batch or closes the prefetcher: a batch handed out
stays valid until then.  A loader exception is handed to the consumer and raised
from ``next()``; a loader that vanishes without a word is reported too, so the
consumer can never wait forever.  ``close()`` (or leaving a ``with`` block) stops
the loader early.  ``wait_seconds`` is the time the consumer spent waiting in
``next()`` for a batch that was not ready yet (what the training loop reports).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Iterable

import numpy as np

from convnet.data.host_buffers import HostBuffers, Lease
from convnet.errors import DataError

_END = object()
_POLL_S = 0.05


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def _release(item) -> None:
    """Give back the buffers of a queued ``(batch_id, batch, lease)`` never handed out."""
    if isinstance(item, tuple) and item[2] is not None:
        item[2].release()


class BatchPrefetcher:
    """Iterate ``(batch_id, batch)`` over ``batch_ids`` in order, loading ahead.

    ``batch_ids`` holds batch numbers (of ``epoch``) or ``(epoch, batch)`` pairs.
    ``batch`` is ``provider.get_batch(batch_id, train, epoch)``, with ``stored=True``
    ``provider.load_batch`` (images as stored, made float on the device), or with
    ``views=True`` ``provider.get_test_views(batch_id)`` (for multiview testing).
    """

    def __init__(self, provider, batch_ids: Iterable[int | tuple[int, int]], train: bool,
                 epoch: int = 0, *, views: bool = False, stored: bool = False,
                 depth: int = 1, buffers: HostBuffers | None = None):
        if depth < 1:
            raise ValueError(f"the prefetcher loads at least one batch ahead, not {depth}")
        self._provider = provider
        self._items = [item if isinstance(item, tuple) else (epoch, item) for item in batch_ids]
        self._train = train
        self._views = views
        self._stored = stored
        self._buffers = buffers
        self._held: Lease | None = None  # the lease of the batch the consumer holds
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finished = False
        self.wait_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="batch-prefetch", daemon=True)
        self._thread.start()

    def _load(self, epoch: int, batch_id: int, lease: Lease | None) -> list:
        if self._views:
            return self._provider.get_test_views(batch_id)
        if self._stored:
            return self._provider.load_batch(batch_id, self._train, epoch,
                                             lease.empty if lease is not None else np.empty)
        return self._provider.get_batch(batch_id, self._train, epoch)

    def _run(self) -> None:
        try:
            for epoch, batch_id in self._items:
                if self._stop.is_set():
                    return
                lease = self._buffers.lease() if self._buffers is not None else None
                try:
                    item = (batch_id, self._load(epoch, batch_id, lease), lease)
                except BaseException:
                    _release((batch_id, None, lease))
                    raise
                if not self._put(item):
                    _release(item)
                    return
            self._put(_END)
        except BaseException as error:  # handed to the consumer, who decides
            self._put(_Failure(error))

    def _put(self, item) -> bool:
        """Queue ``item`` unless closed first; False when closed."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> "BatchPrefetcher":
        return self

    def __next__(self) -> tuple[int, list]:
        self._give_back()  # the consumer is done with the batch it held
        if self._finished:
            raise StopIteration
        started = time.perf_counter()
        try:
            item = self._next_item()
        finally:
            self.wait_seconds += time.perf_counter() - started
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.error
        batch_id, batch, self._held = item
        return batch_id, batch

    def _next_item(self):
        while True:
            try:
                item = self._queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                # Alive is checked before empty: a loader that queued its last
                # item and then exited is not mistaken for a silent death.
                if not self._thread.is_alive() and self._queue.empty():
                    self._finished = True
                    raise DataError("the batch loader thread stopped without delivering "
                                    "a batch") from None
        return item

    def close(self) -> None:
        """Stop loading and wait for the loader thread (at most one batch's load); the
        batches' buffers go back to the pool."""
        self._finished = True
        self._stop.set()
        self._give_back()
        while True:
            try:
                _release(self._queue.get_nowait())
            except queue.Empty:
                break
        self._thread.join()
        while True:  # what the loader queued before it saw the stop
            try:
                _release(self._queue.get_nowait())
            except queue.Empty:
                break

    def _give_back(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release()

    def __enter__(self) -> "BatchPrefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
