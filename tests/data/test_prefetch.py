"""BatchPrefetcher: order, error propagation, no hangs, early close, bounded memory."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from convnet.data import BatchPrefetcher, DataOptions, make_provider
from convnet.data.host_buffers import HostBuffers
from convnet.errors import DataError
from tests.support.threads import within


class FakeProvider:
    def __init__(self, fail_at=None, delay=0.0):
        self.fail_at, self.delay, self.loaded = fail_at, delay, []

    def get_batch(self, batch_id, train, epoch):
        time.sleep(self.delay)
        if batch_id == self.fail_at:
            raise DataError(f"batch {batch_id} is broken")
        self.loaded.append(batch_id)
        return [np.full((2, 1), batch_id, np.float32), np.zeros((2, 1), np.float32)]

    def get_test_views(self, batch_id):
        return [np.full((3, 2, 1), batch_id, np.float32), np.zeros((2, 1), np.float32)]


def test_yields_the_provider_batches_in_order():
    provider = make_provider("dummy", options=DataOptions(cases_per_batch=16, inner_size=28))
    got = within(10, lambda: list(BatchPrefetcher(provider, [3, 1, 2], train=True, epoch=4)))
    assert [batch_id for batch_id, _ in got] == [3, 1, 2]
    for batch_id, (images, labels) in got:
        expected = provider.get_batch(batch_id, train=True, epoch=4)
        np.testing.assert_array_equal(images, expected[0])
        np.testing.assert_array_equal(labels, expected[1])


def test_views_mode():
    got = within(5, lambda: list(BatchPrefetcher(FakeProvider(), [7], train=False, views=True)))
    assert got[0][0] == 7 and got[0][1][0].shape == (3, 2, 1)


def test_loader_exception_reaches_the_consumer():
    prefetcher = BatchPrefetcher(FakeProvider(fail_at=2), [1, 2, 3], train=True, epoch=0)
    assert within(5, lambda: next(prefetcher))[0] == 1
    with pytest.raises(DataError, match="batch 2 is broken"):
        within(5, lambda: next(prefetcher))
    with pytest.raises(StopIteration):
        within(5, lambda: next(prefetcher))


def test_silently_dead_loader_does_not_hang(monkeypatch):
    monkeypatch.setattr(BatchPrefetcher, "_run", lambda self: None)
    prefetcher = BatchPrefetcher(FakeProvider(), [1, 2], train=True, epoch=0)
    with pytest.raises(DataError, match="stopped without delivering"):
        within(5, lambda: next(prefetcher))


def test_close_early_stops_loading():
    provider = FakeProvider(delay=0.02)
    prefetcher = BatchPrefetcher(provider, range(1, 200), train=True, epoch=0)
    within(5, lambda: next(prefetcher))
    within(5, prefetcher.close)
    loaded = len(provider.loaded)
    time.sleep(0.1)
    assert len(provider.loaded) == loaded < 10
    with pytest.raises(StopIteration):
        next(prefetcher)


def test_queue_is_bounded_and_context_manager_closes():
    provider = FakeProvider()
    with BatchPrefetcher(provider, range(1, 100), train=True, epoch=0, depth=1) as prefetcher:
        time.sleep(0.2)
        # one batch queued, one finished and waiting to be queued
        assert len(provider.loaded) <= 2
        within(5, lambda: next(prefetcher))
    assert not prefetcher._thread.is_alive()


def test_wait_seconds_counts_the_time_the_consumer_waited_not_the_time_it_worked():
    """Loading takes 0.1 s a batch; a consumer that works 0.3 s per batch waits only for
    the first, one that works not at all waits for each."""
    slow_consumer = BatchPrefetcher(FakeProvider(delay=0.1), range(4), train=True)
    for _ in slow_consumer:
        time.sleep(0.3)
    fast_consumer = BatchPrefetcher(FakeProvider(delay=0.1), range(4), train=True)
    list(fast_consumer)
    assert 0.08 < slow_consumer.wait_seconds < 0.3
    assert fast_consumer.wait_seconds > 0.35


class StoredProvider:
    """Loads (epoch, batch) pairs into ``empty``'s arrays, noting the order of the calls;
    ``asked`` is set once the batch ``watch`` is asked for."""

    def __init__(self, watch=None):
        self.calls, self.watch = [], watch
        self.asked = threading.Event()

    def load_batch(self, batch_id, train, epoch, empty=np.empty):
        self.calls.append((epoch, batch_id))
        if (epoch, batch_id) == self.watch:
            self.asked.set()
        images = empty((4, 3), np.uint8)
        images[...] = 10 * epoch + batch_id
        return [images, np.zeros((4, 1), np.float32)]


def test_one_prefetcher_over_epochs_loads_the_next_epochs_first_batch_ahead():
    """No first-batch wait: while the consumer holds the last batch of epoch 1, the first
    of epoch 2 is being loaded (the loader is asked for it before the consumer asks)."""
    provider = StoredProvider(watch=(2, 1))
    schedule = [(1, 2), (1, 3), (2, 1), (2, 2)]
    with BatchPrefetcher(provider, schedule, train=True, stored=True) as loader:
        assert within(5, lambda: [next(loader)[0] for _ in range(2)]) == [2, 3]
        assert provider.asked.wait(5)  # the consumer has not asked for it yet
        rest = within(5, lambda: [(b, int(batch[0][0, 0])) for b, batch in loader])
    assert rest == [(1, 21), (2, 22)] and provider.calls == schedule


def test_batches_are_loaded_into_reused_buffers_at_most_depth_plus_two_at_once():
    """Each batch is held until the consumer takes the next; the pool then hands its
    buffer to a later batch, so ten batches need only the buffers in flight at once."""
    pool = HostBuffers()
    seen = []
    with BatchPrefetcher(StoredProvider(), [(1, b) for b in range(10)], train=True,
                         stored=True, depth=1, buffers=pool) as loader:
        for batch_id, (images, _) in loader:
            time.sleep(0.01)  # the loader runs ahead, as far as its queue lets it
            assert (images == 10 + batch_id).all()  # not overwritten while held
            seen.append(images.ctypes.data)
    assert pool.allocations <= 3 and len(set(seen)) <= 3 and pool.free == pool.allocations


def test_a_buffer_too_small_for_a_later_batch_is_replaced_not_kept():
    pool = HostBuffers()
    small = pool.lease()
    small.empty((10,), np.uint8)
    small.release()
    large = pool.lease()
    assert large.empty((2, 10), np.float32).shape == (2, 10)
    large.release()
    again = pool.lease()
    again.empty((5,), np.uint8)  # fits in the large one
    assert pool.allocations == 2 and pool.free == 0
