"""Loading the next batch in a background thread while the current one trains.

Reading and augmenting a CIFAR batch takes a noticeable fraction of a training
step, and numpy releases the GIL for most of it, so one loader thread hides it.
The queue holds at most ``depth`` finished batches, bounding memory.  A loader
exception is handed to the consumer and raised from ``next()``; a loader that
vanishes without a word is reported too, so the consumer can never wait
forever.  ``close()`` (or leaving a ``with`` block) stops the loader early.
``wait_seconds`` is the time the consumer spent waiting in ``next()`` for a
batch that was not ready yet (what the training loop reports).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Iterable

import numpy as np

from convnet.errors import DataError

_END = object()
_POLL_S = 0.05


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class BatchPrefetcher:
    """Iterate ``(batch_id, batch)`` over ``batch_ids`` in order, loading ahead.

    ``batch`` is ``provider.get_batch(batch_id, train, epoch)``, or with
    ``views=True`` ``provider.get_test_views(batch_id)`` (for multiview testing).
    """

    def __init__(self, provider, batch_ids: Iterable[int], train: bool, epoch: int = 0, *,
                 views: bool = False, depth: int = 1):
        self._provider = provider
        self._batch_ids = list(batch_ids)
        self._train = train
        self._epoch = epoch
        self._views = views
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finished = False
        self.wait_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name="batch-prefetch", daemon=True)
        self._thread.start()

    def _load(self, batch_id: int) -> list[np.ndarray]:
        if self._views:
            return self._provider.get_test_views(batch_id)
        return self._provider.get_batch(batch_id, self._train, self._epoch)

    def _run(self) -> None:
        try:
            for batch_id in self._batch_ids:
                if self._stop.is_set() or not self._put((batch_id, self._load(batch_id))):
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

    def __next__(self) -> tuple[int, list[np.ndarray]]:
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
        return item

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
        """Stop loading and wait for the loader thread (at most one batch's load)."""
        self._finished = True
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._thread.join()

    def __enter__(self) -> "BatchPrefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
